/* The client side of the gRPC adapter's unit tests: one call on a channel of its own to the
 * server under test on loopback, through gRPC core's client API. */
#pragma once

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <string.h>

struct test_client {
    grpc_channel *ch;
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_metadata_array initial, trailing;
    grpc_status_code status;
    grpc_slice details;
};

/* Opens a channel to 127.0.0.1:port and creates a call of method with a 30 s deadline;
 * max_recv: the largest message the client takes (0: gRPC's default). */
static inline void test_client_open(struct test_client *c, int port, const char *method,
                                    int max_recv)
{
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    grpc_arg arg = {.type = GRPC_ARG_INTEGER,
                    .key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                    .value.integer = max_recv};
    grpc_channel_args args = {.num_args = max_recv ? 1 : 0, .args = &arg};
    char target[64];

    memset(c, 0, sizeof(*c));
    snprintf(target, sizeof(target), "127.0.0.1:%d", port);
    c->ch = grpc_channel_create(target, creds, &args);
    grpc_channel_credentials_release(creds);
    c->cq = grpc_completion_queue_create_for_next(NULL);
    c->call = grpc_channel_create_call(
        c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq, grpc_slice_from_static_string(method), NULL,
        gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(30, GPR_TIMESPAN)), NULL);
    grpc_metadata_array_init(&c->initial);
    grpc_metadata_array_init(&c->trailing);
}

/* Fills op as the call's status receiver. */
static inline void test_client_recv_status(struct test_client *c, grpc_op *op)
{
    op->op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op->data.recv_status_on_client.trailing_metadata = &c->trailing;
    op->data.recv_status_on_client.status = &c->status;
    op->data.recv_status_on_client.status_details = &c->details;
}

static inline void test_client_free(struct test_client *c)
{
    grpc_call_unref(c->call);
    grpc_slice_unref(c->details);
    grpc_metadata_array_destroy(&c->initial);
    grpc_metadata_array_destroy(&c->trailing);
    grpc_channel_destroy(c->ch);
    grpc_completion_queue_shutdown(c->cq);
    while (grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(c->cq);
}
