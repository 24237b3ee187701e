/* Image lookups off the reconcile workers: a reconcile asks (sbx_lookups_get) and is answered at
 * once, from the registry client's cache, with a failure being backed off, or "pending"; a
 * pending lookup runs on one of a few lookup threads (one per distinct image, platform and
 * credentials, however many sandboxes wait on it), and when it ends each waiting queue key is
 * handed to the done callback, which queues it again. A reconcile worker therefore never waits
 * on a registry. Failures are remembered and retried no sooner than a backoff (1 s doubling to
 * 5 min) after the last; what is remembered and queued is bounded. Thread-safe. */
#pragma once

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "registry.h"

struct sbx_lookups_opts {
    int threads;         /* lookups at once (1 when < 1) */
    size_t queue_max;    /* lookups waiting for a thread; more are refused with -EBUSY */
    size_t failures_max; /* failures (and results kept for waiters) remembered; oldest first out */
    void (*done)(const char *qkey, void *arg);
    void *arg;
};

struct sbx_lookups;

/* reg stays the caller's; it must outlive the lookups. */
int sbx_lookups_new(struct sbx_registry *reg, const struct sbx_lookups_opts *opts,
                    struct sbx_lookups **ret, struct sbx_error *err);

/* Cancels the registry's requests, joins the threads, frees. Accepts NULL. */
void sbx_lookups_free(struct sbx_lookups *l);

/* What q resolves to, for the reconcile of qkey. 1 with *ret (sbx_registry_resolve's result)
 * when known; 0 when a lookup is under way (done gets qkey when it ends); < 0 with the failure
 * of the last lookup (err) while it is backed off, *retry_ms then saying when to ask again (a
 * new lookup starts then; until it ends its failure still answers). -EBUSY when too many are
 * queued. */
int sbx_lookups_get(struct sbx_lookups *l, const struct sbx_registry_query *q, const char *qkey,
                    json_t **ret, uint64_t *retry_ms, struct sbx_error *err);
