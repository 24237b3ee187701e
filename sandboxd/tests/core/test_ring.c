/* The output ring against a plain model: the whole stream kept in a flat buffer. */
#include <stdlib.h>
#include <string.h>

#include "ring.h"
#include "tap.h"

static uint8_t model[1 << 22];

/* Appends random-sized chunks and checks start, end and every readable byte. */
static bool run(size_t max, size_t max_chunk, unsigned seed, int rounds)
{
    struct sbx_ring r;
    uint64_t end = 0;
    static uint8_t out[1 << 20];
    bool good = true;

    srand(seed);
    sbx_ring_init(&r, max, NULL);
    for (int i = 0; i < rounds && good; i++) {
        size_t len = (size_t)rand() % (max_chunk + 1), n;
        uint64_t at, want_start, off;
        uint8_t chunk[1 << 16];

        if (end + len > sizeof(model))
            break;
        for (size_t k = 0; k < len; k++)
            chunk[k] = model[end + k] = (uint8_t)rand();
        sbx_ring_append(&r, chunk, len);
        end += len;
        want_start = end > max ? end - max : 0;
        good = r.end == end && r.start == want_start;
        /* A reader at a random offset, possibly behind start. */
        off = end ? (uint64_t)rand() % (end + 1) : 0;
        n = sbx_ring_read(&r, off, out, sizeof(out), &at);
        good = good && at == (off < r.start ? r.start : off) && n == r.end - at &&
               memcmp(out, model + at, n) == 0;
    }
    sbx_ring_release(&r);
    return good;
}

/* Two rings sharing a budget smaller than either: each holds the tail it can, the second
 * nothing while the first keeps it all, and the bytes come back on release. */
static void test_budget(void)
{
    struct sbx_budget b;
    struct sbx_ring a, c;
    static uint8_t data[64 * 1024];
    uint8_t out[64 * 1024];
    uint64_t at;
    size_t n;

    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 7);
    sbx_budget_init(&b, 16 * 1024);
    sbx_ring_init(&a, sizeof(data), &b);
    sbx_ring_init(&c, sizeof(data), &b);
    sbx_ring_append(&a, data, sizeof(data));
    n = sbx_ring_read(&a, 0, out, sizeof(out), &at);
    ok(a.cap <= 16 * 1024 && sbx_budget_used(&b) == a.cap && n == a.cap && at == sizeof(data) - n &&
           memcmp(out, data + at, n) == 0,
       "a ring over budget holds the tail it can (%zu bytes)", n);
    sbx_ring_append(&c, data, 100);
    ok(c.cap == 0 && c.start == 100 && sbx_budget_refused(&b) > 0,
       "a ring without budget left holds nothing and counts the bytes");
    sbx_ring_release(&a);
    ok(sbx_budget_used(&b) == 0, "a released ring gives its bytes back");
    sbx_ring_append(&c, data, 100);
    ok(c.cap >= 100 && sbx_ring_read(&c, 0, out, sizeof(out), &at) == 100 && at == 100,
       "then the other grows");
    sbx_ring_release(&c);
    ok(sbx_budget_used(&b) == 0 && !sbx_budget_take(&b, 16 * 1024 + 1) && sbx_budget_take(&b, 1),
       "a take past the bound is refused, within it granted");
}

int main(void)
{
    struct sbx_ring r;
    uint8_t out[16];
    uint64_t at;

    ok(run(64 * 1024, 5000, 1, 2000), "small chunks through a 64 KiB ring");
    ok(run(10000, 30000, 2, 300), "chunks larger than a ring that is not a power of two");
    ok(run(1 << 20, 1 << 16, 3, 300), "growth from 4 KiB to 1 MiB with data held");
    ok(run(1, 3, 4, 500), "a one-byte ring");

    sbx_ring_init(&r, 0, NULL);
    sbx_ring_append(&r, (const uint8_t *)"abc", 3);
    ok(r.start == 3 && r.end == 3 && sbx_ring_read(&r, 0, out, sizeof(out), &at) == 0 && at == 3,
       "a zero-size ring counts bytes and holds none");
    sbx_ring_release(&r);

    sbx_ring_init(&r, 8, NULL);
    sbx_ring_append(&r, (const uint8_t *)"0123456789", 10);
    ok(r.start == 2 && sbx_ring_read(&r, 0, out, sizeof(out), &at) == 8 && at == 2 &&
           memcmp(out, "23456789", 8) == 0,
       "a reader behind start gets the oldest held byte and its offset");
    ok(sbx_ring_read(&r, 10, out, sizeof(out), &at) == 0 && at == 10, "nothing at end");
    ok(sbx_ring_read(&r, 50, out, sizeof(out), &at) == 0, "nothing past end");
    ok(sbx_ring_read(&r, 4, out, 3, &at) == 3 && memcmp(out, "456", 3) == 0, "bounded read");
    sbx_ring_release(&r);
    test_budget();
    return done_testing();
}
