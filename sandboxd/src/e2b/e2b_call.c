/* A Connect call of the E2B port (connectrpc.com/docs/protocol): one object referenced by its
 * request, its stream response and whoever answers it later. Its connection is suspended while
 * it has nothing to send and resumed by whoever adds something (a send, the end, the keepalive
 * or deadline timer on the loop). A stream's unsent messages are bounded: past the soft bound
 * a producer waits (sbx_e2b_call_writable), past the hard one the call fails. */
#define _GNU_SOURCE
#include "e2b_call.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "clock.h"
#include "e2b_internal.h"
#include "http_request.h"
#include "log.h"
#include "metrics.h"
#include "pbjson.h"

#define STREAM_BLOCK (16 * 1024)
#define SOFT_QUEUE   (256 * 1024)
#define HARD_QUEUE   (8 << 20)

/* ------------------------------------------------------------------------------------------ */
/* The object */

const struct sbx_e2b_user *sbx_e2b_call_user(struct sbx_e2b_call *c)
{
    return &c->user;
}

struct sbx_e2b_server *sbx_e2b_call_server(struct sbx_e2b_call *c)
{
    return c->srv;
}

void sbx_e2b_call_set_data(struct sbx_e2b_call *c, void *data, void (*free_fn)(void *))
{
    c->data = data;
    c->data_free = free_fn;
}

void *sbx_e2b_call_data(struct sbx_e2b_call *c)
{
    return c->data;
}

uint64_t sbx_e2b_call_timeout_ms(struct sbx_e2b_call *c)
{
    return c->timeout_ms;
}

struct sbx_e2b_call *sbx_e2b_call_ref(struct sbx_e2b_call *c)
{
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
    return c;
}

static void call_free(void *arg)
{
    struct sbx_e2b_call *c = arg;

    if (c->timer_on)
        sbx_timer_release(&c->timer);
    if (c->rd_on)
        sbx_connect_reader_release(&c->rd);
    if (c->data_free)
        c->data_free(c->data);
    free(c->out);
    free(c->q);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

void sbx_e2b_call_unref(struct sbx_e2b_call *c)
{
    if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    /* A timer is released on the loop, where its callback runs: never under it. */
    if (c->timer_on && !sbx_loop_is_current(c->srv->o.loop)) {
        if (sbx_loop_post(c->srv->o.loop, call_free, c) < 0)
            log_error(ENOMEM, "e2b: no memory to free a call: leaked");
        return;
    }
    call_free(c);
}

bool sbx_e2b_call_gone(struct sbx_e2b_call *c)
{
    bool gone;

    pthread_mutex_lock(&c->lock);
    gone = c->gone || c->ended;
    pthread_mutex_unlock(&c->lock);
    return gone;
}

bool sbx_e2b_call_on_gone(struct sbx_e2b_call *c, void (*fn)(void *), void *arg)
{
    bool now;

    pthread_mutex_lock(&c->lock);
    now = c->gone;
    if (!now) {
        c->gone_fn = fn;
        c->gone_arg = arg;
    }
    pthread_mutex_unlock(&c->lock);
    if (now)
        fn(arg);
    return true;
}

bool sbx_e2b_call_off_gone(struct sbx_e2b_call *c)
{
    bool armed;

    pthread_mutex_lock(&c->lock);
    armed = c->gone_fn != NULL;
    c->gone_fn = NULL;
    pthread_mutex_unlock(&c->lock);
    return armed;
}

bool sbx_e2b_call_writable(struct sbx_e2b_call *c, void (*fn)(void *), void *arg)
{
    bool room;

    pthread_mutex_lock(&c->lock);
    room = c->gone || c->ended || c->q_len - c->q_off <= SOFT_QUEUE;
    if (!room) {
        c->drain_fn = fn;
        c->drain_arg = arg;
    }
    pthread_mutex_unlock(&c->lock);
    return room;
}

/* Under lock: wakes the connection if it sleeps. */
static void wake(struct sbx_e2b_call *c)
{
    if (c->suspended && c->conn) {
        c->suspended = false;
        MHD_resume_connection(c->conn);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding */

static int encode(const struct sbx_e2b_call *c, const ProtobufCMessage *m, uint8_t **ret,
                  size_t *len)
{
    struct sbx_error e = {0};
    size_t n;

    if (c->type.codec == SBX_CONNECT_JSON)
        return sbx_pbjson_encode(m, (char **)ret, len, &e);
    n = protobuf_c_message_get_packed_size(m);
    *ret = malloc(n ? n : 1);
    if (!*ret)
        return -ENOMEM;
    *len = protobuf_c_message_pack(m, *ret);
    return 0;
}

int sbx_e2b_call_decode(const struct sbx_e2b_call *c, const uint8_t *p, size_t n,
                        ProtobufCMessage **ret, char *msg, size_t len)
{
    struct sbx_error e = {0};

    if (c->type.codec == SBX_CONNECT_JSON) {
        if (sbx_pbjson_decode(c->m->in, (const char *)p, n, ret, &e) < 0)
            return snprintf(msg, len, "invalid JSON request: %s", e.msg), -EINVAL;
        return 0;
    }
    *ret = protobuf_c_message_unpack(c->m->in, NULL, n, p);
    if (!*ret)
        return snprintf(msg, len, "invalid binary protobuf request"), -EINVAL;
    return 0;
}

/* Under lock: appends bytes to a stream's queue. */
static int enqueue(struct sbx_e2b_call *c, const uint8_t *prefix, size_t plen, const uint8_t *p,
                   size_t n)
{
    size_t need = c->q_len - c->q_off + plen + n;

    if (c->q_off && c->q_off == c->q_len)
        c->q_off = c->q_len = 0;
    if (c->q_len + plen + n > c->q_cap) {
        uint8_t *nq;
        size_t cap = c->q_cap ? c->q_cap : 4096;
        if (c->q_off) { /* slide what is left to the front first */
            memmove(c->q, c->q + c->q_off, c->q_len - c->q_off);
            c->q_len -= c->q_off;
            c->q_off = 0;
        }
        while (cap < need)
            cap *= 2;
        if (cap > c->q_cap) {
            nq = realloc(c->q, cap);
            if (!nq)
                return -ENOMEM;
            c->q = nq;
            c->q_cap = cap;
        }
    }
    if (plen)
        memcpy(c->q + c->q_len, prefix, plen);
    if (n)
        memcpy(c->q + c->q_len + plen, p, n);
    c->q_len += plen + n;
    c->last_send_ms = sbx_now_ms();
    wake(c);
    return 0;
}

/* Under lock: a stream's enveloped message. */
static int enqueue_message(struct sbx_e2b_call *c, const ProtobufCMessage *m)
{
    _cleanup_free_ uint8_t *buf = NULL;
    uint8_t prefix[SBX_CONNECT_PREFIX_LEN];
    size_t n = 0;
    int r = encode(c, m, &buf, &n);

    if (r < 0)
        return r;
    sbx_connect_prefix(prefix, 0, (uint32_t)n);
    sbx_metrics_bytes_out(n);
    return enqueue(c, prefix, sizeof(prefix), buf, n);
}

/* Under lock: ends the call with e (NULL: well). */
static void finish_locked(struct sbx_e2b_call *c, const struct sbx_connect_error *e)
{
    struct sbx_error err = {0};
    uint8_t *buf = NULL;
    size_t n = 0;

    if (c->ended)
        return;
    c->ended = true;
    if (c->type.streaming) {
        if (sbx_connect_end_stream(e, &buf, &n, &err) == 0)
            (void)enqueue(c, NULL, 0, buf, n);
        free(buf);
        wake(c);
        return;
    }
    if (!e) { /* a unary call that ends without an answer: the empty message */
        c->answered = true;
        c->status = 200;
        wake(c);
        return;
    }
    free(c->out);
    c->out = NULL;
    if (sbx_connect_error_json(e, (char **)&c->out, &c->out_len, &err) < 0)
        c->out_len = 0;
    c->status = sbx_connect_http_status(e->code);
    c->error_body = true;
    c->answered = true;
    wake(c);
}

int sbx_e2b_call_send(struct sbx_e2b_call *c, const ProtobufCMessage *m)
{
    struct sbx_connect_error e = {SBX_CONNECT_INTERNAL, "cannot encode the answer", NULL, 0};
    int r = 0;

    pthread_mutex_lock(&c->lock);
    if (c->ended || c->gone) {
        r = -EPIPE;
    } else if (!c->type.streaming) {
        free(c->out);
        c->out = NULL;
        r = encode(c, m, &c->out, &c->out_len);
        if (r == 0) {
            c->status = 200;
            c->answered = c->ended = true;
            sbx_metrics_bytes_out(c->out_len);
            wake(c);
        }
    } else if (c->q_len - c->q_off > HARD_QUEUE) {
        e = (struct sbx_connect_error){SBX_CONNECT_RESOURCE_EXHAUSTED,
                                       "the client reads too slowly", NULL, 0};
        r = -ENOBUFS;
    } else {
        r = enqueue_message(c, m);
    }
    /* A message that cannot go ends the call: its client is never left waiting for it. */
    if (r < 0 && r != -EPIPE)
        finish_locked(c, &e);
    pthread_mutex_unlock(&c->lock);
    return r;
}

void sbx_e2b_call_fail(struct sbx_e2b_call *c, int connect_code, const char *fmt, ...)
{
    struct sbx_connect_error e = {connect_code, NULL, NULL, 0};
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    e.message = msg;
    pthread_mutex_lock(&c->lock);
    finish_locked(c, &e);
    pthread_mutex_unlock(&c->lock);
}

void sbx_e2b_call_end(struct sbx_e2b_call *c)
{
    pthread_mutex_lock(&c->lock);
    finish_locked(c, NULL);
    pthread_mutex_unlock(&c->lock);
}

/* ------------------------------------------------------------------------------------------ */
/* Keepalive and deadline, on the loop */

static void arm_timer(struct sbx_e2b_call *c, uint64_t now)
{
    uint64_t next = UINT64_MAX;

    if (c->keepalive_ms)
        next = c->last_send_ms + c->keepalive_ms;
    if (c->deadline_ms && c->deadline_ms < next)
        next = c->deadline_ms;
    if (next != UINT64_MAX)
        (void)sbx_timer_arm(&c->timer, next > now ? next - now : 1);
}

static void timer_fired(struct sbx_timer *t);

void sbx_e2b_call_arm(struct sbx_e2b_call *c)
{
    if (!(c->keepalive_ms || c->deadline_ms) || !c->srv->o.loop ||
        sbx_timer_init(&c->timer, c->srv->o.loop, timer_fired, NULL) < 0)
        return;
    c->timer_on = true;
    pthread_mutex_lock(&c->lock);
    arm_timer(c, sbx_now_ms());
    pthread_mutex_unlock(&c->lock);
}

static void timer_fired(struct sbx_timer *t)
{
    struct sbx_e2b_call *c =
        (struct sbx_e2b_call *)((char *)t - offsetof(struct sbx_e2b_call, timer));
    uint64_t now = sbx_now_ms();

    pthread_mutex_lock(&c->lock);
    if (!c->ended && !c->gone) {
        if (c->deadline_ms && now >= c->deadline_ms) {
            struct sbx_connect_error e = {SBX_CONNECT_DEADLINE_EXCEEDED,
                                          "the deadline (Connect-Timeout-Ms) has passed", NULL, 0};
            finish_locked(c, &e);
        } else {
            if (c->keepalive_ms && now - c->last_send_ms >= c->keepalive_ms)
                (void)enqueue_message(c, c->m->keepalive);
            arm_timer(c, now);
        }
    }
    pthread_mutex_unlock(&c->lock);
}

/* ------------------------------------------------------------------------------------------ */
/* The wire: libmicrohttpd's side of a call */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct sbx_e2b_call *c = cls;
    void (*drain)(void *) = NULL;
    void *drain_arg = NULL;
    ssize_t n = 0;

    (void)pos;
    pthread_mutex_lock(&c->lock);
    if (c->q_off < c->q_len) {
        n = (ssize_t)(c->q_len - c->q_off < max ? c->q_len - c->q_off : max);
        memcpy(buf, c->q + c->q_off, (size_t)n);
        c->q_off += (size_t)n;
        if (c->drain_fn && c->q_len - c->q_off <= SOFT_QUEUE) {
            drain = c->drain_fn;
            drain_arg = c->drain_arg;
            c->drain_fn = NULL;
        }
    } else if (c->ended) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else if (c->conn) {
        /* Nothing now: sleep until something is added (it wakes us under this lock). */
        MHD_suspend_connection(c->conn);
        c->suspended = true;
    }
    pthread_mutex_unlock(&c->lock);
    if (drain)
        drain(drain_arg);
    return n;
}

static void stream_free(void *cls)
{
    sbx_e2b_call_unref(cls);
}

/* The request is over (answered, or the client went away). */
static void request_over(void *state)
{
    struct sbx_e2b_call *c = state;
    void (*gone)(void *) = NULL, (*drain)(void *) = NULL;
    void *gone_arg = NULL, *drain_arg = NULL;

    pthread_mutex_lock(&c->lock);
    c->conn = NULL;
    c->suspended = false;
    if (!c->gone) {
        c->gone = true;
        gone = c->gone_fn;
        gone_arg = c->gone_arg;
        drain = c->drain_fn;
        drain_arg = c->drain_arg;
        c->gone_fn = c->drain_fn = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    if (gone)
        gone(gone_arg);
    if (drain)
        drain(drain_arg);
    __atomic_sub_fetch(&c->srv->live_calls, 1, __ATOMIC_RELEASE);
    sbx_e2b_call_unref(c);
}

/* A unary call's answer, queued once it is there. */
static enum MHD_Result respond_unary(struct hctx *hc, struct sbx_e2b_call *c)
{
    struct MHD_Response *resp;
    const char *type;

    pthread_mutex_lock(&c->lock);
    if (!c->answered) {
        MHD_suspend_connection(hc->conn);
        c->suspended = true;
        pthread_mutex_unlock(&c->lock);
        return MHD_YES;
    }
    resp = MHD_create_response_from_buffer(c->out_len, c->out, MHD_RESPMEM_MUST_COPY);
    type = c->error_body ? "application/json" : sbx_connect_type_name(c->type);
    pthread_mutex_unlock(&c->lock);
    if (resp)
        MHD_add_response_header(resp, "Content-Type", type);
    return sbx_http_queue(hc, c->status, resp);
}

static enum MHD_Result respond_stream(struct hctx *hc, struct sbx_e2b_call *c)
{
    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, sbx_e2b_call_ref(c), stream_free);

    if (!resp) {
        sbx_e2b_call_unref(c);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", sbx_connect_type_name(c->type));
    return sbx_http_queue(hc, 200, resp);
}

enum MHD_Result sbx_e2b_call_respond(struct hctx *hc, struct sbx_e2b_call *c)
{
    return c->type.streaming ? respond_stream(hc, c) : respond_unary(hc, c);
}

enum MHD_Result sbx_e2b_call_respond_error(struct hctx *hc, struct sbx_e2b_call *c, int code,
                                           const char *msg)
{
    struct sbx_connect_error e = {code, msg, NULL, 0};

    pthread_mutex_lock(&c->lock);
    finish_locked(c, &e);
    pthread_mutex_unlock(&c->lock);
    return c->type.streaming ? respond_stream(hc, c) : respond_unary(hc, c);
}

struct sbx_e2b_call *sbx_e2b_call_new(struct hctx *hc)
{
    struct sbx_e2b_call *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    pthread_mutex_init(&c->lock, NULL);
    c->refs = 1; /* the request's */
    c->srv = sbx_e2b_of(hc);
    __atomic_add_fetch(&c->srv->live_calls, 1, __ATOMIC_RELAXED);
    c->conn = hc->conn;
    c->last_send_ms = sbx_now_ms();
    hc->r->state = c;
    hc->r->state_drop = request_over;
    return c;
}
