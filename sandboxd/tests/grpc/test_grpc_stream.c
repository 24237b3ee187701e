/* sbx_grpc_stream against a real client over loopback (gRPC core's client API): messages queued
 * behind a send in flight arrive whole and in order; the end of a call racing a pending send
 * (a process that exits while its output is still going out) frees nothing early; a client that
 * cancels mid-send breaks the stream and stops further sends; a server shut down with calls in
 * flight ends them and releases each once. Run it under ASan to see the lifetimes. */
#define _GNU_SOURCE
#include <errno.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grpc_stream.h"
#include "process/v1/process.pb-c.h"
#include "tap.h"
#include "test_client.h"

enum mode { BURST, BIG_THEN_END, FLOOD, HOLD };

#define BURST_N    200
#define BIG_BYTES  (1 << 20)
#define FLOOD_N    64
#define FLOOD_SIZE (256 << 10)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static enum mode mode;
/* What the streams reported, under lock. */
static int sent_ok, sent_failed, finals, closed, closed_cancelled, released, handled;
static int sent_at_release;          /* sends reported when the stream was released */
static int queued;                   /* sends the handler queued (FLOOD) */
static struct sbx_grpc_stream *kept; /* FLOOD: the handler's reference, kept */
static int shutdowns;                /* the server's shutdown callback ran */

static void bump(int *counter)
{
    pthread_mutex_lock(&lock);
    (*counter)++;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

static void t_sent(void *data, bool okay, bool final)
{
    (void)data;
    bump(okay ? &sent_ok : &sent_failed);
    if (okay && final)
        bump(&finals);
}

static void t_closed(void *data, bool cancelled)
{
    (void)data;
    if (cancelled)
        bump(&closed_cancelled);
    bump(&closed);
}

static void t_release(void *data)
{
    free(data);
    pthread_mutex_lock(&lock);
    sent_at_release = sent_ok + sent_failed;
    pthread_mutex_unlock(&lock);
    bump(&released);
}

static const struct sbx_grpc_stream_ops t_ops = {
    .sent = t_sent, .closed = t_closed, .release = t_release};

/* Waits (10 s at most) until *counter reaches n; returns whether it did. */
static bool wait_count(const int *counter, int n)
{
    struct timespec until;
    bool reached;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&lock);
    while (*counter < n && pthread_cond_timedwait(&cond, &lock, &until) == 0)
        ;
    reached = *counter >= n;
    pthread_mutex_unlock(&lock);
    return reached;
}

static void reset(enum mode m)
{
    pthread_mutex_lock(&lock);
    mode = m;
    sent_ok = sent_failed = finals = closed = closed_cancelled = released = handled = queued = 0;
    sent_at_release = -1;
    kept = NULL;
    pthread_mutex_unlock(&lock);
}

/* A message of len bytes whose first four hold i. */
static int send_numbered(struct sbx_grpc_stream *st, uint32_t i, size_t len, bool final)
{
    Process__V1__StartResponse m = PROCESS__V1__START_RESPONSE__INIT;
    uint8_t *buf = calloc(1, len);
    int r;

    if (!buf)
        return -ENOMEM;
    memcpy(buf, &i, sizeof(i));
    memset(buf + sizeof(i), (int)(i & 0xff), len - sizeof(i));
    m.event_case = PROCESS__V1__START_RESPONSE__EVENT_STDOUT;
    m.stdout.data = buf;
    m.stdout.len = len;
    r = final ? sbx_grpc_stream_finish(st, &m.base, GRPC_STATUS_OK, NULL)
              : sbx_grpc_stream_send(st, &m.base, 0);
    free(buf);
    return r;
}

static void handler(struct sbx_grpc_req *req)
{
    struct sbx_grpc_stream *st = NULL;
    int n = 0;

    if (sbx_grpc_stream_new(req, &t_ops, malloc(1), &st) < 0) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "oom");
        return;
    }
    switch (mode) {
    case BURST: /* all queued at once, behind the first in flight */
        for (uint32_t i = 0; i < BURST_N; i++)
            (void)send_numbered(st, i, 64, false);
        (void)sbx_grpc_stream_finish(st, NULL, GRPC_STATUS_OK, NULL);
        break;
    case BIG_THEN_END: /* the end queued behind a send the client has not read yet */
        (void)send_numbered(st, 7, BIG_BYTES, false);
        (void)sbx_grpc_stream_finish(st, NULL, GRPC_STATUS_OK, "bye");
        break;
    case FLOOD: /* more than the transport's windows hold; the reference kept */
        for (uint32_t i = 0; i < FLOOD_N; i++)
            n += send_numbered(st, i, FLOOD_SIZE, false) == 0;
        pthread_mutex_lock(&lock);
        queued = n;
        kept = st;
        pthread_mutex_unlock(&lock);
        st = NULL;
        break;
    case HOLD: /* one message, no end: in flight until the server stops */
        (void)send_numbered(st, 1, 16, false);
        break;
    }
    sbx_grpc_stream_unref(st);
    bump(&handled);
}

/* A client call of /t.T/S reading the server's stream. */
struct client {
    struct test_client t;
    grpc_byte_buffer *msg;
    bool got_status;
    int tag_start, tag_status, tag_msg;
};

static bool client_call(struct client *c, int port)
{
    grpc_slice empty = grpc_empty_slice();
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&empty, 1);
    grpc_op ops[4];
    bool started;

    memset(c, 0, sizeof(*c));
    test_client_open(&c->t, port, "/t.T/S", 8 << 20);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->t.initial;
    started = grpc_call_start_batch(c->t.call, ops, 4, &c->tag_start, NULL) == GRPC_CALL_OK;
    grpc_byte_buffer_destroy(bb);
    memset(ops, 0, sizeof(ops));
    test_client_recv_status(&c->t, &ops[0]);
    return started &&
           grpc_call_start_batch(c->t.call, ops, 1, &c->tag_status, NULL) == GRPC_CALL_OK;
}

/* Waits for the event of tag (noting the status on the way); false on a timeout. */
static bool client_wait(struct client *c, void *tag)
{
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(
            c->t.cq,
            gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(10, GPR_TIMESPAN)),
            NULL);
        if (ev.type != GRPC_OP_COMPLETE)
            return false;
        if (ev.tag == &c->tag_status)
            c->got_status = true;
        if (ev.tag == tag)
            return true;
    }
}

/* The next message's number and length; false at the end of the stream. */
static bool client_read(struct client *c, uint32_t *num, size_t *len)
{
    grpc_byte_buffer_reader reader;
    Process__V1__StartResponse *m;
    grpc_slice s;
    grpc_op op;

    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->msg;
    c->msg = NULL;
    if (grpc_call_start_batch(c->t.call, &op, 1, &c->tag_msg, NULL) != GRPC_CALL_OK ||
        !client_wait(c, &c->tag_msg) || !c->msg)
        return false;
    grpc_byte_buffer_reader_init(&reader, c->msg);
    s = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    grpc_byte_buffer_destroy(c->msg);
    m = process__v1__start_response__unpack(NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    if (!m || m->stdout.len < sizeof(*num)) {
        process__v1__start_response__free_unpacked(m, NULL);
        return false;
    }
    memcpy(num, m->stdout.data, sizeof(*num));
    *len = m->stdout.len;
    for (size_t i = sizeof(*num); i < m->stdout.len; i++)
        if (m->stdout.data[i] != (*num & 0xff))
            *len = 0; /* corrupted */
    process__v1__start_response__free_unpacked(m, NULL);
    return true;
}

static bool client_status(struct client *c)
{
    return c->got_status || client_wait(c, &c->tag_status);
}

static void test_queued_in_order(int port)
{
    struct client c;
    uint32_t num, want = 0;
    size_t len;
    bool in_order = true;

    reset(BURST);
    ok(client_call(&c, port), "burst: call started");
    while (client_read(&c, &num, &len))
        in_order &= num == want++ && len == 64;
    ok(in_order && want == BURST_N, "burst: %u of %d messages, in order", want, BURST_N);
    ok(client_status(&c) && c.t.status == GRPC_STATUS_OK, "burst: status OK");
    ok(wait_count(&released, 1), "burst: released");
    ok(sent_ok == BURST_N + 1 && sent_failed == 0 && finals == 1,
       "burst: every send reported once (%d ok, %d failed, %d final)", sent_ok, sent_failed,
       finals);
    ok(closed == 1 && closed_cancelled == 0 && released == 1, "burst: closed once, not cancelled");
    test_client_free(&c.t);
}

static void test_end_racing_pending_send(int port)
{
    struct client c;
    uint32_t num = 0;
    size_t len = 0;
    bool got;

    reset(BIG_THEN_END);
    ok(client_call(&c, port), "end behind a pending send: call started");
    /* The handler queues the end behind the big send and drops its reference before the client
     * reads: the stream must outlive the handler until both sends are done. */
    ok(wait_count(&handled, 1), "the handler returned");
    usleep(100 * 1000);
    got = client_read(&c, &num, &len);
    ok(got && num == 7 && len == BIG_BYTES, "the pending message arrived whole (%zu bytes)", len);
    ok(!client_read(&c, &num, &len), "then the end of the stream");
    ok(client_status(&c) && c.t.status == GRPC_STATUS_OK, "status OK");
    got = wait_count(&released, 1);
    ok(got && released == 1, "released once");
    ok(sent_at_release == 2 && finals == 1, "released after both sends completed (%d)",
       sent_at_release);
    test_client_free(&c.t);
}

static void test_cancel_mid_send(int port)
{
    struct client c;
    uint32_t num = 0;
    size_t len = 0;
    struct sbx_grpc_stream *st;
    bool got;

    reset(FLOOD);
    ok(client_call(&c, port), "cancel mid-send: call started");
    ok(client_read(&c, &num, &len) && num == 0 && len == FLOOD_SIZE, "first message read");
    got = wait_count(&handled, 1);
    ok(got && queued == FLOOD_N, "all %d sends were queued", queued);
    grpc_call_cancel(c.t.call, NULL);
    got = wait_count(&closed, 1);
    ok(got && closed_cancelled == 1, "the stream saw the cancel");
    pthread_mutex_lock(&lock);
    st = kept;
    pthread_mutex_unlock(&lock);
    ok(sbx_grpc_stream_over(st), "the stream is over");
    ok(send_numbered(st, 99, 16, false) == -EPIPE, "a send after the cancel is refused");
    ok(send_numbered(st, 99, 16, true) == -EPIPE, "and so is the end");
    ok(released == 0, "still held by the handler's reference");
    sbx_grpc_stream_unref(st);
    got = wait_count(&released, 1);
    ok(got && released == 1, "released once its last reference went");
    ok(sent_failed == 1, "the send in flight failed, reported once");
    ok(sent_at_release == sent_ok + sent_failed, "every report came before the release (%d)",
       sent_at_release);
    ok(sent_ok + sent_failed < FLOOD_N, "the queue behind the failed send was dropped (%d + %d)",
       sent_ok, sent_failed);
    ok(client_status(&c) && c.t.status == GRPC_STATUS_CANCELLED, "the client sees CANCELLED");
    test_client_free(&c.t);
}

static void on_shut_down(void *arg)
{
    (void)arg;
    bump(&shutdowns);
}

static void test_shutdown_with_calls_in_flight(struct sbx_grpc *s, int port)
{
    struct client c[3];
    uint32_t num;
    size_t len;
    bool all = true;

    reset(HOLD);
    for (int i = 0; i < 3; i++)
        all &= client_call(&c[i], port) && client_read(&c[i], &num, &len) && num == 1;
    ok(all, "three calls in flight, each with a message out");
    ok(released == 0 && closed == 0, "none over yet");
    sbx_grpc_shutdown(s, on_shut_down, NULL);
    sbx_grpc_cancel_all(s);
    all = wait_count(&released, 3);
    ok(all && released == 3, "each released once (%d)", released);
    ok(closed == 3 && closed_cancelled == 3, "each closed once, cancelled (%d, %d)", closed,
       closed_cancelled);
    ok(wait_count(&shutdowns, 1), "the shutdown finished");
    for (int i = 0; i < 3; i++) {
        ok(client_status(&c[i]) && c[i].t.status != GRPC_STATUS_OK, "client %d ended (status %d)",
           i, (int)c[i].t.status);
        test_client_free(&c[i].t);
    }
}

int main(void)
{
    struct sbx_grpc_opts o = {.max_recv_bytes = 1 << 20, .max_streams = 10, .threads = 2};
    const struct sbx_grpc_method m = {"/t.T/S", false, handler, NULL, 4};
    struct sbx_error e = {0};
    struct sbx_grpc *s = NULL;
    int port;

    grpc_init();
    ok(sbx_grpc_new(&s, &o, &e) == 0, "server created");
    ok(sbx_grpc_register(s, &m, 1, &e) == 0, "method registered");
    port = sbx_grpc_listen(s, "127.0.0.1:0", &e);
    ok(port > 0, "listening on port %d", port);
    ok(sbx_grpc_start(s, &e) == 0, "started");
    test_queued_in_order(port);
    test_end_racing_pending_send(port);
    test_cancel_mid_send(port);
    test_shutdown_with_calls_in_flight(s, port);
    sbx_grpc_close(s);
    sbx_grpc_free(s);
    grpc_shutdown();
    return done_testing();
}
