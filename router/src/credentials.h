/* The credentials a browser can send (browser_token.h: a `token` query parameter in a request
 * target, and the router's cookie), with what the authorizer makes of them: the cookie set on
 * the answer to a request whose token came by query (scoped to the host it was sent to,
 * HttpOnly, SameSite=Lax), so the page's later requests and WebSockets pass, and the whole
 * decision for one HTTP request. Strings only: no wire. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "authz.h"
#include "browser_token.h"

/* The Set-Cookie value for an allowed request whose token came by query, into buf: its length,
 * 0 when there is nothing to set (the token came another way, or is not a cookie value), or
 * -ENOSPC. path scopes it ("/" for a preview host; the path prefix of a path-form preview URL);
 * secure adds Secure (a TLS listener); a scoped token's cookie lasts until the token expires. */
int sbx_cookie_set(const struct sbx_authz_verdict *v, const char *path, bool secure, time_t now,
                   char *buf, size_t size);

/* Everything the HTTP proxy does about a request's authorization, in one call (it may block on
 * the API server: the proxy's thread per connection may wait). */
struct sbx_authz_http {
    int rc;           /* sbx_authz_check's: 0 allowed */
    int status;       /* a refusal's HTTP status (401, 403, 500; 400 for a bad token parameter) */
    char detail[256]; /* its {"detail": ...} */
    bool keep_authorization; /* the client's Authorization header goes on as it came */
    char authorization[SBX_AUTHZ_TOKEN_MAX + 8]; /* else, when not empty: send this one */
    bool strip_query_token; /* take `token` out of the target (sbx_query_strip_token) */
    char set_cookie[SBX_AUTHZ_TOKEN_MAX + 256]; /* when not empty: the answer's Set-Cookie */
    const char *reason;                         /* for the log */
};

struct sbx_authz_http_req {
    const char *ns, *name;              /* the target sandbox */
    bool overrides;                     /* X-Sandbox-Pod-IP or X-Sandbox-UID given */
    bool sandboxd;                      /* to sandboxd's own (REST) port, not a user's */
    const char *target;                 /* the request target, NUL-terminated */
    const char *authorization, *cookie; /* header values, or NULL */
    const char *cookie_path;            /* the Set-Cookie's Path ("/" for a host) */
    bool secure;                        /* on a TLS listener */
};

/* Decides r and fills out (the Cookie header to send on is sbx_cookie_strip's). 0 when allowed;
 * else out->status and out->detail say the answer. */
int sbx_authz_http(struct sbx_authz *a, const struct sbx_authz_http_req *r,
                   struct sbx_authz_http *out);
