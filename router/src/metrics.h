/* The router's /metrics text: what the listener, the gRPC relay and the HTTP/1.1 proxy count,
 * in Prometheus exposition format, with the reference router's names where they mean the same.
 * No label names a sandbox. */
#pragma once

#include "authz.h"
#include "listener.h"
#include "proxy.h"
#include "relay.h"

/* malloc'ed; NULL without memory. Any of the parts may be NULL (not started). */
char *sbx_router_metrics(struct sbx_listener *l, struct sbx_relay *r, struct sbx_proxy *p,
                         struct sbx_authz *a);
