#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bucket.h"
#include "tap.h"
#include "workqueue.h"

static void test_dedup(void)
{
    struct sbx_wq *q;
    struct sbx_error err;
    char *k;

    sbx_wq_new(NULL, &q, &err);
    sbx_wq_add(q, "ns/a");
    sbx_wq_add(q, "ns/b");
    sbx_wq_add(q, "ns/a");
    ok(sbx_wq_len(q) == 2, "a key added twice is queued once");
    k = sbx_wq_get(q);
    ok(k && !strcmp(k, "ns/a"), "FIFO order");
    sbx_wq_add(q, "ns/a");
    ok(sbx_wq_len(q) == 1, "a key added while processing waits for done");
    sbx_wq_done(q, k);
    free(k);
    ok(sbx_wq_len(q) == 2, "done re-queues a key added meanwhile");
    k = sbx_wq_get(q);
    ok(k && !strcmp(k, "ns/b"), "then the next key");
    sbx_wq_done(q, k);
    free(k);
    k = sbx_wq_get(q);
    ok(k && !strcmp(k, "ns/a"), "then the re-queued one");
    sbx_wq_done(q, k);
    free(k);
    ok(sbx_wq_len(q) == 0, "empty");
    sbx_wq_free(q);
}

static void test_backoff(void)
{
    struct sbx_wq_opts o = {.retry_base_ms = 10, .retry_max_ms = 50};
    struct sbx_wq *q;
    struct sbx_error err;
    uint64_t t0;
    char *k;

    sbx_wq_new(&o, &q, &err);
    ok(sbx_wq_add_rate_limited(q, "k") == 10, "first retry after base");
    ok(sbx_wq_add_rate_limited(q, "k") == 20, "then doubled");
    ok(sbx_wq_add_rate_limited(q, "k") == 40, "then doubled again");
    ok(sbx_wq_add_rate_limited(q, "k") == 50, "capped");
    ok(sbx_wq_failures(q, "k") == 4, "failures counted");
    ok(sbx_wq_len(q) == 0, "a delayed key is not ready at once");
    t0 = sbx_now_ns();
    k = sbx_wq_get(q);
    ok(k && !strcmp(k, "k"), "the delayed key arrives once");
    ok(sbx_now_ns() - t0 >= 9000000ull, "no earlier than its first delay");
    sbx_wq_done(q, k);
    free(k);
    sbx_wq_forget(q, "k");
    ok(sbx_wq_failures(q, "k") == 0, "forget clears the count");
    ok(sbx_wq_add_rate_limited(q, "k") == 10, "and the delay starts over");
    sbx_wq_free(q);
}

static atomic_int calls, concurrent, max_concurrent;

static int work(const char *key, void *arg)
{
    (void)arg;
    int now = atomic_fetch_add(&concurrent, 1) + 1;
    int m = atomic_load(&max_concurrent);
    while (now > m && !atomic_compare_exchange_weak(&max_concurrent, &m, now))
        ;
    usleep(2000);
    atomic_fetch_sub(&concurrent, 1);
    atomic_fetch_add(&calls, 1);
    return strcmp(key, "fail") == 0 && atomic_load(&calls) < 5 ? -1 : 0;
}

static void test_workers(void)
{
    struct sbx_wq_opts o = {.retry_base_ms = 1, .retry_max_ms = 2};
    struct sbx_wq *q;
    struct sbx_error err;
    char key[32];

    sbx_wq_new(&o, &q, &err);
    ok(sbx_wq_start(q, 3, work, NULL, &err) == 0, "three workers start");
    for (int i = 0; i < 30; i++) {
        snprintf(key, sizeof(key), "ns/%d", i);
        sbx_wq_add(q, key);
    }
    sbx_wq_add(q, "fail");
    for (int i = 0; i < 2000 && (atomic_load(&calls) < 31 || sbx_wq_failures(q, "fail") > 0); i++)
        usleep(1000);
    ok(atomic_load(&calls) >= 31, "every key processed (%d calls)", atomic_load(&calls));
    ok(atomic_load(&max_concurrent) <= 3, "never more than 3 at once (%d)",
       atomic_load(&max_concurrent));
    ok(sbx_wq_failures(q, "fail") == 0, "a failing key is retried until it succeeds");
    sbx_wq_free(q);
}

int main(void)
{
    test_dedup();
    test_backoff();
    test_workers();
    return done_testing();
}
