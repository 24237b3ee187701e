/* The gRPC relay: every call the router's gRPC server receives, whatever its method, relayed to
 * the sandbox its metadata names (x-sandbox-id, -namespace, -port, -uid, -pod-ip) over one
 * pooled HTTP/2 connection per upstream, stream for stream: metadata, every message both ways,
 * half-close, cancellation both ways, the deadline, and the status with its trailers, untouched.
 * On gRPC C core's generic calls. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "authz.h"
#include "error.h"
#include "resolver.h"
#include "target.h"

#define SBX_RELAY_MAX_THREADS 16

struct sbx_relay;

struct sbx_relay_opts {
    int threads;           /* completion-queue threads, 1 to SBX_RELAY_MAX_THREADS */
    int max_message_bytes; /* either way; -1: no limit */
    int default_port;      /* of a call without x-sandbox-port: sandboxd's gRPC port */
    struct sbx_target_opts target;
    unsigned max_upstreams; /* pooled connections; the least recently used goes beyond */
    /* Decides each call before it is relayed (NULL: every call passes; borrowed, outlives the
     * relay). A decision the API server must make runs on a thread of its own, never on a
     * completion-queue thread; at most 64 wait at once, beyond that the call is UNAVAILABLE. */
    struct sbx_authz *authz;
    /* Resolves each allowed call's target (NULL: the keys' address as sbx_target_parse gives
     * it; borrowed). A call whose sandbox must wake up waits on a thread of its own (at most
     * 256 at once, beyond that UNAVAILABLE); a dial that failed as a dead host's is reported. */
    struct sbx_resolver *resolver;
};

/* Creates the relay's server; it listens on nothing: connections come by sbx_relay_add_fd. */
int sbx_relay_new(struct sbx_relay **ret, const struct sbx_relay_opts *o, struct sbx_error *err);

int sbx_relay_start(struct sbx_relay *r, struct sbx_error *err);

/* Serves an accepted connection whose first bytes are the HTTP/2 preface (fd taken). */
void sbx_relay_add_fd(struct sbx_relay *r, int fd);

/* Counters for metrics. */
struct sbx_relay_stats {
    uint64_t calls, refused, upstreams_open, upstreams_created;
};
void sbx_relay_stats(struct sbx_relay *r, struct sbx_relay_stats *s);

/* Stops accepting calls, cancels those in flight after grace_ms, joins the threads; the stats
 * stay readable. */
void sbx_relay_shutdown(struct sbx_relay *r, uint64_t grace_ms);
/* Shuts down (with no grace) if not yet, and frees. Accepts NULL. */
void sbx_relay_free(struct sbx_relay *r);
