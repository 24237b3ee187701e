/* The router's HTTP/1.1 reverse proxy: the main port's connections that are not HTTP/2 (the
 * listener hands them over). Each request is routed by its own X-Sandbox-* headers, so one
 * kept-alive client connection may reach several sandboxes; bodies are relayed by their framing
 * as they come (no buffering: a slow side holds the other back through TCP), SSE and chunked
 * responses are delivered as they arrive, and upgrades (WebSocket) become a two-way tunnel
 * with no proxy timeout. One thread per client connection, bounded in number. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "authz.h"
#include "error.h"
#include "resolver.h"
#include "target.h"

struct sbx_proxy;
struct sbx_h1_msg;
struct sbx_preview;

/* What a hook answers in the proxy's stead. */
struct sbx_proxy_reply {
    unsigned status;
    char extra[256]; /* more head fields, each line ending "\r\n" ("" for none) */
    char *body;      /* JSON (malloc'ed; the proxy frees it); NULL: none */
};

/* A protocol of its own on the HTTP/1.1 side (the E2B API), which the proxy knows only by these
 * calls, made on the connection's thread (they may block, bounded). */
struct sbx_proxy_hook {
    /* True when the request is one the hook answers itself. */
    bool (*wants)(void *arg, const struct sbx_h1_msg *m);
    /* Answers it from its head and its whole body (at most max_body bytes). */
    void (*serve)(void *arg, const struct sbx_h1_msg *m, const char *body, size_t len,
                  struct sbx_proxy_reply *r);
    /* The keys of a request with no X-Sandbox-ID: 1 with k's id, ns and port set (path NULL:
     * the target is forwarded as it is), 0 when it is not the hook's, < 0 with r the refusal. */
    int (*route)(void *arg, const struct sbx_h1_msg *m, struct sbx_preview *k,
                 struct sbx_proxy_reply *r);
    void *arg;
    size_t max_body;
};

struct sbx_proxy_opts {
    struct sbx_target_opts target;
    struct sbx_resolver *resolver; /* NULL: the keys' address as sbx_target_parse gives it */
    int default_port;              /* of a request without X-Sandbox-Port: sandboxd's REST */
    uint64_t head_timeout_ms;      /* a request head, once its first byte came */
    uint64_t idle_timeout_ms;      /* a kept-alive connection between requests */
    uint64_t proxy_timeout_ms;     /* silence while a response streams; caps X-Sandbox-Timeout */
    uint64_t response_header_timeout_ms; /* the wait for a response head (or X-Sandbox-Timeout) */
    uint64_t dial_timeout_ms;            /* one connect to an upstream */
    unsigned max_retries;                /* more dials after a failed one */
    uint64_t retry_initial_ms, retry_max_ms;
    unsigned max_connections;   /* client connections at once; beyond, 503 */
    uint64_t max_request_body;  /* bytes; 0: no limit */
    const char *preview_domain; /* hosts "<port>-<name>.<ns>.<domain>"; NULL or "": none */
    bool access_log;            /* a log line per request */
    /* Decides each request before it is relayed (NULL: every request passes, Authorization
     * dropped); borrowed, outlives the proxy. */
    struct sbx_authz *authz;
    const struct sbx_proxy_hook *hook; /* borrowed; NULL: none */
};

/* Counters for /metrics. */
struct sbx_proxy_stats {
    uint64_t connections, connections_open, inflight, upgrades, tunnels_open;
    uint64_t upstream_dials, upstream_reused, retries;
    uint64_t errors_dial, errors_timeout, errors_eof, errors_other;
    uint64_t bytes_up, bytes_down;
    uint64_t by_status[6]; /* 1xx .. 5xx; [0] unused */
};

int sbx_proxy_new(struct sbx_proxy **ret, const struct sbx_proxy_opts *o, struct sbx_error *err);

/* Serves a client connection (fd taken); any thread may call. tls: it came through the HTTPS
 * port (fd is the plaintext side; X-Forwarded-Proto says https). */
void sbx_proxy_add(struct sbx_proxy *p, int fd, const struct sockaddr *peer, socklen_t len,
                   bool tls);

void sbx_proxy_stats(struct sbx_proxy *p, struct sbx_proxy_stats *s);

/* Drains: connections close after their current response; tunnels and requests still running
 * after grace_ms are cut. Returns once every connection's thread has finished. */
void sbx_proxy_shutdown(struct sbx_proxy *p, uint64_t grace_ms);

/* Shuts down (with no grace) if not yet, and frees. Accepts NULL. */
void sbx_proxy_free(struct sbx_proxy *p);
