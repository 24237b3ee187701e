/* The Connect transport of the E2B port (connectrpc.com/docs/protocol) on libmicrohttpd: unary
 * calls (application/json, application/proto) and server streams (application/connect+json,
 * +proto: one enveloped request, enveloped answers, the end-of-stream message). A call is one
 * object referenced by its request, its stream response and whoever answers it later; its
 * connection is suspended while it has nothing to send and resumed by whoever adds something
 * (a send, the end, the keepalive or deadline timer on the loop). A stream's unsent messages
 * are bounded: past the soft bound a producer waits (sbx_e2b_call_writable), past the hard one
 * the call fails. */
#define _GNU_SOURCE
#include "e2b_rpc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "connect.h"
#include "e2b_internal.h"
#include "http_request.h"
#include "log.h"
#include "loop.h"
#include "metrics.h"
#include "parse.h"

#if __has_include("pbjson.h")
#include "pbjson.h"
#define HAVE_PBJSON 1
#else
#define HAVE_PBJSON 0
#endif

#define STREAM_BLOCK  (16 * 1024)
#define SOFT_QUEUE    (256 * 1024)
#define HARD_QUEUE    (8 << 20)
#define MAX_KEEPALIVE (24 * 3600)

struct sbx_e2b_call {
    pthread_mutex_t lock;
    int refs;
    struct sbx_e2b_server *srv;
    const struct sbx_e2b_method *m;
    struct sbx_connect_type type;
    struct sbx_e2b_user user;
    uint64_t timeout_ms, keepalive_ms, deadline_ms, last_send_ms;
    /* before the handler: an error found in the head, answered once the body is read */
    int early_code;
    char early_msg[256];
    bool too_large;  /* the body passed the limit */
    bool dispatched; /* the body was read and the call begun */
    struct MHD_Connection *conn; /* NULL once the request is over */
    bool suspended, ended, gone;
    /* unary: the answer */
    bool answered;
    unsigned status;
    bool error_body;
    uint8_t *out;
    size_t out_len;
    /* stream: envelopes not yet handed to libmicrohttpd */
    uint8_t *q;
    size_t q_len, q_off, q_cap;
    void (*gone_fn)(void *);
    void *gone_arg;
    void (*drain_fn)(void *);
    void *drain_arg;
    struct sbx_timer timer;
    bool timer_on;
    /* client streams: the request's envelopes, read as they come */
    struct sbx_connect_reader rd;
    bool rd_on;
    void *data;
    void (*data_free)(void *);
};

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

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

    if (c->type.codec == SBX_CONNECT_JSON) {
#if HAVE_PBJSON
        return sbx_pbjson_encode(m, (char **)ret, len, &e);
#else
        (void)e;
        return -EINVAL;
#endif
    }
    n = protobuf_c_message_get_packed_size(m);
    *ret = malloc(n ? n : 1);
    if (!*ret)
        return -ENOMEM;
    *len = protobuf_c_message_pack(m, *ret);
    return 0;
}

static int decode(const struct sbx_e2b_call *c, const uint8_t *p, size_t n,
                  ProtobufCMessage **ret, char *msg, size_t len)
{
    struct sbx_error e = {0};

    if (c->type.codec == SBX_CONNECT_JSON) {
#if HAVE_PBJSON
        if (sbx_pbjson_decode(c->m->in, (const char *)p, n, ret, &e) < 0)
            return snprintf(msg, len, "invalid JSON request: %s", e.msg), -EINVAL;
        return 0;
#else
        (void)e;
        return snprintf(msg, len, "JSON is not supported by this build"), -EINVAL;
#endif
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
    c->last_send_ms = now_ms();
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
        struct sbx_connect_error e = {SBX_CONNECT_RESOURCE_EXHAUSTED,
                                      "the client reads too slowly", NULL, 0};
        finish_locked(c, &e);
        r = -ENOBUFS;
    } else {
        r = enqueue_message(c, m);
    }
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

static void timer_fired(struct sbx_timer *t)
{
    struct sbx_e2b_call *c = (struct sbx_e2b_call *)((char *)t - offsetof(struct sbx_e2b_call,
                                                                          timer));
    uint64_t now = now_ms();

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

/* An error before the handler: a unary call's JSON with its status, a stream's end message. */
static enum MHD_Result respond_early(struct hctx *hc, struct sbx_e2b_call *c, int code,
                                     const char *msg)
{
    struct sbx_connect_error e = {code, msg, NULL, 0};

    pthread_mutex_lock(&c->lock);
    finish_locked(c, &e);
    pthread_mutex_unlock(&c->lock);
    return c->type.streaming ? respond_stream(hc, c) : respond_unary(hc, c);
}

/* ------------------------------------------------------------------------------------------ */
/* The route */

static const char *header(struct hctx *hc, const char *name, size_t *len)
{
    const char *v = NULL;

    if (MHD_lookup_connection_value_n(hc->conn, MHD_HEADER_KIND, name, strlen(name), &v, len) !=
        MHD_YES)
        return NULL;
    return v;
}

/* The head's checks: content type, protocol version, timeout, keepalive, method. The first
 * refusal is kept in c->early_*. Returns false when the type itself is refused (415). */
static bool check_head(struct hctx *hc, struct sbx_e2b_call *c, char *path)
{
    struct sbx_error e = {0};
    const char *v;
    size_t n = 0;
    long long ka;

    v = header(hc, "Content-Type", &n);
    if (!v || sbx_connect_type_parse(v, n, &c->type, &e) < 0)
        return false;
    c->m = sbx_e2b_method_find(path);
    if (c->m && (c->m->server_streaming || c->m->client_streaming) != c->type.streaming)
        c->m = NULL; /* the wrong kind of call: as an unknown method, below */
    if (!c->m) {
        /* The kind of answer follows the request's type. */
        static const struct sbx_e2b_method unknown_stream = {.server_streaming = true};
        static const struct sbx_e2b_method unknown_unary = {.server_streaming = false};
        c->m = c->type.streaming ? &unknown_stream : &unknown_unary;
        c->early_code = SBX_CONNECT_UNIMPLEMENTED;
        snprintf(c->early_msg, sizeof(c->early_msg), "%.200s is not implemented", path);
        return true;
    }
    if (strcmp(hc->method, "POST") != 0) {
        c->early_code = SBX_CONNECT_UNIMPLEMENTED;
        snprintf(c->early_msg, sizeof(c->early_msg), "only POST is served");
    } else if ((v = header(hc, "Connect-Protocol-Version", &n)) &&
               sbx_connect_version_check(v, n, &e) < 0) {
        c->early_code = SBX_CONNECT_INVALID_ARGUMENT;
        snprintf(c->early_msg, sizeof(c->early_msg), "%s", e.msg);
    } else if ((v = header(hc, "Connect-Timeout-Ms", &n)) &&
               sbx_connect_timeout_parse(v, n, &c->timeout_ms, &e) < 0) {
        c->early_code = SBX_CONNECT_INVALID_ARGUMENT;
        snprintf(c->early_msg, sizeof(c->early_msg), "%s", e.msg);
    } else if (c->m->keepalive && (v = sbx_http_header(hc, "Keepalive-Ping-Interval"))) {
        if (sbx_parse_int(v, 1, MAX_KEEPALIVE, &ka) < 0) {
            c->early_code = SBX_CONNECT_INVALID_ARGUMENT;
            snprintf(c->early_msg, sizeof(c->early_msg),
                     "Keepalive-Ping-Interval must be 1 to %d seconds", MAX_KEEPALIVE);
        } else {
            c->keepalive_ms = (uint64_t)ka * 1000;
        }
    }
    return true;
}

static struct sbx_e2b_call *call_new(struct hctx *hc)
{
    struct sbx_e2b_call *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    pthread_mutex_init(&c->lock, NULL);
    c->refs = 1; /* the request's */
    c->srv = sbx_e2b_of(hc);
    c->conn = hc->conn;
    c->last_send_ms = now_ms();
    hc->r->state = c;
    hc->r->state_drop = request_over;
    return c;
}

/* The first call of the access handler: the head. */
static enum MHD_Result begin(struct hctx *hc)
{
    struct sbx_e2b_call *c;
    enum MHD_Result ret;
    char path[256];
    struct MHD_Response *resp;

    hc->r->began = true;
    if (!sbx_e2b_authorized(hc, &ret))
        return ret;
    snprintf(path, sizeof(path), "%s%s", hc->r->route->prefix, hc->path);
    c = call_new(hc);
    if (!c)
        return MHD_NO;
    if (!check_head(hc, c, path)) {
        resp = sbx_http_json_response(json_pack(
            "{s:s, s:s}", "code", "unknown", "message",
            "unsupported content type: application/json, application/proto, "
            "application/connect+json or application/connect+proto"));
        if (resp)
            MHD_add_response_header(resp, "Accept-Post",
                                    "application/json, application/proto, "
                                    "application/connect+json, application/connect+proto");
        return sbx_http_queue(hc, 415, resp);
    }
    return MHD_YES;
}

/* The request's message: the body, or a stream's one envelope. */
static int request_message(struct hctx *hc, struct sbx_e2b_call *c, ProtobufCMessage **ret,
                           char *msg, size_t len)
{
    struct sbx_connect_reader rd;
    struct sbx_connect_msg m;
    struct sbx_error e = {0};
    const uint8_t *body = (const uint8_t *)hc->r->body;
    size_t n = hc->r->body_len, used = 0;
    int r;

    if (!c->type.streaming)
        return decode(c, body ? body : (const uint8_t *)"", n, ret, msg, len);
    sbx_connect_reader_init(&rd, c->srv->o.max_message_bytes);
    r = sbx_connect_reader_feed(&rd, body ? body : (const uint8_t *)"", n, &used, &m, &e);
    if (r == 1 && m.flags != 0) {
        snprintf(msg, len, "%s", m.flags & SBX_CONNECT_FLAG_COMPRESSED
                                     ? "compressed messages are not supported"
                                     : "an end-of-stream message from the client");
        r = -EPROTO;
    } else if (r == 1 && used != n) {
        snprintf(msg, len, "a server stream takes one request message");
        r = -EPROTO;
    } else if (r == 1) {
        r = decode(c, m.data, m.len, ret, msg, len);
    } else if (r == 0) {
        snprintf(msg, len, "%s",
                 sbx_connect_reader_finish(&rd, &e) < 0 ? e.msg : "no request message");
        r = -EPROTO;
    } else {
        snprintf(msg, len, "%s", e.msg);
    }
    sbx_connect_reader_release(&rd);
    return r;
}

/* The body is whole: decode, run the handler, answer or wait. */
static enum MHD_Result dispatch(struct hctx *hc, struct sbx_e2b_call *c)
{
    ProtobufCMessage *req = NULL;
    char msg[512];
    int r;

    if (c->early_code)
        return respond_early(hc, c, c->early_code, c->early_msg);
    if (c->too_large)
        return respond_early(hc, c, SBX_CONNECT_RESOURCE_EXHAUSTED,
                             "request message larger than the limit");
    if ((r = request_message(hc, c, &req, msg, sizeof(msg))) < 0)
        return respond_early(hc, c,
                             r == -EMSGSIZE ? SBX_CONNECT_RESOURCE_EXHAUSTED
                                            : SBX_CONNECT_INVALID_ARGUMENT,
                             msg);
    sbx_metrics_bytes_in(hc->r->body_len);
    if (sbx_e2b_user_of(hc, &c->user, msg, sizeof(msg)) < 0) {
        protobuf_c_message_free_unpacked(req, NULL);
        return respond_early(hc, c, SBX_CONNECT_UNAUTHENTICATED, msg);
    }
    if (c->m->server_streaming) {
        uint64_t now = now_ms();
        if (c->timeout_ms && !c->m->own_timeout)
            c->deadline_ms = now + c->timeout_ms;
        if ((c->keepalive_ms || c->deadline_ms) && c->srv->o.loop &&
            sbx_timer_init(&c->timer, c->srv->o.loop, timer_fired, NULL) == 0) {
            c->timer_on = true;
            pthread_mutex_lock(&c->lock);
            arm_timer(c, now);
            pthread_mutex_unlock(&c->lock);
        }
    }
    c->m->fn(c, req);
    protobuf_c_message_free_unpacked(req, NULL);
    return c->m->server_streaming ? respond_stream(hc, c) : respond_unary(hc, c);
}

/* A client stream's bytes: each whole message goes to the handler as it arrives. */
static void feed_input(struct hctx *hc, struct sbx_e2b_call *c, const uint8_t *p, size_t n)
{
    struct sbx_error e = {0};
    struct sbx_connect_msg m;
    ProtobufCMessage *req = NULL;
    char msg[512];
    size_t used = 0;
    int r;

    while (n && !sbx_e2b_call_gone(c)) {
        r = sbx_connect_reader_feed(&c->rd, p, n, &used, &m, &e);
        if (r < 0) {
            sbx_e2b_call_fail(c, r == -EMSGSIZE ? SBX_CONNECT_RESOURCE_EXHAUSTED
                                                : SBX_CONNECT_INVALID_ARGUMENT,
                              "%s", e.msg);
            return;
        }
        p += used;
        n -= used;
        if (r == 0)
            return;
        if (m.flags) {
            sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT, "%s",
                              m.flags & SBX_CONNECT_FLAG_COMPRESSED
                                  ? "compressed messages are not supported"
                                  : "an end-of-stream message from the client");
            return;
        }
        if (decode(c, m.data, m.len, &req, msg, sizeof(msg)) < 0) {
            sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT, "%s", msg);
            return;
        }
        sbx_metrics_bytes_in(m.len);
        c->m->fn(c, req);
        protobuf_c_message_free_unpacked(req, NULL);
    }
    (void)hc;
}

/* A client stream's request has begun (its head passed): the checks a unary call makes on its
 * whole body are made here, before the first message. False when it is answered already. */
static bool begin_input(struct hctx *hc, struct sbx_e2b_call *c)
{
    char msg[512];

    c->dispatched = true;
    if (c->early_code) {
        sbx_e2b_call_fail(c, c->early_code, "%s", c->early_msg);
        return false;
    }
    if (sbx_e2b_user_of(hc, &c->user, msg, sizeof(msg)) < 0) {
        sbx_e2b_call_fail(c, SBX_CONNECT_UNAUTHENTICATED, "%s", msg);
        return false;
    }
    sbx_connect_reader_init(&c->rd, c->srv->o.max_message_bytes);
    c->rd_on = true;
    return true;
}

/* Every call of the access handler for a client stream. */
static enum MHD_Result client_stream(struct hctx *hc, struct sbx_e2b_call *c)
{
    struct sbx_error e = {0};
    size_t n = *hc->upload_data_size;

    if (!c->dispatched && !begin_input(hc, c) && !n)
        return respond_stream(hc, c);
    if (n) {
        *hc->upload_data_size = 0;
        if (c->rd_on)
            feed_input(hc, c, (const uint8_t *)hc->upload_data, n);
        return MHD_YES; /* the rest of a failed call's body is dropped */
    }
    hc->body_done = true;
    if (c->rd_on && !sbx_e2b_call_gone(c)) {
        if (sbx_connect_reader_finish(&c->rd, &e) < 0)
            sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT, "%s", e.msg);
        else
            c->m->input_end(c);
    }
    /* The answer is there (the handlers here answer at once): one message and the end. */
    return respond_stream(hc, c);
}

enum MHD_Result sbx_e2b_connect_route(struct hctx *hc)
{
    struct sbx_e2b_call *c = hc->r->state;
    size_t n = *hc->upload_data_size;
    char *nb;

    if (!hc->r->began) {
        enum MHD_Result ret = begin(hc);
        if (hc->r->responded || ret != MHD_YES)
            return ret;
        c = hc->r->state; /* and on with what body came with the head */
    }
    if (!c)
        return MHD_NO;
    if (c->m->client_streaming && !c->early_code)
        return client_stream(hc, c);
    if (c->dispatched) { /* a unary call resumed with its answer */
        hc->body_done = true;
        return respond_unary(hc, c);
    }
    if (n) {
        *hc->upload_data_size = 0;
        if (c->too_large || hc->r->body_len + n > c->srv->o.max_message_bytes +
                                                      SBX_CONNECT_PREFIX_LEN) {
            c->too_large = true; /* the rest is dropped; answered at the end */
            return MHD_YES;
        }
        nb = realloc(hc->r->body, hc->r->body_len + n + 1);
        if (!nb)
            return MHD_NO;
        hc->r->body = nb;
        memcpy(hc->r->body + hc->r->body_len, hc->upload_data, n);
        hc->r->body_len += n;
        return MHD_YES;
    }
    hc->body_done = true;
    c->dispatched = true;
    return dispatch(hc, c);
}
