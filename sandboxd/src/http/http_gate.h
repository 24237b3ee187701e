/* The REST port's gate: a thread of its own accepts every connection, holds it until its first
 * request head has arrived whole (within a deadline), checks that head strictly (http_head.h)
 * and only then hands the socket to the server. So a client that opens connections and sends
 * half a head never takes one of the server's connections, and a malformed head is answered with
 * a JSON error before libmicrohttpd sees it. One that sends nothing is not even seen for the
 * head's time: the listening socket has TCP_DEFER_ACCEPT, so the kernel holds it until data
 * comes (a flood of them cannot fill the accept queue, whose overflow drops everyone's SYNs).
 *
 * Limits, and who goes first when one is reached:
 * - connections per peer address (held here and served): the peer's oldest connection still
 *   without a head is closed for the new one, else its oldest idle served one, else the new
 *   connection is refused (503);
 * - connections held here: the oldest is closed for the new one;
 * - connections served: an idle one (no request in progress) is closed, the oldest first, for a
 *   new head; if none is idle the new one is refused (503), except health probes, which have a
 *   reserve of their own beyond the limit.
 * The server reports what its connections do (sbx_gate_served_*), from any thread. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "error.h"

struct sbx_gate;
struct sbx_gate_conn;

struct sbx_gate_opts {
    const char *host; /* NULL: every address of both families (IPv4 alone without IPv6) */
    int port;         /* 0: any free port */
    unsigned head_timeout_ms;
    unsigned max_pending;  /* connections held here, waiting for their first head */
    unsigned max_per_peer; /* held and served, per peer address */
    unsigned max_served;   /* served, beyond which idle ones are closed */
    unsigned probe_reserve;
    /* Whether a request path (len bytes, no query) is a health route. */
    bool (*is_probe)(const char *path, size_t len);
    /* Serves a connection whose first head passed; takes fd, even on failure (-errno). */
    int (*hand)(void *arg, int fd, const struct sockaddr *peer, socklen_t len);
    /* Takes a connection that opens with the HTTP/2 client preface (h2c with prior knowledge),
     * even on failure (-errno); the gate forgets it. NULL: such a connection is refused (505) like
     * any other head that is not HTTP/1.x. */
    int (*hand_h2)(void *arg, int fd, const struct sockaddr *peer, socklen_t len);
    void *arg;
};

/* Binds and starts the gate's thread; returns the bound port or -errno. */
int sbx_gate_start(struct sbx_gate **ret, const struct sbx_gate_opts *o, struct sbx_error *err);

/* The most connections the gate ever has served at once: the limit, as many idle ones shut down
 * for newcomers that the server has yet to close, and the probes' reserve. */
unsigned sbx_gate_ceiling(const struct sbx_gate_opts *o);

/* What the listening socket serves, for the start-up log: "IPv4 and IPv6", "IPv4 only (this
 * kernel has no IPv6)", "IPv6 only", "IPv4 only". */
const char *sbx_gate_families(const struct sbx_gate *g);

/* The gate's record of a served connection by its socket; NULL if it has none. */
struct sbx_gate_conn *sbx_gate_served_find(struct sbx_gate *g, int fd);
/* A request began on it (busy) or ended (idle: may be closed for a newcomer). */
void sbx_gate_served_busy(struct sbx_gate *g, struct sbx_gate_conn *c, bool busy);
/* The server is closing it (the socket is still open). */
void sbx_gate_served_closed(struct sbx_gate *g, struct sbx_gate_conn *c);

/* Connections held by the gate now (waiting for a head, or being refused). */
unsigned sbx_gate_held(struct sbx_gate *g);

/* Stops accepting and closes what the gate holds; served connections stay known until
 * sbx_gate_free. */
void sbx_gate_stop(struct sbx_gate *g);
/* After the server has closed every served connection. Accepts NULL. */
void sbx_gate_free(struct sbx_gate *g);
