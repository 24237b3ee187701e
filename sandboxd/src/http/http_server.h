/* The HTTP adapter: libmicrohttpd with an internal thread pool behind the gate (http_gate.h),
 * the REST files API, health, readiness, metadata and metrics. Every request head is held to
 * RFC 9112 (http_head.h): the gate checks a connection's first one on its bytes, the server
 * every one on the fields libmicrohttpd parsed; a refusal is a JSON error and closes the
 * connection. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "path.h"

struct sbx_auth;
struct sbx_fswatches;
struct sbx_http;
struct sbx_jobs;
struct sbx_loop;
struct route;

struct sbx_http_opts {
    const char *host;         /* NULL: every address of both families (IPv4 alone without IPv6) */
    int port;                 /* 0: any free port */
    unsigned idle_timeout_s;  /* idle keep-alive connections are closed after it */
    unsigned head_timeout_ms; /* a connection's first request head must arrive within it */
    unsigned threads;
    unsigned max_connections;  /* served at once; idle ones are closed for newcomers beyond */
    unsigned max_per_peer;     /* connections per client address */
    uint64_t max_upload_bytes; /* 413 beyond */
    const struct sbx_root *root;
    const char *metadata_prefix;
    /* Readiness (/readyz) and liveness (/healthz) as main sees them; any thread may call. */
    bool (*ready)(void *arg);
    bool (*alive)(void *arg);
    void *arg;
    /* When set, every route but the health ones (and /metrics when metrics_open) needs
     * "Authorization: Bearer <token>"; 401 otherwise. Borrowed; must outlive the server. */
    struct sbx_auth *auth;
    bool metrics_open;
    /* Terminals (WebSocket): the jobs they attach to and the loop their sockets run on; NULL:
     * the terminal routes answer 503. */
    struct sbx_jobs *jobs;
    struct sbx_loop *loop;
    unsigned max_websockets; /* WebSocket connections at once */
    /* Directory watches served by /v1/watch (NULL: 503), and the period of the keepalive
     * comment on a quiet stream. Borrowed. */
    struct sbx_fswatches *watches;
    uint64_t watch_keepalive_ms;
    /* No listening socket and no threads: the caller hands connections over with
     * sbx_http_add_connection and drives the server with sbx_http_run (the fuzz target does;
     * host and port are ignored). */
    bool external;
    /* The routes served (struct route, http_internal.h), first match wins; NULL: the REST
     * API's. Another port (the E2B one, sandboxd/src/e2b) serves its own table on the same
     * gate, head checks and thread pool. Borrowed. */
    const struct route *routes;
    size_t n_routes;
    /* Serve h2c (HTTP/2 with prior knowledge, h2c.h) on the port too, every route through its
     * HTTP/1.1 implementation. */
    bool h2c;
};

/* Binds and starts serving; returns the bound port or -errno. */
int sbx_http_start(struct sbx_http **ret, const struct sbx_http_opts *o, struct sbx_error *err);

/* With opts.external: serves the connected socket fd (taken, even on failure) as if accepted
 * from a loopback client. Returns 0 or -errno. */
int sbx_http_add_connection(struct sbx_http *h, int fd, struct sbx_error *err);

/* With opts.external: does whatever reading, answering and writing can be done now, without
 * waiting. */
void sbx_http_run(struct sbx_http *h);

/* Connections open now: served, and held by the gate waiting for their first head. */
unsigned sbx_http_connections(struct sbx_http *h);

/* Which families the REST port serves, for the start-up log ("IPv4 and IPv6", ...). */
const char *sbx_http_families(struct sbx_http *h);

/* From now on /v1/health and /readyz answer 503. */
void sbx_http_set_draining(struct sbx_http *h);

/* Stops accepting; closes connections; joins the threads. Accepts NULL. */
void sbx_http_stop(struct sbx_http *h);
