/* The controller: informers on what it owns, work queues of keys "kind:ns/name" (kinds
 * sandbox, pool, template; claim on a queue of its own), bounded pools of workers reconciling
 * them. */
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
#include "podspec.h"
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
};

struct sbx_ctrl {
    struct sbx_kube *kube;
    struct sbx_ctrl_opts opts;
    struct sbx_informer *sandboxes, *pods, *services, *templates, *pools, *claims;
    struct sbx_wq *queue;       /* sandbox: and pool: keys */
    struct sbx_wq *claim_queue; /* claim: keys: never stuck behind a refill */
    struct sbx_bucket refill;   /* paces warm-pool creations across pools */
    pthread_mutex_t mu;         /* guards the maps below */
    json_t *expected;           /* "ns/name" -> pool key: created, not yet in the cache */
    json_t *taken;              /* "ns/name" -> claim key: a warm sandbox being adopted */
    json_t *claim_seen;         /* "ns/name" -> when the claim was first seen unready (ns) */
    json_t *held;               /* "ns/name" -> since when a Sandbox's status write waits (ns) */
    json_t *adopted;            /* pool "ns/name" -> when a claim last took one of its own (ns) */
    json_t *wrote; /* queue key -> [resourceVersion, when (ns)] of our last status write to the
                      object, until its cache shows it */
    atomic_uint_least64_t claim_writes, claims_warm, claims_cold;
    atomic_uint_least64_t sandbox_status_writes, sandbox_status_held, refills_deferred;
    struct sbx_histogram claim_ready[2]; /* seen to Ready written: [0] cold, [1] warm */
};

/* Starts informers and workers. kube stays owned by the caller and must outlive the controller. */
int sbx_ctrl_start(struct sbx_kube *kube, const struct sbx_ctrl_opts *opts, struct sbx_ctrl **ret,
                   struct sbx_error *err);

/* True once every informer has listed. */
bool sbx_ctrl_synced(struct sbx_ctrl *c);

/* Stops workers and informers, frees. Accepts NULL. */
void sbx_ctrl_free(struct sbx_ctrl *c);

/* Whether the template's sandboxes get the default NetworkPolicy: networkPolicyManagement
 * Managed (or unset) and no spec.networkPolicy. */
bool sbx_template_default_policy(json_t *tmpl);

/* The Sandbox a SandboxTemplate makes: its pod template and service, with labels (borrowed) and
 * the controller reference owner (stolen, may be NULL: then -ENOMEM). -EINVAL when the template
 * has no pod template. Under the default NetworkPolicy, which lets no query reach cluster DNS, a
 * pod template without dnsPolicy gets public resolvers (dnsPolicy None), as the reference. */
int sbx_sandbox_from_template(json_t *tmpl, const char *ns, const char *name, json_t *owner,
                              json_t *labels, json_t **ret, struct sbx_error *err);

/* The Sandbox a SandboxClaim gets on a cold start, from its warm pool's template: named like the
 * claim, owned by it, its lifecycle (shutdownTime, shutdownPolicy Delete or Retain), pod labels
 * and annotations, and env ({name, value, containerName}, strings) applied as the template's
 * envVarsInjectionPolicy allows. -EPERM when the env cannot be (malformed, not allowed, or naming
 * a container the template lacks), -EINVAL when the template or the claim's other additions
 * cannot be used. */
int sbx_claim_sandbox(json_t *claim, json_t *tmpl, json_t **ret, struct sbx_error *err);

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

/* The reconcilers, called by the workers with "ns/name". */
int sbx_sandbox_reconcile(struct sbx_ctrl *c, const char *key, struct sbx_error *err);
int sbx_pool_reconcile(struct sbx_ctrl *c, const char *key, struct sbx_error *err);
int sbx_claim_reconcile(struct sbx_ctrl *c, const char *key, struct sbx_error *err);
int sbx_template_reconcile(struct sbx_ctrl *c, const char *key, struct sbx_error *err);
