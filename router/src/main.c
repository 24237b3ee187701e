/* sandboxd-router: reaches sandboxes by name from outside the cluster. One port for every client
 * (the listener tells HTTP/2 from HTTP/1.1 by the first bytes): gRPC calls are relayed (routed by
 * their x-sandbox-* metadata, one pooled HTTP/2 connection per sandbox), HTTP/1.1 requests are
 * proxied (routed by their X-Sandbox-* headers). Parses flags, starts the servers, waits for
 * SIGTERM, drains. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <grpc/grpc.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "authz.h"
#include "e2b_api.h"
#include "flags.h"
#include "http.h"
#include "kube.h"
#include "listener.h"
#include "log.h"
#include "metrics.h"
#include "parse.h"
#include "proxy.h"
#include "relay.h"
#include "resolver.h"
#include "tls.h"

static const char *arg_http_bind_address = ":8080";
static const char *arg_probe_address = ":8081";
static const char *arg_metrics_address = ":9090";
static const char *arg_cluster_domain = "cluster.local";
static uint64_t arg_head_timeout_ms = 10000;
static bool arg_allow_loopback_pod_ip;
static uint64_t arg_shutdown_timeout_ms = 30000;
static long long arg_max_message_bytes = 64 << 20;
static long long arg_threads; /* 0: grpc_threads_default() */
static long long arg_max_upstreams = 4096;
static uint64_t arg_proxy_timeout_ms = 180000;
static uint64_t arg_response_header_timeout_ms = 30000;
static uint64_t arg_idle_timeout_ms = 90000;
static uint64_t arg_dial_timeout_ms = 10000;
static long long arg_upstream_max_retries = 3;
static uint64_t arg_retry_initial_ms = 200;
static uint64_t arg_retry_max_ms = 800;
static long long arg_max_request_body_bytes;
static long long arg_http_max_connections = 16384;
static const char *arg_preview_domain = "";
static const char *arg_https_bind_address = "";
static const char *arg_tls_cert_file = "";
static const char *arg_tls_key_file = "";
static const char *arg_tls_client_ca_file = "";
static enum sbx_mtls arg_mtls_mode = SBX_MTLS_OFF;
static bool arg_access_log = true;
static const char *arg_kubeconfig;
static enum sbx_authz_mode arg_authz_mode = SBX_AUTHZ_ALLOW_ALL;
static uint64_t arg_authz_ttl_ms = 30000;
static long long arg_authz_cache_size = 2048;
static bool arg_authz_require_token;
static const char *arg_authz_audiences;
static const char *arg_authz_secret_file;
static uint64_t arg_authz_sandbox_token_ttl_ms = 30000;
static bool arg_cache_enabled;
static const char *arg_cache_namespace;
static uint64_t arg_wake_timeout_ms = 60000;
static uint64_t arg_cache_resync_ms = 600000;
static bool arg_e2b_api;
static const char *arg_e2b_domain = "";
static const char *arg_e2b_api_keys_secret = "sandboxd-e2b-api-keys";
static const char *arg_e2b_envd_version = SBX_E2B_ENVD_VERSION;
static uint64_t arg_e2b_create_timeout_ms = 60000;
static long long arg_e2b_envd_port = 49983;

static int opt_count(const char *v, void *dst)
{
    return sbx_parse_int(v, 1, 1LL << 40, dst);
}

static int opt_mtls(const char *v, void *dst)
{
    static const char *const modes[] = {"off", "optional", "required"};

    for (int i = 0; i < 3; i++)
        if (strcmp(v, modes[i]) == 0) {
            *(enum sbx_mtls *)dst = (enum sbx_mtls)i;
            return 0;
        }
    return -EINVAL;
}

static int opt_port(const char *v, void *dst)
{
    return sbx_parse_int(v, 1, 65535, dst);
}

static int opt_count0(const char *v, void *dst)
{
    return sbx_parse_int(v, 0, 1LL << 50, dst);
}

static int opt_threads(const char *v, void *dst)
{
    return sbx_parse_int(v, 0, SBX_RELAY_MAX_THREADS, dst);
}

/* gRPC's pollers are its completion-queue threads: each one more hands completions from thread
 * to thread (a futex and an eventfd kick a message, measured), which pays only where CPUs are
 * free to run them. Half of those this process may run on, 1 to 4. */
static int grpc_threads_default(void)
{
    cpu_set_t set;
    int n = 2;

    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        n = CPU_COUNT(&set);
    n /= 2;
    return n < 1 ? 1 : n > 4 ? 4 : n;
}

static int opt_authz_mode(const char *v, void *dst)
{
    return sbx_authz_mode_parse(v, dst);
}

static const struct sbx_flag flag_table[] = {
    {"http-bind-address", sbx_flag_string, &arg_http_bind_address,
     "address the router serves on, \"host:port\" or \":port\" (:8080)"},
    {"health-probe-bind-address", sbx_flag_string, &arg_probe_address,
     "address of /healthz and /readyz (:8081; \"\" for none)"},
    {"metrics-bind-address", sbx_flag_string, &arg_metrics_address,
     "address of /metrics (:9090; \"\" for none)"},
    {"http-head-timeout", sbx_flag_duration, &arg_head_timeout_ms,
     "time a new connection has to send its first bytes (10s)"},
    {"cluster-domain", sbx_flag_string, &arg_cluster_domain,
     "the cluster's DNS domain, for <id>.<namespace>.svc.<domain> (cluster.local)"},
    {"allow-loopback-pod-ip", NULL, &arg_allow_loopback_pod_ip,
     "accept a loopback X-Sandbox-Pod-IP (tests, a router beside its sandbox)"},
    {"shutdown-timeout", sbx_flag_duration, &arg_shutdown_timeout_ms,
     "on SIGTERM: calls in flight get this long, then are cancelled (30s)"},
    {"grpc-max-message-bytes", opt_count, &arg_max_message_bytes,
     "largest gRPC message relayed either way (67108864)"},
    {"grpc-threads", opt_threads, &arg_threads,
     "gRPC completion-queue threads (0: half the CPUs this process may run on, 1 to 4)"},
    {"max-upstreams", opt_count, &arg_max_upstreams,
     "upstream connections pooled at once; the least recently used closes beyond (4096)"},
    {"proxy-timeout", sbx_flag_duration, &arg_proxy_timeout_ms,
     "HTTP/1.1: silence either way that ends a request, and the cap of X-Sandbox-Timeout "
     "(3m; upgraded connections have none)"},
    {"response-header-timeout", sbx_flag_duration, &arg_response_header_timeout_ms,
     "HTTP/1.1: wait for a sandbox's response head when X-Sandbox-Timeout is not sent (30s)"},
    {"http-idle-timeout", sbx_flag_duration, &arg_idle_timeout_ms,
     "HTTP/1.1: a kept-alive client connection closes after this long without a request (90s)"},
    {"upstream-dial-timeout", sbx_flag_duration, &arg_dial_timeout_ms,
     "one connect to a sandbox (10s)"},
    {"upstream-max-retries", opt_count0, &arg_upstream_max_retries,
     "dials retried after a failed one, with backoff (3)"},
    {"upstream-retry-initial-delay", sbx_flag_duration, &arg_retry_initial_ms,
     "wait before the first retry; doubled each time (200ms)"},
    {"upstream-retry-max-delay", sbx_flag_duration, &arg_retry_max_ms,
     "longest wait between retries (800ms)"},
    {"max-request-body-bytes", opt_count0, &arg_max_request_body_bytes,
     "HTTP/1.1: larger declared request bodies are refused 413 (0: no limit)"},
    {"http-max-connections", opt_count, &arg_http_max_connections,
     "HTTP/1.1 client connections at once (one thread each); beyond, 503 (16384)"},
    {"preview-domain", sbx_flag_string, &arg_preview_domain,
     "serve preview URLs http://<port>-<name>.<namespace>.<domain>/ (wildcard DNS to the "
     "router); the path form /s/<namespace>/<name>/<port>/ needs none (\"\": host form off)"},
    {"https-bind-address", sbx_flag_string, &arg_https_bind_address,
     "address of the TLS port, \"host:port\" or \":port\" (\"\": none); gRPC (ALPN h2) and "
     "HTTP/1.1 as on the plaintext port"},
    {"tls-cert-file", sbx_flag_string, &arg_tls_cert_file,
     "PEM certificate chain of the TLS port (read again when the file changes)"},
    {"tls-key-file", sbx_flag_string, &arg_tls_key_file, "PEM private key of the TLS port"},
    {"tls-client-ca-file", sbx_flag_string, &arg_tls_client_ca_file,
     "PEM CAs that sign client certificates, for --mtls-mode"},
    {"mtls-mode", opt_mtls, &arg_mtls_mode,
     "client certificates on the TLS port: off, optional or required (off)"},
    {"access-log", sbx_flag_bool, &arg_access_log, "a log line per HTTP/1.1 request (true)"},
    {"kubeconfig", sbx_flag_string, &arg_kubeconfig,
     "kubeconfig file (else $KUBECONFIG, else the in-cluster service account)"},
    {"authz-mode", opt_authz_mode, &arg_authz_mode,
     "allow-all, tokenreview, scoped-token or sandbox-token (allow-all)"},
    {"authz-tokenreview-ttl", sbx_flag_duration, &arg_authz_ttl_ms,
     "how long a TokenReview decision is cached (30s)"},
    {"authz-tokenreview-cache-size", opt_count, &arg_authz_cache_size,
     "decisions (or, in sandbox-token mode, sandboxes' Secrets) cached at most (2048)"},
    {"authz-tokenreview-require-token", NULL, &arg_authz_require_token,
     "tokenreview: refuse a request without a Bearer token (else it passes)"},
    {"authz-tokenreview-audiences", sbx_flag_string, &arg_authz_audiences,
     "tokenreview: comma-separated audiences the token must be for (none)"},
    {"authz-scoped-token-secret-file", sbx_flag_string, &arg_authz_secret_file,
     "scoped-token: the file holding the tokens' HMAC-SHA256 secret (at least 32 bytes)"},
    {"authz-sandbox-token-ttl", sbx_flag_duration, &arg_authz_sandbox_token_ttl_ms,
     "sandbox-token: how long a sandbox's token Secret is cached (30s)"},
    {"cache-enabled", NULL, &arg_cache_enabled,
     "watch sandboxes' pods and sandboxes: route by UID and name to pod IPs, wake suspended "
     "sandboxes (needs list/watch of pods and sandboxes, patch of sandboxes)"},
    {"cache-namespace", sbx_flag_string, &arg_cache_namespace,
     "the cache's namespace (every namespace when unset)"},
    {"cache-resync-period", sbx_flag_duration, &arg_cache_resync_ms,
     "the cache's cached Pods applied again this often: an entry evicted after a failed dial "
     "comes back (10m)"},
    {"wake-timeout", sbx_flag_duration, &arg_wake_timeout_ms,
     "how long a request for a suspended sandbox waits for it to be Ready (60s)"},
    {"e2b-api", NULL, &arg_e2b_api,
     "serve E2B's control plane (POST/GET /sandboxes, ...) on the HTTP/1.1 side: sandboxes are "
     "SandboxClaims in the namespace of the request's X-API-Key (needs --e2b-api-keys-secret)"},
    {"e2b-domain", sbx_flag_string, &arg_e2b_domain,
     "E2B's domain: sandbox traffic to <port>-<sandboxid>.<domain> (and, with --e2b-api, the API "
     "at api.<domain>); the headers E2b-Sandbox-Id/-Port route on any host with --e2b-api or a "
     "domain (\"\": none)"},
    {"e2b-api-keys-secret", sbx_flag_string, &arg_e2b_api_keys_secret,
     "the Secret \"[namespace/]name\" whose data maps E2B API keys to namespaces (the router's "
     "namespace when none; sandboxd-e2b-api-keys)"},
    {"e2b-envd-version", sbx_flag_string, &arg_e2b_envd_version,
     "the envd version E2B answers name, which the SDKs read for what a sandbox can do "
     "(" SBX_E2B_ENVD_VERSION ")"},
    {"e2b-create-timeout", sbx_flag_duration, &arg_e2b_create_timeout_ms,
     "how long POST /sandboxes waits for the sandbox to be Ready (60s)"},
    {"e2b-envd-port", opt_port, &arg_e2b_envd_port,
     "the sandboxes' envd port, where a create's env vars go (POST /init; 49983)"},
    {"log-level", sbx_flag_log_level, NULL, "error, warn, info or debug (info)"},
    {"log-format", sbx_flag_log_format, NULL, "text or json (text)"},
};

struct router {
    struct sbx_kube *kube; /* when a mode needs the API server */
    struct sbx_authz *authz;
    struct sbx_resolver *resolver;
    struct sbx_e2b *e2b;
    struct sbx_relay *relay;
    struct sbx_router_http *http;
    struct sbx_proxy *proxy;
    struct sbx_tls *tls;
    struct sbx_listener *listener, *tls_listener;
};

static void to_h2(void *arg, int fd)
{
    struct router *r = arg;

    sbx_relay_add_fd(r->relay, fd);
}

static void to_h1(void *arg, int fd, const struct sockaddr *peer, socklen_t len)
{
    struct router *r = arg;

    sbx_proxy_add(r->proxy, fd, peer, len, false);
}

static void tls_to_h1(void *arg, int fd, const struct sockaddr *peer, socklen_t len)
{
    struct router *r = arg;

    sbx_proxy_add(r->proxy, fd, peer, len, true);
}

/* The TLS port's connections, whatever their first bytes. */
static void to_tls(void *arg, int fd, const struct sockaddr *peer, socklen_t len)
{
    struct router *r = arg;

    sbx_tls_add(r->tls, fd, peer, len);
}

static void to_tls_h2(void *arg, int fd)
{
    struct sockaddr_storage peer;
    socklen_t len = sizeof(peer);

    if (getpeername(fd, (struct sockaddr *)&peer, &len) < 0)
        len = 0;
    to_tls(arg, fd, (struct sockaddr *)&peer, len); /* an h2 preface in clear: TLS refuses it */
}

static bool ready(void *arg)
{
    return sbx_resolver_ready(((struct router *)arg)->resolver);
}

static char *metrics(void *arg)
{
    struct router *r = arg;
    struct sbx_router_parts parts = {
        .listener = __atomic_load_n(&r->listener, __ATOMIC_ACQUIRE),
        .tls_listener = __atomic_load_n(&r->tls_listener, __ATOMIC_ACQUIRE),
        .relay = r->relay,
        .proxy = r->proxy,
        .tls = __atomic_load_n(&r->tls, __ATOMIC_ACQUIRE),
        .authz = r->authz,
    };
    char *base = sbx_router_metrics(&parts);
    char *cache = sbx_resolver_metrics(r->resolver), *out = NULL;

    if (base && cache && asprintf(&out, "%s%s", base, cache) < 0)
        out = NULL;
    free(base);
    free(cache);
    return out;
}

static void proxy_opts(struct sbx_proxy_opts *po, const struct sbx_relay_opts *ro)
{
    *po = (struct sbx_proxy_opts){
        .target = ro->target,
        .resolver = ro->resolver,
        .default_port = 8080,
        .head_timeout_ms = arg_head_timeout_ms,
        .idle_timeout_ms = arg_idle_timeout_ms,
        .proxy_timeout_ms = arg_proxy_timeout_ms,
        .response_header_timeout_ms = arg_response_header_timeout_ms,
        .dial_timeout_ms = arg_dial_timeout_ms,
        .max_retries = (unsigned)arg_upstream_max_retries,
        .retry_initial_ms = arg_retry_initial_ms,
        .retry_max_ms = arg_retry_max_ms,
        .max_connections = (unsigned)arg_http_max_connections,
        .max_request_body = (uint64_t)arg_max_request_body_bytes,
        .authz = ro->authz,
        .preview_domain = arg_preview_domain,
        .access_log = arg_access_log,
    };
}

/* The API server's client, for the modes that ask it. */
static int kube_client(struct router *r, struct sbx_error *err)
{
    struct sbx_kube_config cfg = {0};
    struct sbx_kube_opts ko = {.qps = 50,
                               .burst = 100,
                               .timeout_ms = 3000, /* the reference's TokenReview timeout */
                               .connections = 4,
                               .user_agent = "sandboxd-router/" SANDBOXD_VERSION};
    const char *path = arg_kubeconfig ? arg_kubeconfig : getenv("KUBECONFIG");
    int rc;

    if (r->kube)
        return 0;
    rc = path && *path ? sbx_kube_config_load(path, NULL, &cfg, err)
                       : sbx_kube_config_in_cluster("/var/run/secrets/kubernetes.io/serviceaccount",
                                                    &cfg, err);
    if (rc >= 0)
        rc = sbx_kube_new(&cfg, &ko, &r->kube, err);
    sbx_kube_config_release(&cfg);
    return rc;
}

static int start_authz(struct router *r, struct sbx_error *err)
{
    struct sbx_authz_opts o = {
        .mode = arg_authz_mode,
        .ttl_ms = arg_authz_mode == SBX_AUTHZ_SANDBOX_TOKEN ? arg_authz_sandbox_token_ttl_ms
                                                            : arg_authz_ttl_ms,
        .cache_size = (unsigned)arg_authz_cache_size,
        .require_token = arg_authz_require_token,
        .audiences = arg_authz_audiences,
        .secret_file = arg_authz_secret_file,
    };
    int rc;

    if (sbx_authz_mode_needs_kube(o.mode) && (rc = kube_client(r, err)) < 0)
        return sbx_error_wrap(err, "--authz-mode=%s", sbx_authz_mode_name(o.mode));
    o.kube = r->kube;
    return sbx_authz_new(&r->authz, &o, err);
}

/* The cache (--cache-enabled) on the API server's client, else resolution without one. */
static int start_resolver(struct router *r, struct sbx_error *err)
{
    struct sbx_resolver_opts o = {.cache_namespace = arg_cache_namespace,
                                  .cluster_domain = arg_cluster_domain,
                                  .wake_timeout_ms = arg_wake_timeout_ms,
                                  .resync_ms = arg_cache_resync_ms};
    int rc;

    if (arg_cache_enabled && (rc = kube_client(r, err)) < 0)
        return sbx_error_wrap(err, "--cache-enabled");
    o.kube = arg_cache_enabled ? r->kube : NULL;
    return sbx_resolver_new(&r->resolver, &o, err);
}

/* E2B's API and sandbox routing (--e2b-api, --e2b-domain), when asked for. */
static int start_e2b(struct router *r, struct sbx_error *err)
{
    struct sbx_e2b_opts o = {.api = arg_e2b_api,
                             .domain = arg_e2b_domain,
                             .lookup_ns = arg_cache_namespace,
                             .envd_version = arg_e2b_envd_version,
                             .create_timeout_ms = arg_e2b_create_timeout_ms,
                             .envd_port = (int)arg_e2b_envd_port};
    const char *slash = strchr(arg_e2b_api_keys_secret, '/');
    char ns[64] = "";
    int rc;

    if (!arg_e2b_api && !*arg_e2b_domain)
        return 0;
    if ((rc = kube_client(r, err)) < 0)
        return sbx_error_wrap(err, "--e2b-api");
    if (slash && (size_t)(slash - arg_e2b_api_keys_secret) < sizeof(ns))
        snprintf(ns, sizeof(ns), "%.*s", (int)(slash - arg_e2b_api_keys_secret),
                 arg_e2b_api_keys_secret);
    else if (!slash) /* a kubeconfig's context without one means "default" */
        snprintf(ns, sizeof(ns), "%s",
                 sbx_kube_namespace(r->kube) ? sbx_kube_namespace(r->kube) : "default");
    o.kube = r->kube;
    o.keys_ns = ns;
    o.keys_name = slash ? slash + 1 : arg_e2b_api_keys_secret;
    if ((rc = sbx_e2b_new(&r->e2b, &o, err)) < 0)
        return sbx_error_wrap(err, "--e2b-api-keys-secret=%s", arg_e2b_api_keys_secret);
    return 0;
}

/* The TLS port, when one is asked for. */
static int start_tls(struct router *r, struct sbx_error *err)
{
    struct sbx_tls_opts to = {.cert_file = arg_tls_cert_file,
                              .key_file = arg_tls_key_file,
                              .client_ca_file = arg_tls_client_ca_file,
                              .mtls = arg_mtls_mode,
                              .handshake_timeout_ms = arg_head_timeout_ms,
                              .max_connections = (unsigned)arg_http_max_connections,
                              .h2 = to_h2,
                              .h1 = tls_to_h1,
                              .arg = r};
    struct sbx_listener_opts lo = {.head_timeout_ms = (unsigned)arg_head_timeout_ms,
                                   .max_pending = 4096,
                                   .h2 = to_tls_h2,
                                   .h1 = to_tls,
                                   .arg = r};
    struct sbx_listener *l = NULL;
    struct sbx_tls *t = NULL;
    char host[128];
    int rc;

    if (!*arg_https_bind_address) {
        if (*arg_tls_cert_file || *arg_tls_key_file)
            log_warn(0, "router: --tls-cert-file without --https-bind-address: no TLS port");
        return 0;
    }
    if ((rc = sbx_listener_parse_addr(arg_https_bind_address, host, sizeof(host), &lo.port, err)) <
            0 ||
        (rc = sbx_tls_new(&t, &to, err)) < 0)
        return rc;
    __atomic_store_n(&r->tls, t, __ATOMIC_RELEASE);
    lo.host = *host ? host : NULL;
    if ((rc = sbx_listener_start(&l, &lo, err)) < 0)
        return rc;
    __atomic_store_n(&r->tls_listener, l, __ATOMIC_RELEASE);
    return 0;
}

static int start(struct router *r, struct sbx_relay_opts *ro, struct sbx_error *err)
{
    struct sbx_router_http_opts ho = {.probe_addr = arg_probe_address,
                                      .metrics_addr = arg_metrics_address,
                                      .metrics = metrics,
                                      .ready = ready,
                                      .arg = r};
    struct sbx_listener_opts lo = {.head_timeout_ms = (unsigned)arg_head_timeout_ms,
                                   .max_pending = 4096,
                                   .h2 = to_h2,
                                   .h1 = to_h1,
                                   .arg = r};
    struct sbx_listener *l = NULL;
    struct sbx_proxy_opts po;
    char host[128];
    int rc;

    if ((rc = sbx_listener_parse_addr(arg_http_bind_address, host, sizeof(host), &lo.port, err)) <
        0)
        return rc;
    lo.host = *host ? host : NULL;
    if ((rc = start_authz(r, err)) < 0 || (rc = start_resolver(r, err)) < 0 ||
        (rc = start_e2b(r, err)) < 0)
        return rc;
    ro->authz = r->authz;
    ro->resolver = r->resolver;
    proxy_opts(&po, ro);
    po.hook = r->e2b ? sbx_e2b_hook(r->e2b) : NULL;
    if ((rc = sbx_relay_new(&r->relay, ro, err)) < 0 || (rc = sbx_relay_start(r->relay, err)) < 0 ||
        (rc = sbx_proxy_new(&r->proxy, &po, err)) < 0 ||
        (rc = sbx_router_http_start(&r->http, &ho, err)) < 0 ||
        (rc = sbx_listener_start(&l, &lo, err)) < 0)
        return rc;
    __atomic_store_n(&r->listener, l, __ATOMIC_RELEASE); /* /metrics may be reading */
    if ((rc = start_tls(r, err)) < 0)
        return rc;
    sbx_router_http_set_ready(r->http, true); /* every listener is bound */
    return 0;
}

/* No new connections; calls in flight drain (the probes answer /readyz 503 meanwhile); then the
 * HTTP side goes. */
static void stop(struct router *r)
{
    if (r->resolver) /* requests waiting for a sandbox to wake get the grace, not more */
        sbx_resolver_cancel(r->resolver, arg_shutdown_timeout_ms);
    sbx_listener_stop(r->listener);
    sbx_listener_stop(r->tls_listener);
    if (r->proxy)
        sbx_proxy_shutdown(r->proxy, arg_shutdown_timeout_ms);
    sbx_relay_shutdown(r->relay, arg_shutdown_timeout_ms);
    sbx_router_http_stop(r->http);
    sbx_tls_free(r->tls); /* what still holds a TLS connection open goes */
    sbx_proxy_free(r->proxy);
    sbx_relay_free(r->relay);
    sbx_listener_free(r->listener);
    sbx_listener_free(r->tls_listener);
    sbx_authz_free(r->authz); /* after the relay and the proxy: their threads may be deciding */
    sbx_resolver_free(r->resolver); /* likewise resolving; its informers use the client */
    sbx_e2b_free(r->e2b);           /* likewise serving */
    sbx_kube_free(r->kube);
}

/* Waits for a signal of set. Meanwhile, once a second, memory the allocator holds free beyond
 * TRIM_SLACK goes back to the kernel: a burst of streams leaves the heap with holes that glibc
 * returns only when its top is free, so an idle router would keep a burst's size for good. */
#define TRIM_SLACK (4u << 20)
static int wait_for_signal(const sigset_t *set)
{
    const struct timespec second = {.tv_sec = 1};
    int sig;

    while ((sig = sigtimedwait(set, NULL, &second)) < 0) {
#ifdef __GLIBC__
        if (errno == EAGAIN && mallinfo2().fordblks > TRIM_SLACK)
            malloc_trim(0);
#endif
    }
    return sig;
}

int main(int argc, char **argv)
{
    struct sbx_flags f = {.flag = flag_table,
                          .n = sizeof(flag_table) / sizeof(flag_table[0]),
                          .prog = "sandboxd-router",
                          .version = SANDBOXD_VERSION,
                          .synopsis = "usage: sandboxd-router [flags]\n"
                                      "Reaches sandboxes by name: gRPC routed by x-sandbox-* "
                                      "metadata, HTTP/1.1 by X-Sandbox-* headers.\n"};
    struct sbx_relay_opts o = {
        .threads = (int)arg_threads, .default_port = 9090, .target = {.cluster_domain = NULL}};
    struct router r = {0};
    struct sbx_error err = {0};
    sigset_t set;
    int rest, sig;
    bool dashdash;

#ifdef __GLIBC__
    /* The relay's buffers come and go by the megabyte on threads of gRPC's and ours. glibc would
     * give each thread an arena of its own, and once a large buffer is freed it raises its mmap
     * threshold and keeps later ones in heaps it never trims: a 100 MiB stream left the router
     * 20-30 MiB larger for good (bench/router.sh: 51 MiB after its run with 1,000 sandboxes
     * known; 34 with two arenas and a fixed threshold, 29 with one). One arena (each thread
     * still has its cache of small blocks), and large buffers mapped and unmapped. */
    (void)mallopt(M_ARENA_MAX, 1);
    (void)mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
    switch (sbx_flags_parse(&f, argc, argv, &rest, &dashdash)) {
    case 1:
        return 0;
    case -1:
        return 2;
    }
    if (rest < argc) {
        fprintf(stderr, "sandboxd-router: unexpected argument '%s'\n", argv[rest]);
        return 2;
    }
    o.threads = arg_threads ? (int)arg_threads : grpc_threads_default();
    o.max_message_bytes =
        (int)(arg_max_message_bytes > 0x7fffffff ? 0x7fffffff : arg_max_message_bytes);
    o.max_upstreams = (unsigned)arg_max_upstreams;
    o.target.allow_loopback_pod_ip = arg_allow_loopback_pod_ip;
    o.target.cluster_domain = arg_cluster_domain;
    signal(SIGPIPE,
           SIG_IGN); /* OpenSSL writes with write(2): a client gone is an error, not a death */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* before any thread starts: they inherit it */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    grpc_init();
    if (start(&r, &o, &err) < 0) {
        log_error(0, "%s", err.msg);
        stop(&r);
        grpc_shutdown();
        curl_global_cleanup();
        return 1;
    }
    log_info("sandboxd-router %s ready (authz %s)", SANDBOXD_VERSION,
             sbx_authz_mode_name(arg_authz_mode));
    sig = wait_for_signal(&set);
    log_info("%s: draining (up to %llu ms)", strsignal(sig),
             (unsigned long long)arg_shutdown_timeout_ms);
    sbx_router_http_set_ready(r.http, false);
    stop(&r);
    grpc_shutdown();
    curl_global_cleanup();
    log_info("sandboxd-router stopped");
    return 0;
}
