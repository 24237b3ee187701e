#define _GNU_SOURCE
#include "relay.h"

#include <errno.h>
#include <grpc/grpc.h>
#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "credentials.h"
#include "log.h"
#include "upstreams.h"

#define KEY_MAX           256 /* a routing key's value */
#define MAX_AUTHZ_WAITING 64  /* calls whose authorization waits for the API server */
#define MAX_WAKING        256 /* calls waiting for their sandbox to wake up */
/* The sandbox's messages read ahead of the client: while one is sent on, the next are received,
 * and all but the last of those waiting go out with GRPC_WRITE_BUFFER_HINT, so a burst leaves in
 * a few writes instead of one a message (a Start stream's 4 KiB chunks: one sendmsg(2) each,
 * and a wake-up of the client's for each). At most this many, and at most AHEAD_BYTES unless
 * one message is larger. */
#define AHEAD_MAX   16
#define AHEAD_BYTES (1 << 20)

struct call;

/* One operation in flight; fn runs on a completion-queue thread. */
struct tag {
    void (*fn)(struct call *c, bool ok);
    struct call *c;
};

struct call {
    struct sbx_relay *r;
    pthread_mutex_t lock;
    int refs;            /* one per batch in flight, and the handler's */
    grpc_call *down;     /* the client's call to us */
    grpc_call *up;       /* ours to the sandbox */
    struct sbx_target t; /* resolved */
    grpc_call_details details;
    grpc_metadata_array req_md;
    grpc_metadata *fwd;
    size_t n_fwd;
    grpc_metadata_array up_initial, up_trailing;
    grpc_metadata *initial_out, *trailing_out;
    size_t n_initial_out, n_trailing_out;
    grpc_status_code status;
    grpc_slice status_details;
    int cancelled;
    grpc_byte_buffer *c2s, *s2c;        /* being received */
    grpc_byte_buffer *ahead[AHEAD_MAX]; /* received from the sandbox, not yet sent on: a ring */
    unsigned ahead_first, ahead_n;
    size_t ahead_bytes;
    grpc_byte_buffer *sending; /* to the client */
    bool initial_sent, up_done, up_recving, status_in, down_sending, status_sent;
    bool up_headers_wait;      /* the sandbox's call has not had the client's headers yet */
    struct call *headers_next; /* in r->headers_waiting */
    bool strip_auth;           /* the client's authorization does not go on (authz.h) */
    struct tag t_new, t_closed, t_up_status, t_down_recv, t_up_sent, t_up_recv, t_down_sent,
        t_half_closed, t_status_sent, t_up_headers;
};

struct sbx_relay {
    struct sbx_relay_opts o;
    grpc_server *server;
    grpc_completion_queue *cq;
    struct sbx_upstreams *ups;
    pthread_t threads[SBX_RELAY_MAX_THREADS];
    int n_threads;
    pthread_mutex_t lock;
    pthread_cond_t idle;
    unsigned live; /* calls not yet freed */
    bool stopping; /* no more acceptors */
    uint64_t calls, refused;
    unsigned authz_waiting;
    unsigned waking; /* threads resolving a call whose sandbox wakes up */
    struct tag t_shutdown;
    bool shut_down;
    bool down; /* sbx_relay_shutdown ran */
    /* Calls whose headers wait for the client's first message (or half-close), to go to the
     * sandbox in one write with it; sent alone once a completion-queue thread finds nothing
     * else to do. Each holds a reference. */
    struct call *headers_waiting;
};

/* ------------------------------------------------------------------------------------------ */
/* A call's life */

static void call_unref(struct call *c)
{
    struct sbx_relay *r = c->r;
    int left;

    pthread_mutex_lock(&c->lock);
    left = --c->refs;
    pthread_mutex_unlock(&c->lock);
    if (left)
        return;
    if (c->up)
        grpc_call_unref(c->up);
    if (c->down)
        grpc_call_unref(c->down);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->req_md);
    grpc_metadata_array_destroy(&c->up_initial);
    grpc_metadata_array_destroy(&c->up_trailing);
    grpc_slice_unref(c->status_details);
    if (c->c2s)
        grpc_byte_buffer_destroy(c->c2s);
    if (c->s2c)
        grpc_byte_buffer_destroy(c->s2c);
    if (c->sending)
        grpc_byte_buffer_destroy(c->sending);
    for (unsigned i = 0; i < c->ahead_n; i++)
        grpc_byte_buffer_destroy(c->ahead[(c->ahead_first + i) % AHEAD_MAX]);
    free(c->fwd);
    free(c->initial_out);
    free(c->trailing_out);
    pthread_mutex_destroy(&c->lock);
    free(c);
    pthread_mutex_lock(&r->lock);
    if (--r->live == 0)
        pthread_cond_broadcast(&r->idle);
    pthread_mutex_unlock(&r->lock);
}

/* Starts a batch on call (down or up) holding a reference for it; false when gRPC refused it. */
static bool batch(struct call *c, grpc_call *call, const grpc_op *ops, size_t n, struct tag *t)
{
    grpc_call_error e;

    c->refs++; /* under c->lock, or before the call is shared */
    e = grpc_call_start_batch(call, ops, n, t, NULL);
    if (e != GRPC_CALL_OK) {
        c->refs--;
        log_debug("router: batch refused: %d", e);
        return false;
    }
    return true;
}

static void arm_acceptor(struct sbx_relay *r);

/* ------------------------------------------------------------------------------------------ */
/* Metadata */

static bool key_is(grpc_slice k, const char *name)
{
    size_t n = strlen(name);

    return GRPC_SLICE_LENGTH(k) == n && memcmp(GRPC_SLICE_START_PTR(k), name, n) == 0;
}

/* What a relay must not pass on: our routing keys, and what gRPC itself writes. */
static bool hop_only(grpc_slice k)
{
    const char *p = (const char *)GRPC_SLICE_START_PTR(k);
    size_t n = GRPC_SLICE_LENGTH(k);

    return (n >= 10 && memcmp(p, "x-sandbox-", 10) == 0) ||
           (n >= 5 && memcmp(p, "grpc-", 5) == 0) || (n >= 1 && p[0] == ':') || key_is(k, "te") ||
           key_is(k, "content-type") || key_is(k, "user-agent") || key_is(k, "host");
}

/* The entries of a to pass on, in a malloc'ed array (borrowing a's slices). */
static grpc_metadata *filter(const grpc_metadata_array *a, size_t *n)
{
    grpc_metadata *out = calloc(a->count + 1, sizeof(*out));

    *n = 0;
    if (!out)
        return NULL;
    for (size_t i = 0; i < a->count; i++)
        if (!hop_only(a->metadata[i].key))
            out[(*n)++] = a->metadata[i];
    return out;
}

static void drop_authorization(grpc_metadata *md, size_t *n)
{
    size_t kept = 0;

    for (size_t i = 0; i < *n; i++)
        if (!key_is(md[i].key, "authorization"))
            md[kept++] = md[i];
    *n = kept;
}

static void value_of(const grpc_metadata_array *a, const char *key, char *buf, size_t size,
                     const char **out)
{
    for (size_t i = 0; i < a->count; i++) {
        size_t n;
        if (!key_is(a->metadata[i].key, key))
            continue;
        n = GRPC_SLICE_LENGTH(a->metadata[i].value);
        if (n >= size)
            n = size - 1; /* too long for any valid value: refused by the checks */
        memcpy(buf, GRPC_SLICE_START_PTR(a->metadata[i].value), n);
        buf[n] = '\0';
        if (memchr(buf, '\0', n))
            buf[0] = '\x01'; /* a NUL inside: invalid whatever it says */
        *out = buf;
        return;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Relaying */

static void on_nothing(struct call *c, bool ok)
{
    (void)c;
    (void)ok;
}

/* The sandbox's headers, as the first op of the batch that first sends to the client: ops[0]
 * when not yet sent. Returns the ops used. Under c->lock. */
static size_t initial_op(struct call *c, grpc_op *ops)
{
    if (c->initial_sent)
        return 0;
    c->initial_out = filter(&c->up_initial, &c->n_initial_out);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = c->n_initial_out;
    ops[0].data.send_initial_metadata.metadata = c->initial_out;
    c->initial_sent = true;
    return 1;
}

/* The status goes to the client once the sandbox sent it and every message before it is
 * through. Under c->lock. */
static void maybe_finish(struct call *c)
{
    grpc_op ops[2] = {0};
    size_t n = 0;

    if (!c->status_in || !c->up_done || c->down_sending || c->ahead_n || c->status_sent)
        return;
    c->trailing_out = filter(&c->up_trailing, &c->n_trailing_out);
    n = initial_op(c, ops);
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = c->status;
    ops[n].data.send_status_from_server.status_details = &c->status_details;
    ops[n].data.send_status_from_server.trailing_metadata_count = c->n_trailing_out;
    ops[n].data.send_status_from_server.trailing_metadata = c->trailing_out;
    n++;
    c->status_sent = true;
    batch(c, c->down, ops, n, &c->t_status_sent);
}

/* The sandbox's side is over for the client: what it sent and the client will not get is
 * dropped. Under c->lock. */
static void up_abandon(struct call *c)
{
    grpc_call_cancel(c->up, NULL);
    c->up_done = true;
    while (c->ahead_n) {
        grpc_byte_buffer_destroy(c->ahead[c->ahead_first]);
        c->ahead_first = (c->ahead_first + 1) % AHEAD_MAX;
        c->ahead_n--;
    }
    c->ahead_bytes = 0;
}

/* The next message from the sandbox, when one is not already asked for and there is room ahead.
 * Under c->lock. */
static void recv_from_up(struct call *c)
{
    grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};

    if (c->up_done || c->up_recving || c->ahead_n == AHEAD_MAX ||
        (c->ahead_n && c->ahead_bytes >= AHEAD_BYTES))
        return;
    op.data.recv_message.recv_message = &c->s2c;
    c->up_recving = batch(c, c->up, &op, 1, &c->t_up_recv);
    if (!c->up_recving)
        c->up_done = true;
}

/* Sends the first message ahead to the client, unless one is on its way. Under c->lock. */
static void send_down(struct call *c)
{
    grpc_op ops[2] = {0};
    size_t n = 0;

    if (c->down_sending || !c->ahead_n)
        return;
    c->sending = c->ahead[c->ahead_first];
    c->ahead_first = (c->ahead_first + 1) % AHEAD_MAX;
    c->ahead_n--;
    c->ahead_bytes -= grpc_byte_buffer_length(c->sending);
    n = initial_op(c, ops);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = c->sending;
    /* More is here already: it follows at once, and the last one of them flushes the lot. Not
     * with the headers: a batch that carries them completes only once they are written, and a
     * hinted message leaves them unwritten until something else writes (the send would wait on
     * the client's next frame, and the rest behind it). */
    ops[n].flags = c->ahead_n && n == 0 ? GRPC_WRITE_BUFFER_HINT : 0;
    n++;
    c->down_sending = batch(c, c->down, ops, n, &c->t_down_sent);
    if (!c->down_sending)
        up_abandon(c);
}

static void recv_from_down(struct call *c)
{
    grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};

    op.data.recv_message.recv_message = &c->c2s;
    batch(c, c->down, &op, 1, &c->t_down_recv);
}

static void on_up_recv(struct call *c, bool ok)
{
    pthread_mutex_lock(&c->lock);
    c->up_recving = false;
    if (!ok || !c->s2c || c->up_done) {
        /* The sandbox sent its last message, or the client is gone (up_abandon): what came is
         * dropped with the call. */
        c->up_done = true;
    } else {
        c->ahead[(c->ahead_first + c->ahead_n) % AHEAD_MAX] = c->s2c;
        c->ahead_n++;
        c->ahead_bytes += grpc_byte_buffer_length(c->s2c);
        c->s2c = NULL;
        recv_from_up(c);
        send_down(c);
    }
    maybe_finish(c);
    pthread_mutex_unlock(&c->lock);
}

static void on_down_sent(struct call *c, bool ok)
{
    pthread_mutex_lock(&c->lock);
    grpc_byte_buffer_destroy(c->sending);
    c->sending = NULL;
    c->down_sending = false;
    if (ok) {
        recv_from_up(c);
        send_down(c);
    } else {
        up_abandon(c); /* the client is gone: the sandbox's call ends too */
    }
    maybe_finish(c);
    pthread_mutex_unlock(&c->lock);
}

/* The client's headers for the sandbox, as ops[0], when they still wait. Under c->lock. */
static size_t up_headers_op(struct call *c, grpc_op *ops)
{
    if (!c->up_headers_wait)
        return 0;
    c->up_headers_wait = false;
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = c->n_fwd;
    ops[0].data.send_initial_metadata.metadata = c->fwd;
    return 1;
}

static void on_down_recv(struct call *c, bool ok)
{
    grpc_op ops[2] = {0};
    size_t n = 0;

    pthread_mutex_lock(&c->lock);
    if (!ok) {
        /* The client's call is over before its first message: nothing goes to the sandbox. */
        if (c->up_headers_wait) {
            c->up_headers_wait = false;
            grpc_call_cancel(c->up, NULL);
        }
    } else if (c->c2s) {
        n = up_headers_op(c, ops);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = c->c2s;
        batch(c, c->up, ops, n + 1, &c->t_up_sent);
    } else {
        n = up_headers_op(c, ops);
        ops[n].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT; /* the client half-closed */
        batch(c, c->up, ops, n + 1, &c->t_half_closed);
    }
    pthread_mutex_unlock(&c->lock);
}

static void on_up_sent(struct call *c, bool ok)
{
    pthread_mutex_lock(&c->lock);
    grpc_byte_buffer_destroy(c->c2s);
    c->c2s = NULL;
    if (ok)
        recv_from_down(c);
    pthread_mutex_unlock(&c->lock);
}

/* The sandbox's address never answered: gRPC's connection attempts failed, and not because the
 * host refused (a live host: the reference router evicts only on dead ones). A call that reached
 * the sandbox has its headers. */
static bool dial_failed(struct call *c)
{
    const char *p = (const char *)GRPC_SLICE_START_PTR(c->status_details);
    size_t n = GRPC_SLICE_LENGTH(c->status_details);

    return c->status == GRPC_STATUS_UNAVAILABLE && c->up_initial.count == 0 &&
           memmem(p, n, "ailed to connect", 16) && !memmem(p, n, "refused", 7);
}

static void on_up_status(struct call *c, bool ok)
{
    (void)ok;
    pthread_mutex_lock(&c->lock);
    c->status_in = true;
    if (c->r->o.resolver && dial_failed(c))
        sbx_resolver_dial_failed(c->r->o.resolver, &c->t, -EHOSTUNREACH);
    maybe_finish(c);
    pthread_mutex_unlock(&c->lock);
}

static void on_closed(struct call *c, bool ok)
{
    (void)ok;
    pthread_mutex_lock(&c->lock);
    if (c->cancelled && c->up)
        grpc_call_cancel(c->up, NULL); /* the client cancelled, or its deadline passed */
    pthread_mutex_unlock(&c->lock);
}

/* Answers the call with status and msg, relaying nothing. */
static void refuse(struct call *c, grpc_status_code status, const char *msg)
{
    grpc_op ops[3] = {0};

    c->status = status;
    c->status_details = grpc_slice_from_copied_string(msg);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[1].data.recv_close_on_server.cancelled = &c->cancelled;
    ops[2].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[2].data.send_status_from_server.status = status;
    ops[2].data.send_status_from_server.status_details = &c->status_details;
    pthread_mutex_lock(&c->r->lock);
    c->r->refused++;
    pthread_mutex_unlock(&c->r->lock);
    pthread_mutex_lock(&c->lock);
    batch(c, c->down, ops, 3, &c->t_status_sent);
    pthread_mutex_unlock(&c->lock);
}

/* Opens the call to the sandbox and starts relaying. on_cq: on a completion-queue thread, which
 * looks at the queue before it waits (poll_cq): the client's headers may then wait there for its
 * first message, which has most often come with them. Elsewhere nothing would send them if the
 * client waited for the sandbox to speak first: they go at once. */
static void relay(struct call *c, grpc_channel *ch, bool on_cq)
{
    struct sbx_relay *r = c->r;
    grpc_op up[3] = {0}, closed = {0}, status = {0};
    size_t n;
    bool waits;

    c->up = grpc_channel_create_call(ch, c->down, GRPC_PROPAGATE_DEFAULTS, r->cq, c->details.method,
                                     NULL, c->details.deadline, NULL);
    c->fwd = filter(&c->req_md, &c->n_fwd);
    if (c->fwd && c->strip_auth)
        drop_authorization(c->fwd, &c->n_fwd);
    if (!c->up || !c->fwd) {
        refuse(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "router: out of memory");
        return;
    }
    closed.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    closed.data.recv_close_on_server.cancelled = &c->cancelled;
    up[1].op = GRPC_OP_RECV_INITIAL_METADATA;
    up[1].data.recv_initial_metadata.recv_initial_metadata = &c->up_initial;
    /* The first answer comes with the sandbox's headers: one wake-up, and they go to the client
     * together (a stream's headers wait for its first message). */
    up[2].op = GRPC_OP_RECV_MESSAGE;
    up[2].data.recv_message.recv_message = &c->s2c;
    status.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    status.data.recv_status_on_client.trailing_metadata = &c->up_trailing;
    status.data.recv_status_on_client.status = &c->status;
    status.data.recv_status_on_client.status_details = &c->status_details;
    pthread_mutex_lock(&c->lock);
    batch(c, c->down, &closed, 1, &c->t_closed);
    c->up_headers_wait = true;
    n = on_cq ? 0 : up_headers_op(c, up);
    c->up_recving = batch(c, c->up, up + 1 - n, 2 + n, &c->t_up_recv);
    if (!c->up_recving)
        c->up_done = true;
    batch(c, c->up, &status, 1, &c->t_up_status);
    recv_from_down(c);
    if (c->up_headers_wait)
        c->refs++; /* the waiting list's */
    waits = c->up_headers_wait;
    pthread_mutex_unlock(&c->lock);
    if (waits) {
        pthread_mutex_lock(&r->lock);
        c->headers_next = r->headers_waiting;
        __atomic_store_n(&r->headers_waiting, c, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&r->lock);
    }
}

/* Sends the headers still waiting (relay) alone: the queue had nothing else, or is shut down. */
static void send_waiting_headers(struct sbx_relay *r)
{
    struct call *c, *next;

    pthread_mutex_lock(&r->lock);
    c = r->headers_waiting;
    __atomic_store_n(&r->headers_waiting, NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&r->lock);
    for (; c; c = next) {
        grpc_op op = {0};
        next = c->headers_next;
        pthread_mutex_lock(&c->lock);
        if (up_headers_op(c, &op))
            batch(c, c->up, &op, 1, &c->t_up_headers);
        pthread_mutex_unlock(&c->lock);
        call_unref(c);
    }
}

/* Relays the call to c->t, resolved; on_cq as relay. */
static void relay_to(struct call *c, bool on_cq)
{
    struct sbx_error e = {0};
    grpc_channel *ch = sbx_upstreams_get(c->r->ups, c->t.host, &e);

    if (!ch) {
        refuse(c, GRPC_STATUS_UNAVAILABLE, e.msg);
        return;
    }
    relay(c, ch, on_cq);
}

/* ------------------------------------------------------------------------------------------ */
/* Resolution (resolver.h): from the cache, inline; a sandbox that must wake up first is waited
 * for on a thread of its own, or on the authorizer's when the call is already there. */

static void refuse_unresolved(struct call *c, int rc, const char *msg)
{
    refuse(c, rc == -ENOENT ? GRPC_STATUS_NOT_FOUND : GRPC_STATUS_UNAVAILABLE, msg);
}

/* Milliseconds left before the call's deadline (at least 1), UINT64_MAX without one. */
static uint64_t ms_left(struct call *c)
{
    gpr_timespec dl = gpr_convert_clock_type(c->details.deadline, GPR_CLOCK_MONOTONIC);
    int64_t ms;

    if (gpr_time_cmp(dl, gpr_inf_future(GPR_CLOCK_MONOTONIC)) == 0)
        return UINT64_MAX;
    ms = gpr_time_to_millis(gpr_time_sub(dl, gpr_now(GPR_CLOCK_MONOTONIC)));
    return ms > 0 ? (uint64_t)ms : 1;
}

static void *wake_thread(void *arg)
{
    struct call *c = arg;
    struct sbx_relay *r = c->r;
    struct sbx_error e = {0};
    int rc = sbx_resolver_resolve(r->o.resolver, &c->t, true, ms_left(c), &e);

    if (rc < 0)
        refuse_unresolved(c, rc, e.msg);
    else
        relay_to(c, false);
    pthread_mutex_lock(&r->lock);
    r->waking--;
    pthread_mutex_unlock(&r->lock);
    call_unref(c); /* the last touch of r when this was the relay's last call */
    return NULL;
}

static void wait_for_wake(struct call *c)
{
    struct sbx_relay *r = c->r;
    pthread_attr_t attr;
    pthread_t th;
    bool room;

    pthread_mutex_lock(&r->lock);
    room = r->waking < MAX_WAKING;
    r->waking += room;
    pthread_mutex_unlock(&r->lock);
    if (room) {
        pthread_mutex_lock(&c->lock);
        c->refs++; /* the thread's */
        pthread_mutex_unlock(&c->lock);
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        room = pthread_create(&th, &attr, wake_thread, c) == 0;
        pthread_attr_destroy(&attr);
        if (room)
            return;
        pthread_mutex_lock(&c->lock);
        c->refs--;
        pthread_mutex_unlock(&c->lock);
        pthread_mutex_lock(&r->lock);
        r->waking--;
        pthread_mutex_unlock(&r->lock);
    }
    refuse(c, GRPC_STATUS_UNAVAILABLE, "router: too many calls wait for sandboxes to wake up");
}

/* Resolves an allowed call's target and relays it; may_wait: not on a completion-queue thread,
 * so a wake is waited for here. */
static void route(struct call *c, const struct sbx_target *t, bool may_wait)
{
    struct sbx_error e = {0};
    int rc = 0;

    c->t = *t;
    if (c->r->o.resolver)
        rc = sbx_resolver_resolve(c->r->o.resolver, &c->t, true, may_wait ? ms_left(c) : 0, &e);
    if (rc == -EWOULDBLOCK)
        wait_for_wake(c);
    else if (rc < 0)
        refuse_unresolved(c, rc, e.msg);
    else
        relay_to(c, !may_wait);
}

/* ------------------------------------------------------------------------------------------ */
/* Authorization (authz.h): decided inline when it needs nothing but memory (a cached answer, a
 * scoped token), else on a thread of its own: the completion-queue threads never wait for the
 * API server. */

#define AUTH_MAX (SBX_AUTHZ_TOKEN_MAX + 64) /* an authorization value read whole */

/* A decision that waits for the API server, with what it needs copied out of the call. */
struct deferred {
    struct call *c;
    struct sbx_target t;
    struct sbx_authz_req req;
    char auth[AUTH_MAX];
};

static grpc_status_code authz_status(int rc)
{
    switch (rc) {
    case -EACCES:
        return GRPC_STATUS_UNAUTHENTICATED;
    case -EPERM:
        return GRPC_STATUS_PERMISSION_DENIED;
    default:
        return GRPC_STATUS_UNAVAILABLE; /* the API server could not answer: worth a retry */
    }
}

/* Relays the call, or refuses it with the decision's status. */
static void decided(struct call *c, const struct sbx_authz_req *req, const struct sbx_target *t,
                    int rc, const struct sbx_authz_verdict *v, const struct sbx_error *e,
                    bool may_wait)
{
    struct sbx_authz *a = c->r->o.authz;
    struct sbx_authz_forward f;
    char msg[320];

    if (rc < 0) {
        log_debug("router: call to %s/%s refused: %s", t->ns, t->id, v->reason);
        snprintf(msg, sizeof(msg), "router (%s): %s", sbx_authz_mode_name(sbx_authz_mode(a)),
                 e->msg);
        refuse(c, authz_status(rc), msg);
        return;
    }
    sbx_authz_forward(a, req, v, &f);
    c->strip_auth = !f.keep_authorization && !f.set_authorization;
    route(c, t, may_wait);
}

static void *authz_thread(void *arg)
{
    struct deferred *d = arg;
    struct call *c = d->c;
    struct sbx_relay *r = c->r;
    struct sbx_authz_verdict v;
    struct sbx_error e = {0};
    int rc = sbx_authz_check(r->o.authz, &d->req, true, &v, &e);

    decided(c, &d->req, &d->t, rc, &v, &e, true);
    free(d);
    pthread_mutex_lock(&r->lock);
    r->authz_waiting--;
    pthread_mutex_unlock(&r->lock);
    call_unref(c); /* the last touch of r when this was the relay's last call */
    return NULL;
}

/* Hands the decision to a thread; false when it cannot (too many wait: the call is refused). */
static bool defer(struct call *c, const struct sbx_authz_req *req, const struct sbx_target *t)
{
    struct sbx_relay *r = c->r;
    struct deferred *d = calloc(1, sizeof(*d));
    pthread_attr_t attr;
    pthread_t th;
    bool ok = false;

    pthread_mutex_lock(&r->lock);
    if (d && r->authz_waiting < MAX_AUTHZ_WAITING) {
        r->authz_waiting++;
        ok = true;
    }
    pthread_mutex_unlock(&r->lock);
    if (!ok) {
        free(d);
        return false;
    }
    d->c = c;
    d->t = *t;
    d->req = *req;
    d->req.ns = d->t.ns;
    d->req.name = d->t.id;
    if (req->authorization)
        snprintf(d->auth, sizeof(d->auth), "%s", req->authorization);
    d->req.authorization = req->authorization ? d->auth : NULL;
    pthread_mutex_lock(&c->lock);
    c->refs++; /* the thread's */
    pthread_mutex_unlock(&c->lock);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &attr, authz_thread, d) != 0) {
        pthread_attr_destroy(&attr);
        pthread_mutex_lock(&c->lock);
        c->refs--;
        pthread_mutex_unlock(&c->lock);
        pthread_mutex_lock(&r->lock);
        r->authz_waiting--;
        pthread_mutex_unlock(&r->lock);
        free(d);
        return false;
    }
    pthread_attr_destroy(&attr);
    return true;
}

/* Decides the call, then relays or refuses it (or hands both to a thread). */
static void authorize(struct call *c, const struct sbx_route_keys *k, const struct sbx_target *t)
{
    struct sbx_relay *r = c->r;
    _cleanup_free_ char *auth = malloc(AUTH_MAX);
    struct sbx_authz_req req = {
        .ns = t->ns,
        .name = t->id,
        .overrides = (k->pod_ip && *k->pod_ip) || (k->uid && *k->uid),
        /* Without a port key the call goes to sandboxd's gRPC port; a port the client names is
         * a user's, whatever its number (an app may hold 9090, sandboxd then another). */
        .sandboxd = !k->port || !*k->port,
    };
    struct sbx_authz_verdict v;
    struct sbx_error e = {0};
    int rc;

    if (!auth) {
        refuse(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "router: out of memory");
        return;
    }
    value_of(&c->req_md, "authorization", auth, AUTH_MAX, &req.authorization);
    rc = sbx_authz_check(r->o.authz, &req, false, &v, &e);
    if (rc != -EWOULDBLOCK)
        decided(c, &req, t, rc, &v, &e, false);
    else if (!defer(c, &req, t))
        refuse(c, GRPC_STATUS_UNAVAILABLE, "router: too many calls wait for authorization");
}

static void on_new(struct call *c, bool ok)
{
    struct sbx_relay *r = c->r;
    char id[KEY_MAX], ns[KEY_MAX], port[KEY_MAX], uid[KEY_MAX], ip[KEY_MAX];
    struct sbx_route_keys k = {0};
    struct sbx_target t;
    struct sbx_error e = {0};

    arm_acceptor(r);
    if (!ok)
        return; /* the server is shutting down: this call never came */
    pthread_mutex_lock(&r->lock);
    r->calls++;
    pthread_mutex_unlock(&r->lock);
    value_of(&c->req_md, "x-sandbox-id", id, KEY_MAX, &k.id);
    value_of(&c->req_md, "x-sandbox-namespace", ns, KEY_MAX, &k.ns);
    value_of(&c->req_md, "x-sandbox-port", port, KEY_MAX, &k.port);
    value_of(&c->req_md, "x-sandbox-uid", uid, KEY_MAX, &k.uid);
    value_of(&c->req_md, "x-sandbox-pod-ip", ip, KEY_MAX, &k.pod_ip);
    if (sbx_target_parse(&k, r->o.default_port, &r->o.target, &t, &e) < 0) {
        refuse(c, GRPC_STATUS_INVALID_ARGUMENT, e.msg);
        return;
    }
    if (r->o.authz)
        authorize(c, &k, &t);
    else
        route(c, &t, false);
}

/* ------------------------------------------------------------------------------------------ */
/* The server */

static struct call *call_new(struct sbx_relay *r)
{
    struct call *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->t_new = (struct tag){on_new, c};
    c->t_closed = (struct tag){on_closed, c};
    c->t_up_status = (struct tag){on_up_status, c};
    c->t_down_recv = (struct tag){on_down_recv, c};
    c->t_up_sent = (struct tag){on_up_sent, c};
    c->t_up_recv = (struct tag){on_up_recv, c};
    c->t_down_sent = (struct tag){on_down_sent, c};
    c->t_half_closed = (struct tag){on_nothing, c};
    c->t_status_sent = (struct tag){on_nothing, c};
    c->t_up_headers = (struct tag){on_nothing, c};
    c->r = r;
    c->refs = 1; /* the acceptor's, dropped after on_new */
    pthread_mutex_init(&c->lock, NULL);
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->req_md);
    grpc_metadata_array_init(&c->up_initial);
    grpc_metadata_array_init(&c->up_trailing);
    c->status_details = grpc_empty_slice();
    return c;
}

static void arm_acceptor(struct sbx_relay *r)
{
    struct call *c;

    pthread_mutex_lock(&r->lock);
    if (r->stopping) {
        pthread_mutex_unlock(&r->lock);
        return;
    }
    r->live++;
    pthread_mutex_unlock(&r->lock);
    c = call_new(r);
    if (!c || grpc_server_request_call(r->server, &c->down, &c->details, &c->req_md, r->cq, r->cq,
                                       &c->t_new) != GRPC_CALL_OK) {
        log_error(0, "router: cannot wait for gRPC calls");
        if (c) {
            call_unref(c);
        } else {
            pthread_mutex_lock(&r->lock);
            r->live--;
            pthread_mutex_unlock(&r->lock);
        }
    }
}

static void on_shutdown(struct call *c, bool ok)
{
    (void)c;
    (void)ok;
}

static void *poll_cq(void *arg)
{
    struct sbx_relay *r = arg;

    for (;;) {
        /* With headers waiting (relay), only what is ready now: none, and they go. */
        bool waiting = __atomic_load_n(&r->headers_waiting, __ATOMIC_ACQUIRE) != NULL;
        grpc_event ev = grpc_completion_queue_next(
            r->cq, waiting ? gpr_inf_past(GPR_CLOCK_REALTIME) : gpr_inf_future(GPR_CLOCK_REALTIME),
            NULL);
        struct tag *t;
        if (ev.type == GRPC_QUEUE_TIMEOUT) {
            send_waiting_headers(r);
            continue;
        }
        if (ev.type == GRPC_QUEUE_SHUTDOWN) {
            send_waiting_headers(r);
            return NULL;
        }
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        t = ev.tag;
        if (t == &r->t_shutdown) {
            pthread_mutex_lock(&r->lock);
            r->shut_down = true;
            pthread_cond_broadcast(&r->idle);
            pthread_mutex_unlock(&r->lock);
            continue;
        }
        t->fn(t->c, ev.success);
        call_unref(t->c);
    }
}

int sbx_relay_new(struct sbx_relay **ret, const struct sbx_relay_opts *o, struct sbx_error *err)
{
    struct sbx_relay *r = calloc(1, sizeof(*r));
    grpc_arg args[2] = {
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = o->max_message_bytes},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
         .value.integer = o->max_message_bytes},
    };
    grpc_channel_args cargs = {.num_args = 2, .args = args};
    int rc;

    if (!r)
        return sbx_error_set(err, ENOMEM, "allocate relay");
    r->o = *o;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->idle, NULL);
    r->t_shutdown = (struct tag){.fn = on_shutdown};
    rc = sbx_upstreams_new(&r->ups, o->max_upstreams ? o->max_upstreams : 4096,
                           o->max_message_bytes, err);
    if (rc < 0) {
        free(r);
        return rc;
    }
    r->cq = grpc_completion_queue_create_for_next(NULL);
    r->server = grpc_server_create(&cargs, NULL);
    grpc_server_register_completion_queue(r->server, r->cq, NULL);
    *ret = r;
    return 0;
}

int sbx_relay_start(struct sbx_relay *r, struct sbx_error *err)
{
    int n = r->o.threads > 0 && r->o.threads <= SBX_RELAY_MAX_THREADS ? r->o.threads : 1;

    grpc_server_start(r->server);
    for (int i = 0; i < n; i++) {
        if (pthread_create(&r->threads[i], NULL, poll_cq, r) != 0)
            return sbx_error_set(err, EAGAIN, "start relay thread");
        r->n_threads++;
    }
    /* Several acceptors, so a burst of calls is not served one accept at a time. */
    for (int i = 0; i < 2 * n; i++)
        arm_acceptor(r);
    return 0;
}

void sbx_relay_add_fd(struct sbx_relay *r, int fd)
{
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();

    grpc_server_add_channel_from_fd(r->server, fd, creds);
    grpc_server_credentials_release(creds);
}

void sbx_relay_stats(struct sbx_relay *r, struct sbx_relay_stats *s)
{
    pthread_mutex_lock(&r->lock);
    s->calls = r->calls;
    s->refused = r->refused;
    pthread_mutex_unlock(&r->lock);
    sbx_upstreams_count(r->ups, &s->upstreams_open, &s->upstreams_created);
}

void sbx_relay_shutdown(struct sbx_relay *r, uint64_t grace_ms)
{
    struct timespec until;

    if (!r || r->down)
        return;
    r->down = true;
    pthread_mutex_lock(&r->lock);
    r->stopping = true;
    pthread_mutex_unlock(&r->lock);
    if (r->n_threads) {
        grpc_server_shutdown_and_notify(r->server, r->cq, &r->t_shutdown);
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)(grace_ms / 1000);
        until.tv_nsec += (long)(grace_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&r->lock);
        while (!r->shut_down && pthread_cond_timedwait(&r->idle, &r->lock, &until) != ETIMEDOUT)
            ;
        pthread_mutex_unlock(&r->lock);
        if (r->o.resolver)
            sbx_resolver_cancel(r->o.resolver, 0); /* calls waiting for a wake end */
        grpc_server_cancel_all_calls(r->server);
        pthread_mutex_lock(&r->lock);
        while (!r->shut_down || r->live)
            pthread_cond_wait(&r->idle, &r->lock);
        pthread_mutex_unlock(&r->lock);
    }
    grpc_server_destroy(r->server);
    grpc_completion_queue_shutdown(r->cq);
    for (int i = 0; i < r->n_threads; i++)
        pthread_join(r->threads[i], NULL);
    grpc_completion_queue_destroy(r->cq);
}

void sbx_relay_free(struct sbx_relay *r)
{
    if (!r)
        return;
    sbx_relay_shutdown(r, 0);
    sbx_upstreams_free(r->ups);
    pthread_cond_destroy(&r->idle);
    pthread_mutex_destroy(&r->lock);
    free(r);
}
