/* Who may reach a sandbox through the router: the modes of --authz-mode. Knows no wire: the
 * adapters (the gRPC relay, the HTTP proxy) hand over the target and the credentials a request
 * carries, and get a verdict plus what of the credentials may go on to the sandbox.
 *
 *   allow-all      every request passes (the reference's default).
 *   tokenreview    a Bearer token is checked by the API server's TokenReview (authentication
 *                  only, as the reference's: any authenticated caller reaches any sandbox);
 *                  decisions cached by the token's SHA-256 for the TTL (API failures for a
 *                  third of it, at least 1 s); without a token: allowed unless require_token.
 *   scoped-token   the reference's signed "v1.<payload>.<sig>" token, bound to the sandbox's
 *                  namespace and name, until it expires.
 *   sandbox-token  the bearer token the sandbox's own sandboxd checks, compared (by digest, in
 *                  constant time) with the one in the sandbox's token Secret
 *                  ("<name>-sandboxd-token", key "token", made by the controller); Secrets
 *                  cached by sandbox for the TTL, so unauthenticated traffic never reaches a pod.
 *
 * In scoped-token and sandbox-token modes a request that names its pod by X-Sandbox-Pod-IP or
 * X-Sandbox-UID is refused: either would route it to a pod other than the (namespace, name) the
 * token was checked against.
 *
 * Where the token is: the Authorization header ("Bearer <token>"), else a `token` query parameter
 * (browsers cannot set headers on a WebSocket), else the router's cookie (set by the HTTP side
 * on the answer to a request whose token came by query, so the page's later requests pass). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "error.h"

struct sbx_kube;
struct sbx_authz;

enum sbx_authz_mode {
    SBX_AUTHZ_ALLOW_ALL,
    SBX_AUTHZ_TOKENREVIEW,
    SBX_AUTHZ_SCOPED_TOKEN,
    SBX_AUTHZ_SANDBOX_TOKEN,
};

/* "allow-all", "tokenreview", "scoped-token", "sandbox-token". -EINVAL otherwise. */
int sbx_authz_mode_parse(const char *s, enum sbx_authz_mode *ret);
const char *sbx_authz_mode_name(enum sbx_authz_mode m);
/* Whether the mode asks the API server (then opts.kube is required). */
bool sbx_authz_mode_needs_kube(enum sbx_authz_mode m);

struct sbx_authz_opts {
    enum sbx_authz_mode mode;
    uint64_t ttl_ms;         /* of a cached decision or Secret (30 s when 0) */
    unsigned cache_size;     /* entries cached (2048 when 0) */
    bool require_token;      /* tokenreview: a request without a token is refused */
    const char *audiences;   /* tokenreview: comma-separated audiences, or NULL */
    const char *secret_file; /* scoped-token: the HMAC secret */
    struct sbx_kube *kube;   /* tokenreview, sandbox-token: borrowed, outlives the authorizer */
    time_t (*clock)(void);   /* wall clock for token expiry (time(NULL) when NULL; tests) */
};

int sbx_authz_new(struct sbx_authz **ret, const struct sbx_authz_opts *o, struct sbx_error *err);
void sbx_authz_free(struct sbx_authz *a);
enum sbx_authz_mode sbx_authz_mode(const struct sbx_authz *a);

/* What a request carries. Strings are NUL-terminated; NULL when absent. */
struct sbx_authz_req {
    const char *ns, *name;     /* the sandbox it names */
    bool overrides;            /* it names its pod by X-Sandbox-Pod-IP or X-Sandbox-UID */
    bool sandboxd;             /* it goes to the sandbox's own sandboxd, not to a user's port */
    const char *authorization; /* the Authorization header's (or metadata's) value */
    const char *query_token;   /* the `token` query parameter, decoded */
    const char *cookie;        /* the Cookie header's value */
};

enum sbx_authz_from {
    SBX_AUTHZ_FROM_NONE,
    SBX_AUTHZ_FROM_HEADER,
    SBX_AUTHZ_FROM_QUERY,
    SBX_AUTHZ_FROM_COOKIE,
};

struct sbx_authz_verdict {
    enum sbx_authz_from from;
    const char *token; /* borrowed from the request; token_len bytes */
    size_t token_len;
    int64_t expires;    /* scoped-token: the token's exp (unix seconds); else 0 */
    const char *reason; /* why, for logs (never the token): static */
};

/* Decides. 0: allowed. -EACCES: unauthenticated (HTTP 401, gRPC UNAUTHENTICATED; message
 * "unauthenticated"). -EPERM: forbidden (403, PERMISSION_DENIED; "forbidden"). -EWOULDBLOCK: only
 * when !may_block, the answer needs the API server (ask again with may_block from a thread that
 * may wait, up to the client's timeout). Any other: the API server could not answer (HTTP 500,
 * gRPC UNAVAILABLE; the message says why). v is filled in every case. Counts the decision
 * (not -EWOULDBLOCK). Thread-safe. */
int sbx_authz_check(struct sbx_authz *a, const struct sbx_authz_req *req, bool may_block,
                    struct sbx_authz_verdict *v, struct sbx_error *err);

/* The HTTP status of a sbx_authz_check result: 200, 401, 403 or 500. */
int sbx_authz_http_status(int rc);

/* What of a request's credentials goes on to the sandbox once it is allowed. The router's own
 * cookie never does; nothing does to a user's port. */
struct sbx_authz_forward {
    bool keep_authorization; /* the client's Authorization header, as it came */
    bool set_authorization;  /* instead: "Bearer <the verdict's token>" (from query or cookie) */
    bool keep_query_token;   /* the `token` query parameter */
};
void sbx_authz_forward(const struct sbx_authz *a, const struct sbx_authz_req *req,
                       const struct sbx_authz_verdict *v, struct sbx_authz_forward *ret);

/* Decisions so far. */
void sbx_authz_stats(struct sbx_authz *a, uint64_t *allow, uint64_t *deny);

/* The token of an Authorization value "Bearer <token>" (scheme without regard to case, spaces
 * around the token dropped), as the reference reads it; false when there is none. */
bool sbx_authz_bearer(const char *value, const char **ret, size_t *ret_len);
