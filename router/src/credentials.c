#define _GNU_SOURCE
#include "credentials.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* RFC 6265 cookie-octets. */
static bool cookie_value(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x21 || c > 0x7e || c == '"' || c == ',' || c == ';' || c == '\\')
            return false;
    }
    return n > 0;
}

int sbx_cookie_set(const struct sbx_authz_verdict *v, const char *path, bool secure, time_t now,
                   char *buf, size_t size)
{
    char age[32] = "";
    int n;

    if (v->from != SBX_AUTHZ_FROM_QUERY || !cookie_value(v->token, v->token_len) ||
        strpbrk(path, ";\r\n"))
        return 0;
    if (v->expires) {
        if (v->expires <= (int64_t)now)
            return 0;
        snprintf(age, sizeof(age), "; Max-Age=%lld", (long long)(v->expires - (int64_t)now));
    }
    n = snprintf(buf, size, "%s=%.*s; Path=%s; HttpOnly; SameSite=Lax%s%s", SBX_AUTHZ_COOKIE,
                 (int)v->token_len, v->token, path, secure ? "; Secure" : "", age);
    return n < 0 || (size_t)n >= size ? -ENOSPC : n;
}

int sbx_authz_http(struct sbx_authz *a, const struct sbx_authz_http_req *r,
                   struct sbx_authz_http *out)
{
    char *qtok = malloc(SBX_AUTHZ_TOKEN_MAX + 1);
    struct sbx_authz_req req = {.ns = r->ns,
                                .name = r->name,
                                .overrides = r->overrides,
                                .sandboxd = r->sandboxd,
                                .authorization = r->authorization,
                                .cookie = r->cookie};
    struct sbx_authz_verdict v;
    struct sbx_authz_forward f;
    struct sbx_error e = {0};
    int q;

    memset(out, 0, sizeof(*out));
    out->status = 500;
    if (!qtok) {
        snprintf(out->detail, sizeof(out->detail), "out of memory");
        return out->rc = -ENOMEM;
    }
    q = sbx_query_token(r->target, qtok, SBX_AUTHZ_TOKEN_MAX + 1);
    if (q < 0) {
        free(qtok);
        out->status = 400;
        out->reason = "a bad token query parameter";
        snprintf(out->detail, sizeof(out->detail), "Invalid token query parameter.");
        return out->rc = q;
    }
    req.query_token = q ? qtok : NULL;
    out->rc = sbx_authz_check(a, &req, true, &v, &e);
    out->reason = v.reason;
    if (out->rc < 0) {
        out->status = sbx_authz_http_status(out->rc);
        snprintf(out->detail, sizeof(out->detail), "%s", e.msg);
        free(qtok);
        return out->rc;
    }
    sbx_authz_forward(a, &req, &v, &f);
    out->status = 200;
    out->keep_authorization = f.keep_authorization;
    out->strip_query_token = !f.keep_query_token;
    if (f.set_authorization && v.token_len <= SBX_AUTHZ_TOKEN_MAX)
        snprintf(out->authorization, sizeof(out->authorization), "Bearer %.*s", (int)v.token_len,
                 v.token);
    /* A cookie only for a token the router checked (allow-all reads none). */
    if (sbx_authz_mode(a) == SBX_AUTHZ_ALLOW_ALL ||
        sbx_cookie_set(&v, r->cookie_path ? r->cookie_path : "/", r->secure, time(NULL),
                       out->set_cookie, sizeof(out->set_cookie)) < 0)
        out->set_cookie[0] = '\0';
    free(qtok);
    return 0;
}
