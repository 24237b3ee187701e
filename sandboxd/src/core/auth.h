/* Bearer-token authentication, without the wire: the token is loaded once at start-up, and the
 * adapters hand us the value of an Authorization header (REST) or of the `authorization`
 * metadata entry (gRPC) to check. Only a SHA-256 digest of the token is kept in memory, and
 * candidates are compared by digest in constant time, so neither the token's bytes nor its
 * length show in the time a check takes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Longest token accepted (bytes). */
#define SBX_AUTH_MAX_TOKEN 4096

struct sbx_auth;

/* Verdicts of sbx_auth_check, for the adapters' messages (never with the token in them). */
enum sbx_auth_verdict {
    SBX_AUTH_OK = 0,
    SBX_AUTH_MISSING,   /* no credential at all */
    SBX_AUTH_MALFORMED, /* a credential, but not "Bearer <token>" (or several of them) */
    SBX_AUTH_WRONG,     /* a bearer token that is not ours */
};

/* Makes an authenticator for token[0..len). A token is 1..SBX_AUTH_MAX_TOKEN bytes of visible
 * ASCII (0x21-0x7e), so that it travels unchanged in an HTTP header and gRPC metadata.
 * Returns 0, -EINVAL (with the reason, never the token, in err) or -ENOMEM. */
int sbx_auth_new(const char *token, size_t len, struct sbx_auth **ret, struct sbx_error *err);

/* Reads the token from a file: its whole content, one trailing "\n" or "\r\n" stripped. An
 * unreadable, empty, too long or otherwise invalid file is an error naming the file. */
int sbx_auth_load_file(const char *path, struct sbx_auth **ret, struct sbx_error *err);

/* Checks the value of one Authorization header: "Bearer <token>", the scheme matched without
 * regard to case (RFC 7235), spaces around the token ignored. value may be NULL (no header);
 * it need not be NUL-terminated. Thread-safe. */
enum sbx_auth_verdict sbx_auth_check(const struct sbx_auth *a, const char *value, size_t len);

/* Checks a bare token (a query parameter's), in constant time like sbx_auth_check. */
enum sbx_auth_verdict sbx_auth_check_token(const struct sbx_auth *a, const char *token, size_t len);

/* Refusals logged per second at most; the rest are counted and told with the next one logged. */
#define SBX_AUTH_LOG_PER_SECOND 5

/* Whether a refusal at now_s (seconds of a monotonic clock) may be logged: at most
 * SBX_AUTH_LOG_PER_SECOND in a second, so a client hammering us cannot flood the log. When it
 * may, *ret_suppressed is the number of refusals not logged since the last one that was.
 * Thread-safe. */
bool sbx_auth_log_allowed(struct sbx_auth *a, uint64_t now_s, uint64_t *ret_suppressed);

/* A short, fixed description of a verdict, safe to log and to send to the client. */
const char *sbx_auth_verdict_message(enum sbx_auth_verdict v);

/* Accepts NULL. */
void sbx_auth_free(struct sbx_auth *a);
