/* The credentials a browser can send, as strings: a `token` query parameter in a request target,
 * and the router's cookie. Finding them, and taking them out before a request goes on. Below the
 * authorizer (authz.h), which reads them, and knowing nothing of it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define SBX_AUTHZ_COOKIE    "sandbox-router-token"
#define SBX_AUTHZ_TOKEN_MAX 8192

/* The first `token` parameter of target's query, percent-decoded into buf. 1 when found, 0 when
 * there is none, -EINVAL for a bad escape, a NUL or a control byte in it, -ENOSPC when too long. */
int sbx_query_token(const char *target, char *buf, size_t size);

/* Takes every `token` parameter out of target's query, in place, each with one '&' beside it
 * (the '?' too when nothing is left); the rest stays byte for byte. Returns the new length. */
size_t sbx_query_strip_token(char *target);

/* The value of the router's cookie in a Cookie header value, or false. */
bool sbx_cookie_token(const char *cookie, const char **ret, size_t *ret_len);

/* The Cookie header value without the router's cookie, into buf, its pairs joined by "; " (so
 * up to twice as long as cookie): its length (0: send no Cookie header), or -ENOSPC. */
int sbx_cookie_strip(const char *cookie, char *buf, size_t size);
