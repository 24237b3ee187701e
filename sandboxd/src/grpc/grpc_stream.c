#include "grpc_stream.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

/* One queued send: a message, the status, or both. */
struct out {
    struct out *next;
    grpc_byte_buffer *bb; /* NULL: no message */
    uint32_t flags;
    bool final; /* the status follows the message */
    grpc_status_code code;
    grpc_slice details;
    grpc_metadata trailers[SBX_GRPC_MAX_TRAILERS];
    size_t n_trailers;
};

struct sbx_grpc_stream {
    struct sbx_grpc_tag send_tag, close_tag;
    struct sbx_grpc_req *req;
    const struct sbx_grpc_stream_ops *ops;
    void *data;
    int refs;
    int cancelled;        /* written by gRPC before the close tag completes */
    pthread_mutex_t lock; /* everything below */
    bool closed;          /* the close tag completed */
    bool broken;          /* a send failed: nothing more goes out */
    bool finishing;       /* the status is queued or sent */
    bool initial_sent;
    struct out *cur; /* the batch in flight */
    struct out *head, **tail;
};

static void out_free(struct out *o)
{
    if (!o)
        return;
    if (o->bb)
        grpc_byte_buffer_destroy(o->bb);
    if (o->final)
        grpc_slice_unref(o->details);
    for (size_t i = 0; i < o->n_trailers; i++) {
        grpc_slice_unref(o->trailers[i].key);
        grpc_slice_unref(o->trailers[i].value);
    }
    free(o);
}

/* Takes the queue out; the caller frees it once unlocked. */
static struct out *take_queue_locked(struct sbx_grpc_stream *st)
{
    struct out *q = st->head;

    st->head = NULL;
    st->tail = &st->head;
    return q;
}

static void free_queue(struct out *q)
{
    while (q) {
        struct out *next = q->next;
        out_free(q);
        q = next;
    }
}

void sbx_grpc_stream_ref(struct sbx_grpc_stream *st)
{
    __atomic_add_fetch(&st->refs, 1, __ATOMIC_RELAXED);
}

void sbx_grpc_stream_unref(struct sbx_grpc_stream *st)
{
    if (!st || __atomic_sub_fetch(&st->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    out_free(st->cur);
    free_queue(st->head);
    if (st->ops->release)
        st->ops->release(st->data);
    sbx_grpc_req_free(st->req);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

/* Starts the first queued send when none is in flight; the batch holds a reference. When gRPC
 * refuses it (the server is closed) the stream breaks: the send and the queue are taken out
 * (into *failed, for the caller to free once unlocked, with the batch's reference) and false
 * is returned. */
static bool kick_locked(struct sbx_grpc_stream *st, struct out **failed)
{
    grpc_op ops[3];
    struct out *o = st->head;
    size_t n = 0;

    if (st->cur || !o)
        return true;
    st->head = o->next;
    if (!st->head)
        st->tail = &st->head;
    o->next = NULL;
    st->cur = o;
    memset(ops, 0, sizeof(ops));
    if (!st->initial_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        st->initial_sent = true;
    }
    if (o->bb) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].flags = o->flags;
        ops[n++].data.send_message.send_message = o->bb;
    }
    if (o->final) {
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = o->code;
        ops[n].data.send_status_from_server.trailing_metadata_count = o->n_trailers;
        ops[n].data.send_status_from_server.trailing_metadata = o->trailers;
        ops[n++].data.send_status_from_server.status_details = &o->details;
    }
    sbx_grpc_stream_ref(st);
    if (sbx_grpc_start_batch(st->req, ops, n, &st->send_tag) == GRPC_CALL_OK)
        return true;
    st->cur = NULL;
    st->broken = true;
    o->next = take_queue_locked(st);
    *failed = o;
    return false;
}

static void on_sent(struct sbx_grpc_tag *tag, bool ok)
{
    struct sbx_grpc_stream *st =
        (struct sbx_grpc_stream *)((char *)tag - offsetof(struct sbx_grpc_stream, send_tag));
    struct out *o, *dropped = NULL;
    bool started = true, final;

    pthread_mutex_lock(&st->lock);
    o = st->cur;
    st->cur = NULL;
    if (!ok) {
        st->broken = true;
        dropped = take_queue_locked(st);
    } else {
        started = kick_locked(st, &dropped);
    }
    pthread_mutex_unlock(&st->lock);
    final = o->final;
    out_free(o);
    if (st->ops->sent)
        st->ops->sent(st->data, ok, final);
    if (!started) {
        /* The next send could not start: it failed, and took the queue with it. */
        final = dropped->final;
        free_queue(dropped);
        if (st->ops->sent)
            st->ops->sent(st->data, false, final);
        sbx_grpc_stream_unref(st); /* its batch's */
    } else {
        free_queue(dropped);
    }
    sbx_grpc_stream_unref(st); /* the batch's */
}

static void on_closed(struct sbx_grpc_tag *tag, bool ok)
{
    struct sbx_grpc_stream *st =
        (struct sbx_grpc_stream *)((char *)tag - offsetof(struct sbx_grpc_stream, close_tag));

    (void)ok; /* a close watch that could not start (the server is closed) ends the call too */
    pthread_mutex_lock(&st->lock);
    st->closed = true;
    pthread_mutex_unlock(&st->lock);
    if (st->ops->closed)
        st->ops->closed(st->data, st->cancelled);
    sbx_grpc_stream_unref(st); /* the close watch's */
}

int sbx_grpc_stream_new(struct sbx_grpc_req *req, const struct sbx_grpc_stream_ops *ops, void *data,
                        struct sbx_grpc_stream **ret)
{
    struct sbx_grpc_stream *st = calloc(1, sizeof(*st));
    grpc_op op;

    if (!st)
        return -ENOMEM;
    st->send_tag.fn = on_sent;
    st->close_tag.fn = on_closed;
    st->req = req;
    st->ops = ops;
    st->data = data;
    st->refs = 2; /* the caller's, the close watch's */
    st->tail = &st->head;
    pthread_mutex_init(&st->lock, NULL);
    *ret = st;
    /* Watched before anything is sent: once a call is answered the server may shut down, after
     * which no batch may begin. */
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &st->cancelled;
    if (sbx_grpc_start_batch(req, &op, 1, &st->close_tag) != GRPC_CALL_OK)
        on_closed(&st->close_tag, false);
    return 0;
}

/* Appends o, or refuses it (-EPIPE, -EALREADY) and frees it. A send that gRPC refuses to start
 * (the server is closed) breaks the stream and gives -EPIPE, with no sent callback: the caller
 * may hold a lock the callback takes. */
static int enqueue(struct sbx_grpc_stream *st, struct out *o)
{
    struct out *failed = NULL;
    int r = 0;

    pthread_mutex_lock(&st->lock);
    if (o->final && st->finishing)
        r = -EALREADY;
    else if (st->closed || st->broken || st->finishing)
        r = -EPIPE;
    if (r == 0) {
        st->finishing = o->final;
        *st->tail = o;
        st->tail = &o->next;
        if (!kick_locked(st, &failed))
            r = -EPIPE;
    }
    pthread_mutex_unlock(&st->lock);
    if (failed) {
        free_queue(failed);        /* o among them */
        sbx_grpc_stream_unref(st); /* the batch's */
    } else if (r < 0) {
        out_free(o);
    }
    return r;
}

int sbx_grpc_stream_send(struct sbx_grpc_stream *st, const ProtobufCMessage *m, uint32_t flags)
{
    struct out *o = calloc(1, sizeof(*o));

    if (!o)
        return -ENOMEM;
    o->bb = sbx_grpc_pack(m);
    o->flags = flags;
    return enqueue(st, o);
}

int sbx_grpc_stream_finish(struct sbx_grpc_stream *st, const ProtobufCMessage *m,
                           grpc_status_code code, const char *details)
{
    return sbx_grpc_stream_finish_trailers(st, m, code, details, NULL, 0);
}

int sbx_grpc_stream_finish_trailers(struct sbx_grpc_stream *st, const ProtobufCMessage *m,
                                    grpc_status_code code, const char *details,
                                    const struct sbx_grpc_trailer *t, size_t n)
{
    struct out *o = calloc(1, sizeof(*o));
    int r;

    assert(n <= SBX_GRPC_MAX_TRAILERS);
    if (!o) {
        grpc_call_cancel(st->req->call, NULL);
        return -ENOMEM;
    }
    o->final = true;
    o->code = code;
    o->details = grpc_slice_from_copied_string(details ? details : "");
    for (size_t i = 0; i < n; i++) {
        o->trailers[i].key = grpc_slice_from_copied_string(t[i].key);
        o->trailers[i].value = grpc_slice_from_copied_string(t[i].value);
    }
    o->n_trailers = n;
    if (m && code == GRPC_STATUS_OK)
        o->bb = sbx_grpc_pack(m);
    r = enqueue(st, o);
    if (r == 0)
        sbx_metrics_request(SBX_METRIC_GRPC, (int)code);
    return r;
}

bool sbx_grpc_stream_over(struct sbx_grpc_stream *st)
{
    bool over;

    pthread_mutex_lock(&st->lock);
    over = st->closed || st->broken;
    pthread_mutex_unlock(&st->lock);
    return over;
}

struct sbx_grpc_req *sbx_grpc_stream_req(struct sbx_grpc_stream *st)
{
    return st->req;
}
