#define _GNU_SOURCE
#include "authz.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "authz_cache.h"
#include "authz_kube.h"
#include "browser_token.h"
#include "scoped_token.h"

#define DEFAULT_TTL_MS 30000
#define DEFAULT_CACHE  2048

struct sbx_authz {
    struct sbx_authz_opts o;
    char *audiences;
    struct sbx_scoped_key key;
    struct sbx_authz_cache *cache;
    pthread_mutex_t lock;
    uint64_t allow, deny;
};

static const char *const mode_names[] = {
    [SBX_AUTHZ_ALLOW_ALL] = "allow-all",
    [SBX_AUTHZ_TOKENREVIEW] = "tokenreview",
    [SBX_AUTHZ_SCOPED_TOKEN] = "scoped-token",
    [SBX_AUTHZ_SANDBOX_TOKEN] = "sandbox-token",
};

int sbx_authz_mode_parse(const char *s, enum sbx_authz_mode *ret)
{
    for (size_t i = 0; i < sizeof(mode_names) / sizeof(mode_names[0]); i++)
        if (strcmp(s, mode_names[i]) == 0) {
            *ret = (enum sbx_authz_mode)i;
            return 0;
        }
    return -EINVAL;
}

const char *sbx_authz_mode_name(enum sbx_authz_mode m)
{
    return mode_names[m];
}

bool sbx_authz_mode_needs_kube(enum sbx_authz_mode m)
{
    return m == SBX_AUTHZ_TOKENREVIEW || m == SBX_AUTHZ_SANDBOX_TOKEN;
}

enum sbx_authz_mode sbx_authz_mode(const struct sbx_authz *a)
{
    return a->o.mode;
}

int sbx_authz_new(struct sbx_authz **ret, const struct sbx_authz_opts *o, struct sbx_error *err)
{
    struct sbx_authz *a;
    int rc;

    if (sbx_authz_mode_needs_kube(o->mode) && !o->kube)
        return sbx_error_set(err, EINVAL, "--authz-mode=%s needs the API server",
                             sbx_authz_mode_name(o->mode));
    if (o->mode == SBX_AUTHZ_SCOPED_TOKEN && (!o->secret_file || !*o->secret_file))
        return sbx_error_set(err, EINVAL,
                             "--authz-scoped-token-secret-file is required when "
                             "--authz-mode=scoped-token");
    a = calloc(1, sizeof(*a));
    if (!a)
        return sbx_error_set(err, ENOMEM, "allocate the authorizer");
    a->o = *o;
    if (!a->o.ttl_ms)
        a->o.ttl_ms = DEFAULT_TTL_MS;
    if (!a->o.cache_size)
        a->o.cache_size = DEFAULT_CACHE;
    pthread_mutex_init(&a->lock, NULL);
    if (o->mode == SBX_AUTHZ_SCOPED_TOKEN &&
        (rc = sbx_scoped_key_load(&a->key, o->secret_file, err)) < 0) {
        sbx_authz_free(a);
        return rc;
    }
    a->audiences = o->audiences && *o->audiences ? strdup(o->audiences) : NULL;
    a->cache = sbx_authz_cache_new(a->o.cache_size);
    if (!a->cache || (o->audiences && *o->audiences && !a->audiences)) {
        sbx_authz_free(a);
        return sbx_error_set(err, ENOMEM, "allocate the authorizer's cache");
    }
    a->o.audiences = a->audiences;
    a->o.secret_file = NULL;
    *ret = a;
    return 0;
}

void sbx_authz_free(struct sbx_authz *a)
{
    if (!a)
        return;
    OPENSSL_cleanse(&a->key, sizeof(a->key));
    sbx_authz_cache_free(a->cache);
    free(a->audiences);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

bool sbx_authz_bearer(const char *value, const char **ret, size_t *ret_len)
{
    const char *p, *end;

    if (!value || strlen(value) < 7 || strncasecmp(value, "Bearer ", 7) != 0)
        return false;
    p = value + 7;
    end = p + strlen(p);
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (p == end)
        return false;
    *ret = p;
    *ret_len = (size_t)(end - p);
    return true;
}

/* The request's token, from the first place that has one. */
static void find_token(const struct sbx_authz_req *req, struct sbx_authz_verdict *v)
{
    if (sbx_authz_bearer(req->authorization, &v->token, &v->token_len)) {
        v->from = SBX_AUTHZ_FROM_HEADER;
    } else if (req->query_token && *req->query_token) {
        v->from = SBX_AUTHZ_FROM_QUERY;
        v->token = req->query_token;
        v->token_len = strlen(req->query_token);
    } else if (sbx_cookie_token(req->cookie, &v->token, &v->token_len)) {
        v->from = SBX_AUTHZ_FROM_COOKIE;
    }
}

static int deny(int code, struct sbx_authz_verdict *v, const char *reason, struct sbx_error *err)
{
    v->reason = reason;
    if (code == EACCES)
        return sbx_error_set(err, EACCES, "unauthenticated");
    return sbx_error_set(err, EPERM, "forbidden");
}

static int scoped(struct sbx_authz *a, const struct sbx_authz_req *req, struct sbx_authz_verdict *v,
                  struct sbx_error *err)
{
    struct sbx_scoped_claims c;
    struct sbx_error e = {0};
    time_t now = a->o.clock ? a->o.clock() : time(NULL);
    int rc;

    rc = sbx_scoped_token_verify(&a->key, v->token, v->token_len, now, &c, &e);
    if (rc == -EACCES) {
        v->reason = strcmp(e.msg, "token expired") == 0        ? "token expired"
                    : strcmp(e.msg, "signature mismatch") == 0 ? "signature mismatch"
                                                               : "malformed token";
        return sbx_error_set(err, EACCES, "unauthenticated");
    }
    if (rc < 0)
        return sbx_error_set(err, -rc, "scoped-token: %s", e.msg);
    if (req->overrides)
        return deny(EPERM, v, "the pod is named by X-Sandbox-Pod-IP or X-Sandbox-UID", err);
    if (strcmp(c.ns, req->ns) != 0 || strcmp(c.name, req->name) != 0)
        return deny(EPERM, v, "the token is for another sandbox", err);
    v->expires = c.exp;
    return 0;
}

typedef int (*ask_fn)(struct sbx_authz *a, const void *arg, struct sbx_authz_entry *e,
                      struct sbx_error *err);

/* What the API server says of `what` (cached by its digest): from the cache, else asked by ask
 * (unless !may_block: -EWOULDBLOCK) and cached for the TTL; a failure, or a Secret not there (yet:
 * a sandbox asked for while it is being made), for a third of it, at least a second, so a
 * failing API server is not hammered yet recovers soon. */
static int lookup(struct sbx_authz *a, const char *what, size_t len, bool may_block, ask_fn ask,
                  const void *arg, struct sbx_authz_entry *e, struct sbx_error *err)
{
    uint8_t key[SBX_DIGEST_LEN];
    uint64_t ttl = a->o.ttl_ms;

    sbx_sha256(what, len, key);
    if (sbx_authz_cache_get(a->cache, key, sbx_now_ms(), e)) {
        snprintf(err->msg, sizeof(err->msg), "the API server failed (cached)");
        return e->verdict;
    }
    if (!may_block)
        return -EWOULDBLOCK;
    e->verdict = ask(a, arg, e, err);
    if (e->verdict < 0 && e->verdict != -EACCES)
        ttl = ttl / 3 < 1000 ? 1000 : ttl / 3;
    sbx_authz_cache_put(a->cache, key, e, sbx_now_ms() + ttl);
    return e->verdict;
}

static int ask_review(struct sbx_authz *a, const void *arg, struct sbx_authz_entry *e,
                      struct sbx_error *err)
{
    const struct sbx_authz_verdict *v = arg;

    (void)e;
    return sbx_authz_tokenreview(a->o.kube, v->token, v->token_len, a->o.audiences, err);
}

static int tokenreview(struct sbx_authz *a, bool may_block, struct sbx_authz_verdict *v,
                       struct sbx_error *err)
{
    struct sbx_authz_entry e = {0};
    struct sbx_error ke = {0};
    int rc = lookup(a, v->token, v->token_len, may_block, ask_review, v, &e, &ke);

    if (rc == -EWOULDBLOCK)
        return rc;
    if (rc == -EACCES)
        return deny(EACCES, v, "the API server did not authenticate the token", err);
    if (rc < 0)
        return sbx_error_set(err, -rc, "tokenreview: %s", ke.msg);
    return 0;
}

static int ask_secret(struct sbx_authz *a, const void *arg, struct sbx_authz_entry *e,
                      struct sbx_error *err)
{
    const struct sbx_authz_req *req = arg;

    return sbx_authz_sandbox_secret(a->o.kube, req->ns, req->name, e->digest, err);
}

static int sandbox_token(struct sbx_authz *a, const struct sbx_authz_req *req, bool may_block,
                         struct sbx_authz_verdict *v, struct sbx_error *err)
{
    uint8_t got[SBX_DIGEST_LEN];
    struct sbx_authz_entry e = {0};
    struct sbx_error ke = {0};
    char id[300];
    int rc;

    if (req->overrides)
        return deny(EPERM, v, "the pod is named by X-Sandbox-Pod-IP or X-Sandbox-UID", err);
    snprintf(id, sizeof(id), "%s/%s", req->ns, req->name);
    rc = lookup(a, id, strlen(id), may_block, ask_secret, req, &e, &ke);
    if (rc == -EWOULDBLOCK)
        return rc;
    if (rc == -ENOENT)
        return deny(EACCES, v, "the sandbox has no token Secret", err);
    if (rc < 0)
        return sbx_error_set(err, -rc, "sandbox-token: %s", ke.msg);
    sbx_sha256(v->token, v->token_len, got);
    if (CRYPTO_memcmp(got, e.digest, SBX_DIGEST_LEN) != 0)
        return deny(EACCES, v, "not the sandbox's token", err);
    return 0;
}

static int decide(struct sbx_authz *a, const struct sbx_authz_req *req, bool may_block,
                  struct sbx_authz_verdict *v, struct sbx_error *err)
{
    if (a->o.mode == SBX_AUTHZ_ALLOW_ALL)
        return 0;
    if (!v->token) {
        if (a->o.mode == SBX_AUTHZ_TOKENREVIEW && !a->o.require_token)
            return 0; /* the reference's transitional mode */
        return deny(EACCES, v, "no token", err);
    }
    if (v->token_len > SBX_AUTHZ_TOKEN_MAX)
        return deny(EACCES, v, "the token is too long", err);
    switch (a->o.mode) {
    case SBX_AUTHZ_TOKENREVIEW:
        return tokenreview(a, may_block, v, err);
    case SBX_AUTHZ_SCOPED_TOKEN:
        return scoped(a, req, v, err);
    case SBX_AUTHZ_SANDBOX_TOKEN:
        return sandbox_token(a, req, may_block, v, err);
    case SBX_AUTHZ_ALLOW_ALL:
        break;
    }
    return 0;
}

int sbx_authz_check(struct sbx_authz *a, const struct sbx_authz_req *req, bool may_block,
                    struct sbx_authz_verdict *v, struct sbx_error *err)
{
    int rc;

    memset(v, 0, sizeof(*v));
    find_token(req, v);
    rc = decide(a, req, may_block, v, err);
    if (rc == -EWOULDBLOCK)
        return rc;
    if (rc < 0 && !v->reason)
        v->reason = "the API server could not answer";
    if (rc == 0)
        v->reason = "allowed";
    pthread_mutex_lock(&a->lock);
    if (rc == 0)
        a->allow++;
    else
        a->deny++;
    pthread_mutex_unlock(&a->lock);
    return rc;
}

int sbx_authz_http_status(int rc)
{
    switch (rc) {
    case 0:
        return 200;
    case -EACCES:
        return 401;
    case -EPERM:
        return 403;
    default:
        return 500;
    }
}

void sbx_authz_forward(const struct sbx_authz *a, const struct sbx_authz_req *req,
                       const struct sbx_authz_verdict *v, struct sbx_authz_forward *ret)
{
    memset(ret, 0, sizeof(*ret));
    if (!req->sandboxd)
        return; /* a user's port: no credential of the client's */
    switch (a->o.mode) {
    case SBX_AUTHZ_ALLOW_ALL:
        /* The router read nothing: what the client sends is for sandboxd. */
        ret->keep_authorization = true;
        ret->keep_query_token = true;
        break;
    case SBX_AUTHZ_SANDBOX_TOKEN:
        /* The token is sandboxd's own, checked: sandboxd gets it as a header wherever it came. */
        ret->set_authorization = v->token != NULL;
        break;
    case SBX_AUTHZ_TOKENREVIEW:
    case SBX_AUTHZ_SCOPED_TOKEN:
        break; /* the router's credential, not the sandbox's */
    }
}

void sbx_authz_stats(struct sbx_authz *a, uint64_t *allow, uint64_t *deny_)
{
    pthread_mutex_lock(&a->lock);
    *allow = a->allow;
    *deny_ = a->deny;
    pthread_mutex_unlock(&a->lock);
}
