/* The reference router's scoped tokens: "v1.<payload>.<signature>", where payload is the
 * unpadded base64url of {"ns":...,"name":...,"exp":<unix seconds>} and signature the unpadded
 * base64url of HMAC-SHA256(secret, "agent-sandbox/scoped-token/v1." || payload). A token names
 * the one sandbox it opens and expires at exp (exclusive). Knows no wire. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "error.h"

/* The shortest secret accepted, after surrounding whitespace is trimmed (as the reference). */
#define SBX_SCOPED_SECRET_MIN 32
#define SBX_SCOPED_SECRET_MAX 4096
/* The longest token parsed; anything longer is refused unread. */
#define SBX_SCOPED_TOKEN_MAX 4096

struct sbx_scoped_key {
    uint8_t key[SBX_SCOPED_SECRET_MAX];
    size_t len;
};

struct sbx_scoped_claims {
    char ns[254], name[254];
    int64_t exp;
};

/* The key from a secret's bytes: surrounding ASCII whitespace trimmed (a mounted Secret's trailing
 * newline is not part of it), at least SBX_SCOPED_SECRET_MIN bytes left. -EINVAL otherwise. */
int sbx_scoped_key_init(struct sbx_scoped_key *k, const void *secret, size_t len,
                        struct sbx_error *err);

/* Reads the key from a file (at most SBX_SCOPED_SECRET_MAX bytes before trimming). */
int sbx_scoped_key_load(struct sbx_scoped_key *k, const char *path, struct sbx_error *err);

/* Checks token[0..len): its version, its signature (compared in constant time), its claims and
 * that now < exp. 0 with *ret filled, or -EACCES with the reason in err ("malformed token",
 * "signature mismatch", "token expired", ...), never the token itself. */
int sbx_scoped_token_verify(const struct sbx_scoped_key *k, const char *token, size_t len,
                            time_t now, struct sbx_scoped_claims *ret, struct sbx_error *err);

/* Mints a token for (ns, name) expiring at exp into buf, as the reference's MintScopedToken does
 * (for tests and tools: the router only verifies). -ENOSPC when it does not fit. */
int sbx_scoped_token_mint(const struct sbx_scoped_key *k, const char *ns, const char *name,
                          int64_t exp, char *buf, size_t size, struct sbx_error *err);
