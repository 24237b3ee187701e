#include "bucket.h"

#include <time.h>

uint64_t sbx_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct timespec sbx_deadline_in(uint64_t ns)
{
    struct timespec t;

    clock_gettime(CLOCK_REALTIME, &t);
    ns += (uint64_t)t.tv_nsec;
    t.tv_sec += (time_t)(ns / 1000000000u);
    t.tv_nsec = (long)(ns % 1000000000u);
    return t;
}

void sbx_bucket_init(struct sbx_bucket *b, double rate, double burst, uint64_t now_ns)
{
    pthread_mutex_init(&b->mu, NULL);
    b->rate = rate;
    b->burst = burst < 1 ? 1 : burst;
    b->tokens = b->burst;
    b->last_ns = now_ns;
}

void sbx_bucket_release(struct sbx_bucket *b)
{
    pthread_mutex_destroy(&b->mu);
}

/* Adds the tokens earned since last_ns. Called with mu held. */
static void refill(struct sbx_bucket *b, uint64_t now_ns)
{
    if (now_ns <= b->last_ns)
        return;
    b->tokens += (double)(now_ns - b->last_ns) / 1e9 * b->rate;
    if (b->tokens > b->burst)
        b->tokens = b->burst;
    b->last_ns = now_ns;
}

uint64_t sbx_bucket_reserve(struct sbx_bucket *b, uint64_t now_ns)
{
    uint64_t wait = 0;

    if (b->rate <= 0)
        return 0;
    pthread_mutex_lock(&b->mu);
    refill(b, now_ns);
    b->tokens -= 1;
    if (b->tokens < 0)
        wait = (uint64_t)(-b->tokens / b->rate * 1e9);
    pthread_mutex_unlock(&b->mu);
    return wait;
}

int sbx_bucket_try(struct sbx_bucket *b, uint64_t now_ns)
{
    int taken = 0;

    if (b->rate <= 0)
        return 1;
    pthread_mutex_lock(&b->mu);
    refill(b, now_ns);
    if (b->tokens >= 1) {
        b->tokens -= 1;
        taken = 1;
    }
    pthread_mutex_unlock(&b->mu);
    return taken;
}
