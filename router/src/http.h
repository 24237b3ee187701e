/* The router's HTTP/1.1 side: the main port's connections that are not HTTP/2 (handed over by
 * the listener), and the probe and metrics ports. Today it answers GET /healthz on the main
 * port, as the reference router does; /healthz and /readyz on the probe port; /metrics on the
 * metrics port. Proxying HTTP/1.1 to sandboxes is still to come: such a request is answered 501
 * with the reference's error shape. */
#pragma once

#include <stdbool.h>
#include <sys/socket.h>

#include "error.h"

struct sbx_router_http;

struct sbx_router_http_opts {
    const char *probe_addr;   /* "host:port", ":port"; NULL or "" for none */
    const char *metrics_addr; /* likewise */
    /* The metrics text (malloc'ed, Prometheus exposition format). */
    char *(*metrics)(void *arg);
    void *arg;
};

int sbx_router_http_start(struct sbx_router_http **ret, const struct sbx_router_http_opts *o,
                          struct sbx_error *err);

/* Serves a main-port connection (fd taken). */
void sbx_router_http_add(struct sbx_router_http *h, int fd, const struct sockaddr *peer,
                         socklen_t len);

/* /readyz answers 200 from now on (every listener is bound), or 503 (draining). */
void sbx_router_http_set_ready(struct sbx_router_http *h, bool ready);

void sbx_router_http_stop(struct sbx_router_http *h);
