#include "registry_http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cleanup.h"

SBX_DEFINE_CLEANUP(struct curl_slist *, curl_slist_free_all)

#define TOKEN_MAX  (64 * 1024)
#define REDIRS_MAX 5L

struct sink {
    char *buf;
    size_t len, max;
    bool over;
};

struct heads {
    char content_type[128];
    char challenge[2048];
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct sink *s = arg;
    size_t add = size * n;

    if (add > s->max - s->len) {
        s->over = true;
        return 0;
    }
    char *nb = realloc(s->buf, s->len + add + 1);
    if (!nb)
        return 0;
    memcpy(nb + s->len, p, add);
    s->buf = nb;
    s->len += add;
    s->buf[s->len] = '\0';
    return add;
}

/* Keeps the header value of name (a header line of n bytes) into out, trimmed. */
static void take_header(const char *line, size_t n, const char *name, char *out, size_t size)
{
    size_t k = strlen(name);

    if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':')
        return;
    const char *v = line + k + 1;
    size_t vn = n - k - 1;
    while (vn && (*v == ' ' || *v == '\t'))
        v++, vn--;
    while (vn && (v[vn - 1] == '\r' || v[vn - 1] == '\n' || v[vn - 1] == ' '))
        vn--;
    snprintf(out, size, "%.*s", (int)vn, v);
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct heads *h = arg;
    size_t len = size * n;

    if (len >= 5 && !strncmp(p, "HTTP/", 5)) /* a new response (after a redirect) */
        *h = (struct heads){0};
    take_header(p, len, "content-type", h->content_type, sizeof(h->content_type));
    take_header(p, len, "www-authenticate", h->challenge, sizeof(h->challenge));
    return len;
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    const atomic_bool *cancel = arg;

    (void)dt, (void)dn, (void)ut, (void)un;
    return cancel && atomic_load(cancel) ? 1 : 0;
}

static int curl_errno(CURLcode rc, const struct sink *s)
{
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
        return ECONNREFUSED;
    case CURLE_OPERATION_TIMEDOUT:
        return ETIMEDOUT;
    case CURLE_COULDNT_RESOLVE_HOST:
        return EHOSTUNREACH;
    case CURLE_ABORTED_BY_CALLBACK:
        return ECANCELED;
    case CURLE_WRITE_ERROR:
        return s->over ? EFBIG : ENOMEM;
    default:
        return EIO;
    }
}

/* One GET of url with the session's credentials as they stand. user: Basic credentials for
 * this request only (the token request), else the session's. */
static int get_once(struct sbx_reg_session *s, const char *url, const char *accept, size_t max,
                    const struct sbx_registry_creds *user, struct sbx_reg_response *resp,
                    struct heads *heads, struct sbx_error *err)
{
    _cleanup_(curl_slist_free_allp) struct curl_slist *hdr = NULL;
    struct sink sink = {.max = max};
    char line[300];
    CURL *h = s->h;

    curl_easy_reset(h);
    if (accept) {
        snprintf(line, sizeof(line), "Accept: %s", accept);
        hdr = curl_slist_append(hdr, line);
    }
    if (!user && s->bearer)
        hdr = curl_slist_append(hdr, s->bearer);
    const struct sbx_registry_creds *basic = user ? user : s->basic ? &s->creds[s->next - 1] : NULL;
    if (basic && basic->user[0]) {
        curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(h, CURLOPT_USERNAME, basic->user);
        curl_easy_setopt(h, CURLOPT_PASSWORD, basic->pass);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, s->user_agent);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https,http");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "https,http");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, REDIRS_MAX);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, s->timeout_ms);
    if (s->ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, s->ca_file);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, heads);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *)s->cancel);
    *heads = (struct heads){0};
    CURLcode rc = curl_easy_perform(h);
    if (rc != CURLE_OK) {
        free(sink.buf);
        int e = curl_errno(rc, &sink);
        if (e == EFBIG)
            return sbx_error_set(err, e, "registry \"%s\": answer larger than %zu bytes", s->host,
                                 max);
        return sbx_error_set(err, e, "registry \"%s\": %s", s->host, curl_easy_strerror(rc));
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
    resp->body = sink.buf ? sink.buf : strdup("");
    resp->len = sink.len;
    snprintf(resp->content_type, sizeof(resp->content_type), "%s", heads->content_type);
    return resp->body ? 0 : sbx_error_set(err, ENOMEM, "registry response");
}

/* The token of a Bearer challenge, asked with the credential c (NULL: anonymously). 0 and the
 * session's bearer header set; -EACCES when the token service refuses c. */
static int fetch_token(struct sbx_reg_session *s, const struct sbx_challenge *ch,
                       const struct sbx_registry_creds *c, struct sbx_error *err)
{
    char scope[600], url[1800], *esc_svc = NULL, *esc_scope = NULL;
    struct sbx_reg_response resp = {0};
    struct heads heads;
    int r;

    if (ch->scope[0])
        snprintf(scope, sizeof(scope), "%s", ch->scope);
    else
        snprintf(scope, sizeof(scope), "repository:%s:pull", s->repo);
    esc_svc = curl_easy_escape(s->h, ch->service, 0);
    esc_scope = curl_easy_escape(s->h, scope, 0);
    int n = snprintf(url, sizeof(url), "%s%sservice=%s&scope=%s", ch->realm,
                     strchr(ch->realm, '?') ? "&" : "?", esc_svc ? esc_svc : "",
                     esc_scope ? esc_scope : "");
    curl_free(esc_svc);
    curl_free(esc_scope);
    if (n < 0 || (size_t)n >= sizeof(url))
        return sbx_error_set(err, EPROTO, "registry \"%s\": token realm too long", s->host);
    static const struct sbx_registry_creds anon = {0};
    s->tokens++;
    if ((r = get_once(s, url, "application/json", TOKEN_MAX, c ? c : &anon, &resp, &heads, err)) <
        0)
        return r;
    if (resp.status == 401 || resp.status == 403) {
        sbx_reg_response_release(&resp);
        return sbx_error_set(err, EACCES, "registry \"%s\": token service refused %s", s->host,
                             c ? "the credentials" : "an anonymous request");
    }
    json_auto_t *doc = json_loadb(resp.body, resp.len, 0, NULL);
    long status = resp.status;
    sbx_reg_response_release(&resp);
    const char *tok = json_string_value(json_object_get(doc, "token"))
                          ?: json_string_value(json_object_get(doc, "access_token"));
    if (status != 200 || !tok || !*tok)
        return sbx_error_set(err, EPROTO,
                             "registry \"%s\": token service answered HTTP %ld "
                             "without a token",
                             s->host, status);
    free(s->bearer);
    if (asprintf(&s->bearer, "Authorization: Bearer %s", tok) < 0) {
        s->bearer = NULL;
        return sbx_error_set(err, ENOMEM, "token");
    }
    return 0;
}

/* Answers the challenge of a 401 with the next credential to try. -EACCES when none is left. */
static int answer(struct sbx_reg_session *s, const char *header, struct sbx_error *err)
{
    struct sbx_challenge ch;
    int r;

    free(s->bearer);
    s->bearer = NULL;
    s->basic = false;
    if ((r = sbx_challenge_parse(header, &ch, err)) < 0)
        return sbx_error_wrap(err, "registry \"%s\": unauthorized, and its challenge", s->host);
    for (;;) {
        /* Anonymous first only when no credential is given: then it is the only try. */
        bool anon = s->ncreds == 0 && s->next == 0;
        if (!anon && s->next >= s->ncreds)
            return sbx_error_set(err, EACCES, "registry \"%s\": unauthorized for \"%s\" (%s)",
                                 s->host, s->repo,
                                 s->ncreds ? "the pull secrets' credentials refused"
                                           : "no pull secret has credentials for it");
        const struct sbx_registry_creds *c = anon ? NULL : &s->creds[s->next];
        s->next++;
        if (ch.scheme == SBX_AUTH_BASIC) {
            if (!c)
                continue;
            s->basic = true;
            return 0;
        }
        r = fetch_token(s, &ch, c, err);
        if (r != -EACCES)
            return r;
    }
}

int sbx_reg_get(struct sbx_reg_session *s, const char *path, const char *accept, size_t max,
                struct sbx_reg_response *resp, struct sbx_error *err)
{
    char url[1200];
    struct heads heads;
    int r;

    if (snprintf(url, sizeof(url), "%s%s", s->base, path) >= (int)sizeof(url))
        return sbx_error_set(err, ENAMETOOLONG, "registry URL too long");
    for (;;) {
        if ((r = get_once(s, url, accept, max, NULL, resp, &heads, err)) < 0)
            return r;
        if (resp->status != 401)
            return 0;
        sbx_reg_response_release(resp);
        if (!heads.challenge[0])
            return sbx_error_set(err, EACCES, "registry \"%s\": unauthorized, no challenge",
                                 s->host);
        if ((r = answer(s, heads.challenge, err)) < 0)
            return r;
    }
}

void sbx_reg_response_release(struct sbx_reg_response *resp)
{
    free(resp->body);
    *resp = (struct sbx_reg_response){0};
}

void sbx_reg_session_release(struct sbx_reg_session *s)
{
    if (s->h)
        curl_easy_cleanup(s->h);
    free(s->bearer);
    s->h = NULL;
    s->bearer = NULL;
}
