#define _GNU_SOURCE
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>

/* A metric's HELP and TYPE lines. */
static void counter(FILE *f, const char *name, const char *help, const char *type)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void listener_section(FILE *f, struct sbx_listener *l, struct sbx_listener *tls)
{
    uint64_t h2 = 0, h1 = 0, dropped = 0, t2 = 0, t1 = 0, td = 0;

    if (l)
        sbx_listener_counts(l, &h2, &h1, &dropped);
    if (tls)
        sbx_listener_counts(tls, &t2, &t1, &td);
    dropped += td;
    counter(f, "sandbox_router_connections_total", "Client connections by protocol.", "counter");
    fprintf(f,
            "sandbox_router_connections_total{protocol=\"h2\"} %llu\n"
            "sandbox_router_connections_total{protocol=\"http1\"} %llu\n"
            "sandbox_router_connections_total{protocol=\"tls\"} %llu\n"
            "sandbox_router_connections_total{protocol=\"none\"} %llu\n",
            (unsigned long long)h2, (unsigned long long)h1, (unsigned long long)(t1 + t2),
            (unsigned long long)dropped);
}

static void relay_section(FILE *f, struct sbx_relay *r)
{
    struct sbx_relay_stats s = {0};

    if (r)
        sbx_relay_stats(r, &s);
    counter(f, "sandbox_router_grpc_calls_total", "gRPC calls received.", "counter");
    fprintf(f, "sandbox_router_grpc_calls_total %llu\n", (unsigned long long)s.calls);
    counter(f, "sandbox_router_grpc_refused_total",
            "gRPC calls refused before relaying (bad routing keys, no upstream).", "counter");
    fprintf(f, "sandbox_router_grpc_refused_total %llu\n", (unsigned long long)s.refused);
    counter(f, "sandbox_router_upstream_connections", "Upstream HTTP/2 connections pooled.",
            "gauge");
    fprintf(f, "sandbox_router_upstream_connections %llu\n", (unsigned long long)s.upstreams_open);
    counter(f, "sandbox_router_upstream_connections_created_total",
            "Upstream HTTP/2 connections made.", "counter");
    fprintf(f, "sandbox_router_upstream_connections_created_total %llu\n",
            (unsigned long long)s.upstreams_created);
}

static void proxy_section(FILE *f, struct sbx_proxy *p)
{
    struct sbx_proxy_stats s = {0};

    if (p)
        sbx_proxy_stats(p, &s);
    counter(f, "sandbox_router_requests_total",
            "HTTP/1.1 requests answered, by status class (a refusal of ours included).", "counter");
    for (int c = 1; c <= 5; c++)
        fprintf(f, "sandbox_router_requests_total{code=\"%dxx\"} %llu\n", c,
                (unsigned long long)s.by_status[c]);
    counter(f, "sandbox_router_inflight_requests", "HTTP/1.1 requests being relayed.", "gauge");
    fprintf(f, "sandbox_router_inflight_requests %llu\n", (unsigned long long)s.inflight);
    counter(f, "sandbox_router_upstream_errors_total",
            "HTTP/1.1 requests that failed upstream, by reason.", "counter");
    fprintf(f,
            "sandbox_router_upstream_errors_total{reason=\"dial\"} %llu\n"
            "sandbox_router_upstream_errors_total{reason=\"timeout\"} %llu\n"
            "sandbox_router_upstream_errors_total{reason=\"eof\"} %llu\n",
            (unsigned long long)s.errors_dial, (unsigned long long)s.errors_timeout,
            (unsigned long long)s.errors_eof);
    counter(f, "sandbox_router_upstream_retries_total", "Upstream dials retried.", "counter");
    fprintf(f, "sandbox_router_upstream_retries_total %llu\n", (unsigned long long)s.retries);
    counter(f, "sandbox_router_http_upstream_dials_total",
            "HTTP/1.1 upstream connections dialled (retries included).", "counter");
    fprintf(f, "sandbox_router_http_upstream_dials_total %llu\n",
            (unsigned long long)s.upstream_dials);
    counter(f, "sandbox_router_http_upstream_reused_total",
            "HTTP/1.1 requests sent on an upstream connection kept from an earlier one.",
            "counter");
    fprintf(f, "sandbox_router_http_upstream_reused_total %llu\n",
            (unsigned long long)s.upstream_reused);
    counter(f, "sandbox_router_http_connections_open", "HTTP/1.1 client connections open.",
            "gauge");
    fprintf(f, "sandbox_router_http_connections_open %llu\n",
            (unsigned long long)s.connections_open);
    counter(f, "sandbox_router_upgrades_total", "Upgrades (WebSocket) tunnelled.", "counter");
    fprintf(f, "sandbox_router_upgrades_total %llu\n", (unsigned long long)s.upgrades);
    counter(f, "sandbox_router_tunnels_open", "Upgraded connections open.", "gauge");
    fprintf(f, "sandbox_router_tunnels_open %llu\n", (unsigned long long)s.tunnels_open);
    counter(f, "sandbox_router_http_bytes_total", "Body bytes relayed, by direction.", "counter");
    fprintf(f,
            "sandbox_router_http_bytes_total{direction=\"up\"} %llu\n"
            "sandbox_router_http_bytes_total{direction=\"down\"} %llu\n",
            (unsigned long long)s.bytes_up, (unsigned long long)s.bytes_down);
}

/* The reference's name, without its namespace label: clients pick namespaces, and the series
 * would be theirs to multiply. */
static void authz_section(FILE *f, struct sbx_authz *a)
{
    uint64_t allow = 0, deny = 0;

    if (a)
        sbx_authz_stats(a, &allow, &deny);
    counter(f, "sandbox_router_authz_decisions_total",
            "Per-request authorization outcomes (allow / deny).", "counter");
    fprintf(f,
            "sandbox_router_authz_decisions_total{decision=\"allow\"} %llu\n"
            "sandbox_router_authz_decisions_total{decision=\"deny\"} %llu\n",
            (unsigned long long)allow, (unsigned long long)deny);
}

static void tls_section(FILE *f, struct sbx_tls *t)
{
    struct sbx_tls_stats s = {0};

    if (!t)
        return;
    sbx_tls_stats(t, &s);
    counter(f, "sandbox_router_cert_reloads_total",
            "Server certificate reloads after its files changed, by outcome.", "counter");
    fprintf(f,
            "sandbox_router_cert_reloads_total{outcome=\"success\"} %llu\n"
            "sandbox_router_cert_reloads_total{outcome=\"failure\"} %llu\n",
            (unsigned long long)s.reloads_ok, (unsigned long long)s.reloads_failed);
    counter(f, "sandbox_router_tls_connections_total", "TLS connections accepted.", "counter");
    fprintf(f, "sandbox_router_tls_connections_total %llu\n", (unsigned long long)s.connections);
    counter(f, "sandbox_router_tls_connections_open", "TLS connections open.", "gauge");
    fprintf(f, "sandbox_router_tls_connections_open %llu\n", (unsigned long long)s.open);
    counter(f, "sandbox_router_tls_handshake_failures_total", "TLS handshakes that failed.",
            "counter");
    fprintf(f, "sandbox_router_tls_handshake_failures_total %llu\n",
            (unsigned long long)s.handshake_failures);
}

char *sbx_router_metrics(const struct sbx_router_parts *parts)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);

    if (!f)
        return NULL;
    listener_section(f, parts->listener, parts->tls_listener);
    relay_section(f, parts->relay);
    proxy_section(f, parts->proxy);
    tls_section(f, parts->tls);
    authz_section(f, parts->authz);
    if (fclose(f) != 0) {
        free(out);
        return NULL;
    }
    return out;
}
