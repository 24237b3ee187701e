/* One Connect call of the E2B port (e2b_call.c): the object its request, its stream response
 * and whoever answers it later share, and libmicrohttpd's side of it. The route (e2b_rpc.c)
 * fills it from the request and hands it to the handler. */
#pragma once

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "connect.h"
#include "e2b_rpc.h"
#include "http_internal.h"
#include "loop.h"

#define SBX_E2B_MAX_KEEPALIVE_S (24 * 3600)

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
    bool too_large;              /* the body passed the limit */
    bool dispatched;             /* the body was read and the call begun */
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

/* A call for the request (its state, dropped when the request is over); NULL without memory. */
struct sbx_e2b_call *sbx_e2b_call_new(struct hctx *hc);

/* The request message of c's method from bytes of c's codec; -EINVAL with the reason in msg. */
int sbx_e2b_call_decode(const struct sbx_e2b_call *c, const uint8_t *p, size_t n,
                        ProtobufCMessage **ret, char *msg, size_t len);

/* Arms a stream's keepalive and deadline timer (from keepalive_ms and deadline_ms). */
void sbx_e2b_call_arm(struct sbx_e2b_call *c);

/* Queues the call's answer: a stream's response (its messages as they come), or a unary
 * call's, once there (the connection sleeps until then). */
enum MHD_Result sbx_e2b_call_respond(struct hctx *hc, struct sbx_e2b_call *c);
/* Ends the call with an error before its handler ran, and answers. */
enum MHD_Result sbx_e2b_call_respond_error(struct hctx *hc, struct sbx_e2b_call *c, int code,
                                           const char *msg);
