/* The router's own HTTP ports, on libmicrohttpd: /healthz and /readyz on the probe port,
 * /metrics on the metrics port. (The main port's HTTP/1.1 is the proxy's: proxy.h.) */
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
    /* With set_ready on, /readyz is 200 only while this says so too (NULL: always). */
    bool (*ready)(void *arg);
    void *arg;
};

int sbx_router_http_start(struct sbx_router_http **ret, const struct sbx_router_http_opts *o,
                          struct sbx_error *err);

/* /readyz answers 200 from now on (every listener is bound), or 503 (draining). */
void sbx_router_http_set_ready(struct sbx_router_http *h, bool ready);

void sbx_router_http_stop(struct sbx_router_http *h);
