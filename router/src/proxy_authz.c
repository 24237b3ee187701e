/* The proxy's side of authorization (authz.h, credentials.h): a request decided before it is
 * relayed, its refusal answered as the reference's, and what of its credentials goes on. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "credentials.h"
#include "log.h"
#include "proxy_types.h"

/* The first value of a field, NUL-terminated, malloc'ed; NULL when absent. */
static char *field_dup(const struct sbx_h1_msg *m, const char *name)
{
    const struct sbx_h1_field *f = sbx_h1_get(m, name);

    return f ? strndup(f->value, f->value_len) : NULL;
}

static bool has_field(const struct sbx_h1_msg *m, const char *name)
{
    const struct sbx_h1_field *f = sbx_h1_get(m, name);

    return f && f->value_len;
}

bool proxy_authorize(struct proxy_conn *c, const struct sbx_h1_msg *m, const struct sbx_target *t,
                     const struct sbx_preview *pv, struct exchange *x)
{
    char *target = strndup(m->target, m->target_len), *auth = field_dup(m, "Authorization"),
         *cookie = field_dup(m, "Cookie"), path[200];
    struct sbx_authz_http_req r = {
        .ns = t->ns,
        .name = t->id,
        .overrides = has_field(m, "X-Sandbox-Pod-IP") || has_field(m, "X-Sandbox-UID"),
        /* Without a port key (and not a preview URL, which names one) the request goes to
         * sandboxd's REST port; a port the client names is a user's, whatever its number. */
        .sandboxd = !has_field(m, "X-Sandbox-Port") && !pv->id[0],
        .target = target,
        .authorization = auth,
        .cookie = cookie,
        .cookie_path = "/",
        .secure = c->tls, /* the cookie is sent back over TLS only */
    };
    bool ok = false;

    x->az = malloc(sizeof(*x->az));
    if (!x->az || !target) {
        proxy_answer(c, 500, "out of memory", true);
        goto out;
    }
    if (pv->path) { /* the path form: the cookie belongs to that sandbox's port only */
        snprintf(path, sizeof(path), "/s/%s/%s/%s/", pv->ns, pv->id, pv->port);
        r.cookie_path = path;
    }
    if (sbx_authz_http(c->p->o.authz, &r, x->az) < 0) {
        log_debug("router: %s %s/%s refused: %s", c->peer, t->ns, t->id, x->az->reason);
        proxy_answer(c, (unsigned)x->az->status, x->az->detail, true);
        goto out;
    }
    ok = true;
out:
    free(target);
    free(auth);
    free(cookie);
    return ok;
}

void proxy_authz_done(struct exchange *x)
{
    free(x->az);
    x->az = NULL;
}

size_t proxy_authz_extra(const struct exchange *x)
{
    return x->az ? strlen(x->az->authorization) + 32 : 0;
}

bool proxy_authz_cookie(const struct exchange *x, const struct sbx_h1_field *f, char **ret)
{
    char *v;

    *ret = NULL;
    if (!x->az || f->name_len != 6 || strncasecmp(f->name, "Cookie", 6) != 0)
        return false;
    /* The router's cookie is ours alone: the rest of the header goes on. */
    v = strndup(f->value, f->value_len);
    /* Pairs are joined by "; " however they came ("a=1;b=2"): at most twice as long. */
    *ret = v ? malloc(2 * f->value_len + 2) : NULL;
    if (*ret && sbx_cookie_strip(v, *ret, 2 * f->value_len + 2) < 0)
        **ret = '\0';
    free(v);
    return true;
}

size_t proxy_authz_authorization(const struct exchange *x, const struct sbx_h1_msg *m, char *out,
                                 size_t size)
{
    const struct sbx_h1_field *f = sbx_h1_get(m, "Authorization");
    int n = 0;

    if (!x->az)
        n = 0;
    else if (x->az->authorization[0])
        n = snprintf(out, size, "Authorization: %s\r\n", x->az->authorization);
    else if (x->az->keep_authorization && f)
        n = snprintf(out, size, "Authorization: %.*s\r\n", (int)f->value_len, f->value);
    return n > 0 && (size_t)n < size ? (size_t)n : 0;
}
