/* A bounded cache of authorization decisions, keyed by a SHA-256 digest (of a token, or of the
 * sandbox a Secret belongs to): never the secret bytes themselves. Each entry expires at its own
 * time; past the capacity the least recently used goes. Thread-safe. Knows no wire. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clock.h" /* sbx_now_ms, the clock of the cache's ages */

#define SBX_DIGEST_LEN 32

struct sbx_authz_cache;

/* What is cached: a verdict (0, or a negative errno), and a digest (a Secret's token's). */
struct sbx_authz_entry {
    int verdict;
    uint8_t digest[SBX_DIGEST_LEN];
};

/* At most cap entries (at least 1). NULL when out of memory. */
struct sbx_authz_cache *sbx_authz_cache_new(unsigned cap);
void sbx_authz_cache_free(struct sbx_authz_cache *c);

/* The entry under key that has not expired at now_ms (a monotonic clock's); true when found. */
bool sbx_authz_cache_get(struct sbx_authz_cache *c, const uint8_t key[SBX_DIGEST_LEN],
                         uint64_t now_ms, struct sbx_authz_entry *ret);

/* Stores e under key until expires_ms, replacing an entry of the same key, else evicting an
 * expired entry or the least recently used one when full. */
void sbx_authz_cache_put(struct sbx_authz_cache *c, const uint8_t key[SBX_DIGEST_LEN],
                         const struct sbx_authz_entry *e, uint64_t expires_ms);

/* Entries held (expired ones included until they are reused). */
unsigned sbx_authz_cache_size(struct sbx_authz_cache *c);

/* SHA-256 of data into out. */
void sbx_sha256(const void *data, size_t len, uint8_t out[SBX_DIGEST_LEN]);
