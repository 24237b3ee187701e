/* Where a request's sandbox is, in the reference router's order: the X-Sandbox-Pod-IP key, then
 * the Pod cache by Sandbox UID, then by namespace/name, then the DNS form
 * <id>.<namespace>.svc.<cluster-domain>. Without a port key, gRPC goes to the Pod's container
 * port named sandboxd-grpc and HTTP to sandboxd-http (else 9090 and 8080).
 *
 * With the cache on (--cache-enabled) it watches sandboxes' Pods (label
 * agents.x-k8s.io/sandbox-name-hash) and Sandboxes through the Kubernetes API (kube/), and:
 * evicts an entry whose address proved dead (sbx_resolver_dial_failed); wakes a Sandbox whose
 * spec.operatingMode is Suspended (one patch to Running however many requests ask) and holds
 * the request until the Sandbox is Ready, at most the wake timeout. With the cache off it needs
 * no Kubernetes access at all. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "target.h"

struct sbx_resolver;
struct sbx_kube;

struct sbx_resolver_opts {
    struct sbx_kube *kube;       /* the cache's API client (borrowed); NULL: the cache is off */
    const char *cache_namespace; /* NULL or "": every namespace */
    const char *cluster_domain;
    uint64_t wake_timeout_ms;
    uint64_t resync_ms; /* cached Pods applied again this often (0: 10 minutes) */
};

/* Builds the resolver; with a client, starts the cache's informers (ready once both listed:
 * sbx_resolver_ready). */
int sbx_resolver_new(struct sbx_resolver **ret, const struct sbx_resolver_opts *o,
                     struct sbx_error *err);
void sbx_resolver_free(struct sbx_resolver *r);

/* True when requests can be resolved as well as they will be: the cache is off, or both
 * informers have delivered their first list. */
bool sbx_resolver_ready(struct sbx_resolver *r);

/* Resolves t (as sbx_target_parse made it) for gRPC or HTTP: sets t->host, and t->port when no
 * port key was given. A Suspended sandbox is woken; wait_ms bounds the wait for it to be Ready
 * (with the wake timeout): 0 does not wait and returns -EWOULDBLOCK, so a caller that must not
 * block can go on elsewhere and call again. Fails with -ETIMEDOUT when the sandbox was not Ready
 * in time (503 with Retry-After), -EBUSY when too many wakes are waiting, -ECANCELED after
 * sbx_resolver_cancel, or the API's error when the wake's patch failed (-EACCES...). */
int sbx_resolver_resolve(struct sbx_resolver *r, struct sbx_target *t, bool grpc, uint64_t wait_ms,
                         struct sbx_error *err);

/* A dial to t->host failed with -errnum. A dead host (anything but -ECONNREFUSED, which proves
 * a live one) evicts the cache entry that named the address, so the next request does not try
 * it again. True when an entry went. */
bool sbx_resolver_dial_failed(struct sbx_resolver *r, const struct sbx_target *t, int errnum);

/* Ends every wait for a wake with -ECANCELED after_ms from now (0: now), and refuses new ones
 * from then on: a drain's grace, then the shutdown. */
void sbx_resolver_cancel(struct sbx_resolver *r, uint64_t after_ms);

/* Seconds a client told -ETIMEDOUT should wait before trying again (Retry-After). */
#define SBX_RESOLVER_RETRY_AFTER_S 5

/* The resolver's metrics in Prometheus text (malloc'ed), or NULL. */
char *sbx_resolver_metrics(struct sbx_resolver *r);
