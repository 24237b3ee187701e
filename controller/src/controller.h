/* The controller: informers on what it owns, work queues of keys "kind:ns/name", bounded pools
 * of workers that hand each key to the reconciler its kind registered (sbx_ctrl_register). The
 * kinds (sandbox.c, pool.c, claim.c, template.c) call into the controller; it knows them only
 * through the table. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bucket.h"
#include "histogram.h"
#include "error.h"
#include "informer.h"
#include "kube.h"
#include "lookups.h"
#include "podspec.h"
#include "registry.h"
#include "workqueue.h"

struct sbx_ctrl_opts {
    const char *namespace; /* NULL: every namespace */
    int workers;           /* Sandbox and pool reconciles at once */
    int claim_workers;     /* claim reconciles at once, on a queue of their own */
    const char *cluster_domain;
    struct sbx_inject_opts inject;
    double pool_refill_rate;  /* warm-pool sandboxes created per second; <= 0 unlimited */
    int pool_batch;           /* most sandboxes one pool creates in one reconcile */
    uint64_t pool_grace_ms;   /* a pool sandbox not Ready for this long is replaced... */
    uint64_t pool_recheck_ms; /* ...unless unschedulable: then held, looked at again after this */
    uint64_t replenish_delay_ms; /* a pool waits this long after its last adoption to refill */
    uint64_t write_behind_ms;    /* a Sandbox status change that keeps its Ready condition waits
                                    this long for more (0: written at once) */
    bool image_lookup;           /* a main container without a command runs the entrypoint of its
                                    image, looked up in the registry (image.c) */
    struct sbx_registry_opts registry;
    int lookup_threads; /* image lookups at once */
};

struct sbx_ctrl;

/* One kind the controller reconciles. */
struct sbx_reconciler {
    const char *kind; /* the prefix of its queue keys ("sandbox" in "sandbox:ns/name"); static */
    /* Brings the object "ns/name" and what it owns to what they should be, reading the
     * informers' caches. >= 0 when done; < 0 (err set) retries the key with backoff, -ECANCELED
     * when the controller is stopping. */
    int (*reconcile)(struct sbx_ctrl *c, const char *key, struct sbx_error *err);
    bool claim_queue; /* its keys go on the claim queue: never stuck behind a pool's refill */
};

#define SBX_CTRL_KINDS_MAX 8

struct sbx_ctrl {
    struct sbx_kube *kube;
    struct sbx_ctrl_opts opts;
    struct sbx_informer *sandboxes, *pods, *services, *templates, *pools, *claims;
    struct sbx_informer *pvcs;     /* the claims of Sandboxes' volumeClaimTemplates (volumes.c) */
    struct sbx_wq *queue;          /* sandbox: and pool: keys */
    struct sbx_wq *claim_queue;    /* claim: keys: never stuck behind a refill */
    struct sbx_bucket refill;      /* paces warm-pool creations across pools */
    struct sbx_registry *registry; /* with opts.image_lookup: the registry client... */
    struct sbx_lookups *lookups;   /* ...and its lookup threads, else NULL */
    pthread_mutex_t mu;            /* guards the maps below */
    json_t *expected;              /* "ns/name" -> pool key: created, not yet in the cache */
    json_t *taken;                 /* "ns/name" -> claim key: a warm sandbox being adopted */
    json_t *claim_seen;            /* "ns/name" -> when the claim was first seen unready (ns) */
    json_t *held;                  /* "ns/name" -> since when a Sandbox's status write waits (ns) */
    json_t *adopted; /* pool "ns/name" -> when a claim last took one of its own (ns) */
    json_t *wrote;   /* queue key -> [resourceVersion, when (ns)] of our last status write to the
                        object, until its cache shows it */
    atomic_uint_least64_t claim_writes, claims_warm, claims_cold;
    atomic_uint_least64_t sandbox_status_writes, sandbox_status_held, refills_deferred;
    struct sbx_histogram claim_ready[2];             /* seen to Ready written: [0] cold, [1] warm */
    struct sbx_reconciler kinds[SBX_CTRL_KINDS_MAX]; /* registered before the start; then read */
    size_t nkinds;
    bool started;
};

/* A controller with its queues, not started. kube stays owned by the caller and must outlive
 * the controller. */
int sbx_ctrl_new(struct sbx_kube *kube, const struct sbx_ctrl_opts *opts, struct sbx_ctrl **ret,
                 struct sbx_error *err);

/* Adds a kind (copied) to the table the workers dispatch by, before sbx_ctrl_start. -EEXIST when
 * the kind is there already, -ENOSPC past SBX_CTRL_KINDS_MAX kinds, -EBUSY once started. Keys of
 * a kind nobody registered are dropped. */
int sbx_ctrl_register(struct sbx_ctrl *c, const struct sbx_reconciler *rec, struct sbx_error *err);

/* Starts informers and workers. On failure the caller still frees c (sbx_ctrl_free). */
int sbx_ctrl_start(struct sbx_ctrl *c, struct sbx_error *err);

/* True once every informer has listed. */
bool sbx_ctrl_synced(struct sbx_ctrl *c);

/* Stops workers and informers, frees. Accepts NULL. */
void sbx_ctrl_free(struct sbx_ctrl *c);

/* Deletes the cached Sandboxes of namespace ns whose controller is the `kind` named `name`: the
 * owner is gone, and the garbage collector may not run. */
int sbx_ctrl_delete_sandboxes_of(struct sbx_ctrl *c, const char *ns, const char *kind,
                                 const char *name, struct sbx_error *err);

/* "kind:ns/name" queue keys. Returns buf or NULL when it does not fit. */
char *sbx_queue_key(char *buf, size_t size, const char *kind, const char *ns, const char *name);

/* Queues a "kind:ns/name" key on its queue, now or after delay_ms. */
void sbx_ctrl_enqueue(struct sbx_ctrl *c, const char *key, uint64_t delay_ms);

/* Stale caches. A reconcile that read a cached copy older than our last status write to the
 * object would write again what was just written (a second write a claim, a sandbox). After a
 * write, sbx_ctrl_wrote records the resourceVersion the API server answered; until the informer
 * shows that version (at most 5 s), sbx_ctrl_cache_behind is true and queues the key for the end
 * of that wait; the write's own watch event queues it sooner. qkey is "kind:ns/name". */
void sbx_ctrl_wrote(struct sbx_ctrl *c, const char *qkey, uint64_t rv);
bool sbx_ctrl_cache_behind(struct sbx_ctrl *c, const char *qkey, json_t *cached);

/* A claim's status now says Ready: observes the time since it was first seen. */
void sbx_ctrl_claim_ready(struct sbx_ctrl *c, const char *key, bool warm);
