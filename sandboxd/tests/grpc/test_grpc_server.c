/* The gRPC server's life cycle against a real client over loopback (gRPC core's client API). */
#define _GNU_SOURCE
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "grpc_server.h"
#include "tap.h"
#include "test_client.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static struct sbx_grpc_req *held; /* the call the handler kept, unanswered */
static bool held_set, shut_down;

static void on_shut_down(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    shut_down = true;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

/* Waits (5 s at most) until *flag is set; returns it. */
static bool wait_for(const volatile bool *flag)
{
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    pthread_mutex_lock(&lock);
    while (!*flag && pthread_cond_timedwait(&cond, &lock, &until) == 0)
        ;
    pthread_mutex_unlock(&lock);
    return *flag;
}

/* The handler: keeps the call, unanswered. */
static void keep(struct sbx_grpc_req *req)
{
    pthread_mutex_lock(&lock);
    held = req;
    held_set = true;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
}

/* A client call of /t.T/Keep: sends an empty request and waits for the status. */
static bool client_call(struct test_client *c, int port)
{
    grpc_slice empty = grpc_empty_slice();
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&empty, 1);
    grpc_op ops[5];
    grpc_call_error e;

    test_client_open(c, port, "/t.T/Keep", 0);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->initial;
    test_client_recv_status(c, &ops[4]);
    e = grpc_call_start_batch(c->call, ops, 5, c, NULL);
    grpc_byte_buffer_destroy(bb);
    return e == GRPC_CALL_OK;
}

/* Waits for the client's status; true when it came. */
static bool client_done(struct test_client *c)
{
    grpc_event ev = grpc_completion_queue_next(
        c->cq, gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(10, GPR_TIMESPAN)),
        NULL);

    return ev.type == GRPC_OP_COMPLETE && ev.tag == c;
}

static struct sbx_grpc_tag never = {0};

/* A handler still holding a call when the server closes: its late batch must fail (the caller
 * then cleans up), not reach gRPC, which aborts on a completion queue that is shut down. */
static void test_batch_after_close_fails(void)
{
    struct sbx_grpc_opts o = {.max_recv_bytes = 1 << 20, .max_streams = 10, .threads = 2};
    const struct sbx_grpc_method m = {"/t.T/Keep", false, keep, NULL, 1};
    struct sbx_error e = {0};
    struct sbx_grpc *s = NULL;
    struct test_client c;
    grpc_slice details = grpc_slice_from_static_string("late");
    grpc_op ops[2];
    int port;

    memset(&c, 0, sizeof(c));
    ok(sbx_grpc_new(&s, &o, &e) == 0, "server created");
    ok(sbx_grpc_register(s, &m, 1, &e) == 0, "method registered");
    port = sbx_grpc_listen(s, "127.0.0.1:0", &e);
    ok(port > 0, "listening on port %d", port);
    ok(sbx_grpc_start(s, &e) == 0, "started");
    ok(client_call(&c, port), "client call started");
    ok(wait_for(&held_set), "the handler kept the call");

    sbx_grpc_shutdown(s, on_shut_down, NULL);
    sbx_grpc_cancel_all(s);
    ok(wait_for(&shut_down), "shutdown finished with the call held");
    sbx_grpc_close(s);

    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[1].data.send_status_from_server.status = GRPC_STATUS_OK;
    ops[1].data.send_status_from_server.status_details = &details;
    ok(sbx_grpc_start_batch(held, ops, 2, &never) == GRPC_CALL_ERROR,
       "a batch begun after the close fails");

    ok(client_done(&c), "the client got its status");
    ok(c.status != GRPC_STATUS_OK, "it ended unanswered (status %d)", (int)c.status);
    sbx_grpc_req_free(held);
    test_client_free(&c);
    sbx_grpc_free(s);
}

int main(void)
{
    grpc_init();
    test_batch_after_close_fails();
    grpc_shutdown();
    return done_testing();
}
