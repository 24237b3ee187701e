/* authz_cache: decisions by digest, each until its own expiry, at most cap of them, the least
 * recently used going first; a digest collision in the table's buckets keeps both entries. */
#include <stdio.h>
#include <string.h>

#include "authz_cache.h"
#include "tap.h"

static void key(uint8_t k[SBX_DIGEST_LEN], unsigned i)
{
    char s[16];

    snprintf(s, sizeof(s), "k%u", i);
    sbx_sha256(s, strlen(s), k);
}

static bool has(struct sbx_authz_cache *c, unsigned i, uint64_t now, int *verdict)
{
    uint8_t k[SBX_DIGEST_LEN];
    struct sbx_authz_entry e;

    key(k, i);
    if (!sbx_authz_cache_get(c, k, now, &e))
        return false;
    if (verdict)
        *verdict = e.verdict;
    return true;
}

static void put(struct sbx_authz_cache *c, unsigned i, int verdict, uint64_t until)
{
    uint8_t k[SBX_DIGEST_LEN];
    struct sbx_authz_entry e = {.verdict = verdict};

    key(k, i);
    sbx_authz_cache_put(c, k, &e, until);
}

static void test_expiry(void)
{
    struct sbx_authz_cache *c = sbx_authz_cache_new(4);
    int v = 0;

    put(c, 1, -13, 100);
    ok(has(c, 1, 99, &v) && v == -13, "an entry is there before it expires");
    ok(!has(c, 1, 100, NULL), "and gone at its expiry");
    put(c, 1, 0, 200);
    ok(has(c, 1, 150, &v) && v == 0 && sbx_authz_cache_size(c) == 1,
       "putting the same key again replaces it");
    sbx_authz_cache_free(c);
}

static void test_lru(void)
{
    struct sbx_authz_cache *c = sbx_authz_cache_new(3);

    put(c, 1, 1, 1000);
    put(c, 2, 2, 1000);
    put(c, 3, 3, 1000);
    ok(has(c, 1, 0, NULL), "1 read: now the most recently used");
    put(c, 4, 4, 1000);
    ok(!has(c, 2, 0, NULL), "past the capacity the least recently used (2) went");
    ok(has(c, 1, 0, NULL) && has(c, 3, 0, NULL) && has(c, 4, 0, NULL), "the others stay");
    ok(sbx_authz_cache_size(c) == 3, "at most cap entries");
    sbx_authz_cache_free(c);
}

static void test_many(void)
{
    struct sbx_authz_cache *c = sbx_authz_cache_new(1000);
    unsigned kept = 0;
    int v;

    for (unsigned i = 0; i < 100000; i++)
        put(c, i, (int)i, 1000);
    for (unsigned i = 0; i < 100000; i++)
        if (has(c, i, 0, &v) && v == (int)i)
            kept++;
    ok(kept == 1000 && sbx_authz_cache_size(c) == 1000, "100000 put into 1000: the last 1000 kept");
    ok(has(c, 99999, 0, NULL) && !has(c, 98999, 0, NULL), "the newest, not the older");
    sbx_authz_cache_free(c);
    c = sbx_authz_cache_new(1);
    put(c, 1, 1, 10);
    put(c, 2, 2, 10);
    ok(!has(c, 1, 0, NULL) && has(c, 2, 0, NULL), "a cache of one holds the last");
    sbx_authz_cache_free(c);
}

static void test_collisions(void)
{
    struct sbx_authz_cache *c = sbx_authz_cache_new(8);
    uint8_t a[SBX_DIGEST_LEN] = {0}, b[SBX_DIGEST_LEN] = {0};
    struct sbx_authz_entry e = {.verdict = 1}, f = {.verdict = 2}, got;

    b[31] = 1; /* the same bucket (the first bytes pick it), another key */
    sbx_authz_cache_put(c, a, &e, 10);
    sbx_authz_cache_put(c, b, &f, 10);
    ok(sbx_authz_cache_get(c, a, 0, &got) && got.verdict == 1, "both keys of a bucket: the first");
    ok(sbx_authz_cache_get(c, b, 0, &got) && got.verdict == 2, "and the second");
    sbx_authz_cache_free(c);
}

int main(void)
{
    test_expiry();
    test_lru();
    test_many();
    test_collisions();
    return done_testing();
}
