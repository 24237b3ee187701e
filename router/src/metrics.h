/* The router's /metrics text: what the listener, the gRPC relay and the HTTP/1.1 proxy count,
 * in Prometheus exposition format, with the reference router's names where they mean the same.
 * No label names a sandbox. */
#pragma once

#include "authz.h"
#include "listener.h"
#include "proxy.h"
#include "relay.h"
#include "tls.h"

/* What counts: any part may be NULL (not started, or not configured). */
struct sbx_router_parts {
    struct sbx_listener *listener, *tls_listener;
    struct sbx_relay *relay;
    struct sbx_proxy *proxy;
    struct sbx_tls *tls;
    struct sbx_authz *authz;
};

/* malloc'ed; NULL without memory. */
char *sbx_router_metrics(const struct sbx_router_parts *parts);
