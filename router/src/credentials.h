/* The credentials a browser can send: a `token` query parameter in a request target, and the
 * router's cookie, set on the answer to a request whose token came by query (scoped to the host
 * it was sent to, HttpOnly, SameSite=Lax), so the page's later requests and WebSockets pass.
 * Finding them, and taking them out before a request goes on. Strings only: no wire. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "authz.h"

#define SBX_AUTHZ_COOKIE    "sandbox-router-token"
#define SBX_AUTHZ_TOKEN_MAX 8192

/* The first `token` parameter of target's query, percent-decoded into buf. 1 when found, 0 when
 * there is none, -EINVAL for a bad escape, a NUL or a control byte in it, -ENOSPC when too long. */
int sbx_query_token(const char *target, char *buf, size_t size);

/* Takes every `token` parameter out of target's query, in place (the '?' too when nothing is
 * left). Returns the new length. */
size_t sbx_query_strip_token(char *target);

/* The value of the router's cookie in a Cookie header value, or false. */
bool sbx_cookie_token(const char *cookie, const char **ret, size_t *ret_len);

/* The Cookie header value without the router's cookie, into buf: its length (0: send no Cookie
 * header), or -ENOSPC. */
int sbx_cookie_strip(const char *cookie, char *buf, size_t size);

/* The Set-Cookie value for an allowed request whose token came by query, into buf: its length,
 * 0 when there is nothing to set (the token came another way, or is not a cookie value), or
 * -ENOSPC. path scopes it ("/" for a preview host; the path prefix of a path-form preview URL);
 * secure adds Secure (a TLS listener); a scoped token's cookie lasts until the token expires. */
int sbx_cookie_set(const struct sbx_authz_verdict *v, const char *path, bool secure, time_t now,
                   char *buf, size_t size);
