#include "bucket.h"
#include "tap.h"

#define MS 1000000ull

int main(void)
{
    struct sbx_bucket b;
    uint64_t t = 1000 * MS;

    sbx_bucket_init(&b, 10, 3, t); /* 10/s, burst 3 */
    ok(sbx_bucket_reserve(&b, t) == 0, "first of the burst is free");
    ok(sbx_bucket_reserve(&b, t) == 0, "second of the burst is free");
    ok(sbx_bucket_reserve(&b, t) == 0, "third of the burst is free");
    ok(sbx_bucket_reserve(&b, t) == 100 * MS, "fourth waits one token time (100 ms)");
    ok(sbx_bucket_reserve(&b, t) == 200 * MS, "fifth queues behind the fourth (200 ms)");
    ok(!sbx_bucket_try(&b, t), "try fails while in debt");
    ok(sbx_bucket_try(&b, t + 300 * MS), "try succeeds once the debt is paid");
    ok(sbx_bucket_reserve(&b, t + 10000 * MS) == 0, "after a long idle the burst is back");
    ok(sbx_bucket_reserve(&b, t + 10000 * MS) == 0, "... two");
    ok(sbx_bucket_reserve(&b, t + 10000 * MS) == 0, "... three");
    ok(sbx_bucket_reserve(&b, t + 10000 * MS) > 0, "but no more than burst is saved");
    sbx_bucket_release(&b);

    sbx_bucket_init(&b, 0, 1, t);
    for (int i = 0; i < 1000; i++)
        if (sbx_bucket_reserve(&b, t) != 0)
            break;
    ok(sbx_bucket_reserve(&b, t) == 0, "rate 0 is unlimited");
    sbx_bucket_release(&b);

    struct timespec before, d, after;
    clock_gettime(CLOCK_REALTIME, &before);
    d = sbx_deadline_in(1999 * MS);
    clock_gettime(CLOCK_REALTIME, &after);
    ok(d.tv_nsec >= 0 && d.tv_nsec < 1000000000, "a deadline's nanoseconds are normalized");
    ok(d.tv_sec * 1000000000ll + d.tv_nsec >=
               before.tv_sec * 1000000000ll + before.tv_nsec + 1999 * (long long)MS &&
           d.tv_sec * 1000000000ll + d.tv_nsec <=
               after.tv_sec * 1000000000ll + after.tv_nsec + 1999 * (long long)MS,
       "a deadline 1.999 s from now, on CLOCK_REALTIME");
    return done_testing();
}
