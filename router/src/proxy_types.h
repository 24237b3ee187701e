/* The types the proxy's files share (one client connection and the two byte pipes of an
 * exchange) and what each of them offers the others. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "credentials.h"
#include "clock.h"
#include "h1.h"
#include "preview.h"
#include "proxy.h"

#define PROXY_BUF      (64 * 1024) /* each direction's buffer; a head must fit in it */
#define PROXY_HOST_MAX 300

/* One direction's bytes: [woff, wend) are ready to write, [wend, rend) read but not yet
 * framed. A rewritten head (pre) goes out before the buffer. */
struct pipe {
    char *buf;
    size_t woff, wend, rend;
    char *pre;
    size_t pre_off, pre_len;
    bool eof;  /* the source said all it will */
    bool shut; /* the destination was told (tunnels) */
};

struct proxy_conn {
    struct sbx_proxy *p;
    struct proxy_conn *prev, *next; /* among the proxy's connections */
    int cfd, ufd;
    char peer[64];             /* the client's address, for X-Forwarded-For */
    char host[PROXY_HOST_MAX]; /* the upstream ufd leads to */
    bool idle;                 /* waiting for a request head: may be cut at once to drain */
    bool waking;               /* waiting for its sandbox to wake, or answering that it did not:
                                * the resolver's drain ends that wait, so the cut leaves it be */
    bool tls;                  /* came through the HTTPS port */
    struct pipe up, down;      /* client to upstream, upstream to client */
    int kpipe[2];              /* the kernel pipe bodies are spliced through (-1: none yet) */
    size_t kheld;              /* bytes in it */
};

/* What one request needs through its exchange. */
struct exchange {
    struct sbx_h1_body req, resp;
    bool req_done, head_request, client_http10;
    bool upgrade;                /* the request asked for one */
    bool close_after;            /* the client connection ends with this response */
    bool keep_upstream;          /* the upstream connection may serve another request */
    bool reused;                 /* ufd served a request before this one */
    bool splice_up, splice_down; /* a body moving through the kernel pipe */
    bool rerouted;               /* resolved again after its cached address proved dead */
    bool hooked;                 /* routed by the hook: its Authorization is the sandbox's */
    int resp_state;              /* EX_HEAD, EX_BODY, EX_DONE, EX_TUNNEL */
    int status;                  /* the response's, once its head came */
    uint64_t head_wait_ms;
    uint64_t resp_bytes;       /* of the response, read from the upstream */
    struct sbx_authz_http *az; /* the authorizer's word on it (NULL: no authorizer) */
};

enum { EX_HEAD, EX_BODY, EX_DONE, EX_TUNNEL };

/* The proxy's shared state (proxy.c). */
struct sbx_proxy {
    struct sbx_proxy_opts o;
    pthread_mutex_t lock;
    pthread_cond_t gone; /* a connection ended */
    struct proxy_conn *conns;
    unsigned nconns;
    bool stopping, stopped;
    struct sbx_proxy_stats stats; /* updated with __atomic adds */
};

#define STAT_ADD(p, field, n) __atomic_add_fetch(&(p)->stats.field, (n), __ATOMIC_RELAXED)
#define STAT_SUB(p, field, n) __atomic_sub_fetch(&(p)->stats.field, (n), __ATOMIC_RELAXED)

/* proxy_conn.c: serves every request of the connection, then closes it. */
void proxy_conn_serve(struct proxy_conn *c);

/* proxy_reply.c: answers an error of ours as JSON {"detail": msg} and counts it. */
int proxy_answer(struct proxy_conn *c, unsigned status, const char *msg, bool close);

/* proxy_reply.c: answers status with a JSON body of ours and extra head fields ("" or lines
 * ending "\r\n"), and counts it; -EPIPE when the client could not take it. */
int proxy_reply(struct proxy_conn *c, unsigned status, const char *extra, const char *body,
                bool close);

/* proxy_reply.c: a 308 to loc (a path of ours, already valid as a target), counted. */
int proxy_redirect(struct proxy_conn *c, const char *loc);

/* proxy_hook.c: a request the hook answers (its body read whole); true when the connection
 * may serve another. */
bool proxy_hook_serve(struct proxy_conn *c, const struct sbx_h1_msg *m, size_t head_len,
                      bool close_after);
/* proxy_hook.c: the hook's keys for a request without X-Sandbox-ID (sbx_proxy_hook.route): 1
 * with pv set, 0 when none (or no hook), < 0 when refused (answered). */
int proxy_hook_route(struct proxy_conn *c, const struct sbx_h1_msg *m, struct sbx_preview *pv);

/* proxy_pump.c: relays the request's body and the response until the exchange ends; returns 0
 * when the client connection may serve another request, 1 to close it quietly, -errno when the
 * upstream failed before any response byte reached the client (the caller answers). */
int proxy_exchange(struct proxy_conn *c, struct exchange *x);

/* proxy_splice.c: moves a Content-Length body (the response's, else the request's) from socket
 * to socket through a kernel pipe, never through our buffers, when nothing of it is in them: 1
 * on progress, 0 to wait (the events are added), -1 when the body was cut. */
int proxy_splice(struct proxy_conn *c, struct exchange *x, short *cfd_ev, short *ufd_ev);

/* proxy_dial.c: a connected, non-blocking socket to host ("ip:port", "[v6]:port",
 * "name:port"), with the proxy's retries; -errno with the reason in err. */
int proxy_dial(struct sbx_proxy *p, const char *host, struct sbx_error *err);

/* proxy_authz.c: decides the request (with o.authz; x->az is then set: free it with
 * proxy_authz_done), answering a refusal itself; false when refused. */
bool proxy_authorize(struct proxy_conn *c, const struct sbx_h1_msg *m, const struct sbx_target *t,
                     const struct sbx_preview *pv, struct exchange *x);
void proxy_authz_done(struct exchange *x);
/* Bytes the rewritten credentials may add to the request head. */
size_t proxy_authz_extra(const struct exchange *x);
/* The Authorization line the upstream gets ("" when none) into out; its length. */
size_t proxy_authz_authorization(const struct exchange *x, const struct sbx_h1_msg *m, char *out,
                                 size_t size);
/* For a Cookie field, when the authorizer is on: true, with the value to send instead in *ret
 * (malloc'ed; empty: send no such field; NULL: out of memory). */
bool proxy_authz_cookie(const struct exchange *x, const struct sbx_h1_field *f, char **ret);
