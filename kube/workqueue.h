/* A work queue of string keys ("namespace/name") with the semantics controllers rely on:
 * - a key queued twice is processed once (dirty set);
 * - a key is never processed by two workers at once: added while processing, it is queued again
 *   when the worker is done (processing set);
 * - retries are delayed per key, exponentially (base * 2^failures, capped), and forgotten on
 *   success;
 * - a bounded pool of worker threads drains it.
 * Thread-safe. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct sbx_wq;

struct sbx_wq_opts {
    uint64_t retry_base_ms; /* first retry delay (5 ms when 0) */
    uint64_t retry_max_ms;  /* cap of the retry delay (1000 s when 0) */
};

int sbx_wq_new(const struct sbx_wq_opts *opts, struct sbx_wq **ret, struct sbx_error *err);

/* Stops the workers (sbx_wq_shutdown + join) and frees. Accepts NULL. */
void sbx_wq_free(struct sbx_wq *q);

/* sbx_wq_shutdown, then waits for every worker to return: none runs its function after this.
 * Accepts NULL. */
void sbx_wq_join(struct sbx_wq *q);

void sbx_wq_add(struct sbx_wq *q, const char *key);

/* Queues key once delay_ms have passed; an earlier pending time for the same key wins. */
void sbx_wq_add_after(struct sbx_wq *q, const char *key, uint64_t delay_ms);

/* Queues key after its per-key backoff and counts one more failure for it. Returns the delay. */
uint64_t sbx_wq_add_rate_limited(struct sbx_wq *q, const char *key);

/* Clears key's failure count. */
void sbx_wq_forget(struct sbx_wq *q, const char *key);

/* Failures counted for key since the last forget. */
int sbx_wq_failures(struct sbx_wq *q, const char *key);

/* Blocks for the next key and marks it processing; the caller frees it after sbx_wq_done.
 * Returns NULL once the queue is shut down. */
char *sbx_wq_get(struct sbx_wq *q);

/* Ends processing of key; queues it again if it was added meanwhile. */
void sbx_wq_done(struct sbx_wq *q, const char *key);

/* Wakes every sbx_wq_get caller with NULL; later adds are ignored. Accepts NULL. */
void sbx_wq_shutdown(struct sbx_wq *q);

/* Keys queued and ready now (the queue depth metric). */
size_t sbx_wq_len(struct sbx_wq *q);

/* The worker function: returns >= 0 when the key is done, < 0 to retry it with backoff. */
typedef int (*sbx_wq_fn)(const char *key, void *arg);

/* Starts n worker threads running fn on each key. Once only. */
int sbx_wq_start(struct sbx_wq *q, int n, sbx_wq_fn fn, void *arg, struct sbx_error *err);
