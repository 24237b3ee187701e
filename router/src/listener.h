/* The router's one port for every client: a thread accepts each connection and holds it until
 * its first bytes tell which protocol it speaks (the HTTP/2 client preface, or anything else:
 * HTTP/1.1), then hands it to that protocol's server. A connection that says nothing within the
 * head timeout is closed; at most max_pending wait at once (the oldest goes first). */
#pragma once

#include <stdint.h>
#include <sys/socket.h>

#include "error.h"

struct sbx_listener;

struct sbx_listener_opts {
    const char *host; /* an IP address, or NULL for every address of both families */
    int port;
    unsigned head_timeout_ms;
    unsigned max_pending;
    /* The connection is theirs (fd and all); any thread may be calling. */
    void (*h2)(void *arg, int fd);
    void (*h1)(void *arg, int fd, const struct sockaddr *peer, socklen_t len);
    void *arg;
};

/* Binds and starts accepting; returns the bound port or -errno. */
int sbx_listener_start(struct sbx_listener **ret, const struct sbx_listener_opts *o,
                       struct sbx_error *err);

/* Connections handed over so far: to HTTP/2, to HTTP/1.1; closed unsorted. */
void sbx_listener_counts(struct sbx_listener *l, uint64_t *h2, uint64_t *h1, uint64_t *dropped);

/* Stops accepting, closes the connections still waiting, joins the thread; the counts stay
 * readable. Accepts NULL. */
void sbx_listener_stop(struct sbx_listener *l);
void sbx_listener_free(struct sbx_listener *l);

/* Splits "host:port", ":port" or "[v6]:port" into host (NULL for every address) and port. */
int sbx_listener_parse_addr(const char *addr, char *host, size_t size, int *port,
                            struct sbx_error *err);
