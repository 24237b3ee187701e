/* A token bucket: `rate` tokens a second, at most `burst` saved up. Client-side QPS limits and
 * paced refills use it. Thread-safe. */
#pragma once

#include <pthread.h>
#include <stdint.h>
#include <time.h>

struct sbx_bucket {
    pthread_mutex_t mu;
    double rate;   /* tokens per second; <= 0 means unlimited */
    double burst;  /* capacity, >= 1 */
    double tokens; /* may go negative: callers that reserved ahead wait their turn */
    uint64_t last_ns;
};

/* Starts full. rate <= 0 disables limiting. */
void sbx_bucket_init(struct sbx_bucket *b, double rate, double burst, uint64_t now_ns);
void sbx_bucket_release(struct sbx_bucket *b);

/* Takes one token at now_ns and returns how long the caller must wait before using it (0 when
 * one was there). Reservations queue: each caller gets its own slot in the future. */
uint64_t sbx_bucket_reserve(struct sbx_bucket *b, uint64_t now_ns);

/* Takes a token only if one is there now; returns 1 when taken, 0 otherwise. */
int sbx_bucket_try(struct sbx_bucket *b, uint64_t now_ns);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t sbx_now_ns(void);

/* CLOCK_REALTIME ns from now: a deadline for pthread_cond_timedwait. */
struct timespec sbx_deadline_in(uint64_t ns);
