/* The E2B control-plane subset (--e2b-api) and the routing of E2B's sandbox traffic
 * (--e2b-domain), as a hook of the HTTP/1.1 proxy (proxy.h):
 *
 * - POST /sandboxes and /v2/sandboxes (templateID names a SandboxWarmPool, or the pool of the
 *   SandboxTemplate of that name, in the API key's namespace), GET /sandboxes and /v2/sandboxes,
 *   GET and DELETE /sandboxes/{id}, POST /sandboxes/{id}/timeout, POST /sandboxes/{id}/connect
 *   and /v2/sandboxes/{id}/connect, answered in E2B's JSON; other routes under /sandboxes 501.
 *   A create's env vars go to the sandbox's envd (its /init, at the pod's IP) before it answers.
 *   Requests to api.<e2b domain>, and those without routing keys whose path is one of these.
 * - X-API-Key maps to a namespace by the data of one Secret (key -> namespace); a missing or
 *   unknown key is E2B's 401.
 * - Sandbox traffic: the host <port>-<sandboxid>.<e2b domain>, or on any host the headers
 *   E2b-Sandbox-Id and E2b-Sandbox-Port (49983 when absent), goes to the claim's Sandbox at
 *   that port through the proxy. A sandbox that is not there is E2B's 502 "... was not found". */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "proxy.h"

#define SBX_E2B_ENVD_PORT 49983

struct sbx_kube;
struct sbx_e2b;

/* The envd version answers name by default. The SDKs gate features on it (SDK 2.63: file
 * metadata 0.6.2, entry info in watch events 0.6.3, watches on network mounts 0.6.4) and refuse
 * them below; sandboxd's E2B port has all of those (test/e2b runs the SDK at its debug version,
 * which passes every gate), so a lower one only takes features away. */
#define SBX_E2B_ENVD_VERSION "0.6.4"

struct sbx_e2b_opts {
    struct sbx_kube *kube; /* borrowed */
    bool api;              /* serve the control plane */
    const char *domain;    /* sandbox hosts' domain, and the one answers name ("": none) */
    const char *keys_ns;   /* the API keys' Secret */
    const char *keys_name;
    const char *lookup_ns;      /* sandboxes found by ID alone here (NULL or "": everywhere) */
    const char *envd_version;   /* what answers say the sandboxes' envd is */
    uint64_t create_timeout_ms; /* a POST /sandboxes waits this long for the sandbox */
    unsigned default_timeout_s; /* a sandbox's life when the request names none */
    unsigned max_timeout_s;     /* the longest a request may ask */
    int envd_port;              /* where a create's env vars go (/init): 0 for 49983 */
};

int sbx_e2b_new(struct sbx_e2b **ret, const struct sbx_e2b_opts *o, struct sbx_error *err);
void sbx_e2b_free(struct sbx_e2b *e);

/* The proxy's hook (valid while e lives). */
const struct sbx_proxy_hook *sbx_e2b_hook(struct sbx_e2b *e);
