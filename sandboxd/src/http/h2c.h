/* h2c (HTTP/2 over cleartext TCP with prior knowledge) in front of the HTTP/1.1 server: a bridge,
 * so every route keeps the one implementation it has on libmicrohttpd. The gate hands over a
 * connection that opens with the HTTP/2 client preface; a thread of the front's own runs an
 * nghttp2 server session on it. Each stream gets a socketpair whose other end is served as an
 * HTTP/1.1 connection from the client's address: the front writes the stream's request on it as
 * an HTTP/1.1 request (body by Content-Length as the client gave it, else chunked) and relays
 * the response it reads back (h2c_resp.h) as HEADERS and DATA.
 *
 * Flow control holds end to end: a stream's DATA is acknowledged (WINDOW_UPDATE) only as it is
 * written to its socketpair, and its socketpair is read only while the response has room to go,
 * so a client that never reads costs a bounded buffer and the server's own flow control takes
 * over. A reset stream closes its socketpair: the server sees its client gone.
 *
 * Limits: connections in all and per client address, streams per connection
 * (SETTINGS_MAX_CONCURRENT_STREAMS), streams in all (beyond: REFUSED_STREAM), a header list of 16
 * KiB (beyond: 431), the lifetime of a connection with no stream at work (then GOAWAY). A protocol
 * error ends the connection with GOAWAY. */
#pragma once

#include <sys/socket.h>

#include "error.h"

struct sbx_h2c;

struct sbx_h2c_opts {
    /* At the limit the connection idle longest (no stream) is closed for a newcomer; if none is
     * idle, or its address has max_per_peer already, the newcomer gets GOAWAY. */
    unsigned max_connections;
    unsigned max_per_peer;
    unsigned max_streams; /* open at once, over all connections */
    unsigned idle_timeout_s;
    /* Serves one end of a stream's socketpair as an HTTP/1.1 connection from peer; takes fd,
     * even on failure (-errno). Called on the front's thread. */
    int (*serve)(void *arg, int fd, const struct sockaddr *peer, socklen_t len);
    void *arg;
};

/* Streams one connection may have open at once. */
#define SBX_H2C_STREAMS_PER_CONNECTION 100

/* Starts the front's thread; 0 or -errno. */
int sbx_h2c_start(struct sbx_h2c **ret, const struct sbx_h2c_opts *o, struct sbx_error *err);

/* Takes a connection whose first bytes (not read yet) are the client preface; any thread. Takes
 * fd, even on failure (-errno). Its signature is sbx_gate_opts.hand_h2's. */
int sbx_h2c_hand(void *h2c, int fd, const struct sockaddr *peer, socklen_t len);

/* Stops the thread and closes every connection and stream. Accepts NULL. */
void sbx_h2c_free(struct sbx_h2c *f);
