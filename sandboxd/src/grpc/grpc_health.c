#include "grpc_health.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "grpc/health/v1/health.pb-c.h"

#define STATUS(x) GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__##x

/* The services whose health we report; "" is the server as a whole. */
static const char *const services[] = {"", "process.v1.ProcessService", "sandboxd.v1.Processes"};

struct watch {
    struct sbx_grpc_tag send_tag, close_tag;
    struct sbx_health *h;
    struct sbx_grpc_req *req;
    struct watch *next, **pprev; /* in h->watches while the call lives */
    int refs;
    bool known;     /* a service we serve (else SERVICE_UNKNOWN, for good) */
    bool in_flight; /* one message at a time */
    bool ending;    /* the status is to be sent */
    bool ended;
    int sent; /* last status sent, -1 before the first */
    int cancelled;
    grpc_byte_buffer *bb;
    grpc_slice details;
};

struct sbx_health {
    pthread_mutex_t lock;
    bool serving;
    bool stopping;
    struct watch *watches;
};

int sbx_health_new(struct sbx_health **ret, struct sbx_error *err)
{
    struct sbx_health *h = calloc(1, sizeof(*h));

    if (!h)
        return sbx_error_set(err, ENOMEM, "allocate health");
    pthread_mutex_init(&h->lock, NULL);
    h->serving = true;
    *ret = h;
    return 0;
}

void sbx_health_free(struct sbx_health *h)
{
    if (!h)
        return;
    pthread_mutex_destroy(&h->lock);
    free(h);
}

static bool known_service(const char *name)
{
    for (size_t i = 0; i < SBX_ARRAY_SIZE(services); i++)
        if (strcmp(name, services[i]) == 0)
            return true;
    return false;
}

static int status_locked(struct sbx_health *h, bool known)
{
    if (!known)
        return STATUS(SERVICE_UNKNOWN);
    return h->serving ? STATUS(SERVING) : STATUS(NOT_SERVING);
}

static void handle_check(struct sbx_grpc_req *req)
{
    struct sbx_health *h = req->method_data;
    _cleanup_pb_ ProtobufCMessage *m =
        sbx_grpc_unpack(req->payload, &grpc__health__v1__health_check_request__descriptor);
    Grpc__Health__V1__HealthCheckRequest *r = (Grpc__Health__V1__HealthCheckRequest *)m;
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;

    if (!m) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_INVALID_ARGUMENT, "malformed HealthCheckRequest");
        return;
    }
    if (!known_service(r->service)) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_NOT_FOUND, "unknown service");
        return;
    }
    pthread_mutex_lock(&h->lock);
    resp.status = status_locked(h, true);
    pthread_mutex_unlock(&h->lock);
    sbx_grpc_reply(req, &resp.base, GRPC_STATUS_OK, NULL);
}

static void handle_list(struct sbx_grpc_req *req)
{
    struct sbx_health *h = req->method_data;
    Grpc__Health__V1__HealthListResponse resp = GRPC__HEALTH__V1__HEALTH_LIST_RESPONSE__INIT;
    Grpc__Health__V1__HealthListResponse__StatusesEntry entries[SBX_ARRAY_SIZE(services)];
    Grpc__Health__V1__HealthListResponse__StatusesEntry *ptrs[SBX_ARRAY_SIZE(services)];
    Grpc__Health__V1__HealthCheckResponse st = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;

    pthread_mutex_lock(&h->lock);
    st.status = status_locked(h, true);
    pthread_mutex_unlock(&h->lock);
    for (size_t i = 0; i < SBX_ARRAY_SIZE(services); i++) {
        grpc__health__v1__health_list_response__statuses_entry__init(&entries[i]);
        entries[i].key = (char *)services[i];
        entries[i].value = &st;
        ptrs[i] = &entries[i];
    }
    resp.n_statuses = SBX_ARRAY_SIZE(services);
    resp.statuses = ptrs;
    sbx_grpc_reply(req, &resp.base, GRPC_STATUS_OK, NULL);
}

static void watch_unref(struct watch *w)
{
    if (__atomic_sub_fetch(&w->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    sbx_grpc_req_free(w->req);
    free(w);
}

/* Sends what the watcher has not heard yet: the current status, or the end of the stream.
 * Called with h->lock held. */
static void watch_pump_locked(struct watch *w)
{
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    grpc_op ops[2];
    size_t n = 0;
    int status = status_locked(w->h, w->known);

    if (w->in_flight || w->ended)
        return;
    memset(ops, 0, sizeof(ops));
    if (w->sent < 0)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (w->ending) {
        w->details = grpc_slice_from_static_string("sandboxd is shutting down");
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = GRPC_STATUS_UNAVAILABLE;
        ops[n++].data.send_status_from_server.status_details = &w->details;
        w->ended = true;
    } else {
        if (status == w->sent)
            return;
        resp.status = status;
        w->bb = sbx_grpc_pack(&resp.base);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = w->bb;
        w->sent = status;
    }
    w->in_flight = true;
    __atomic_add_fetch(&w->refs, 1, __ATOMIC_RELAXED);
    if (sbx_grpc_start_batch(w->req, ops, n, &w->send_tag) != GRPC_CALL_OK) {
        w->in_flight = false;
        w->ended = true;
        watch_unref(w);
    }
}

static void watch_sent(struct sbx_grpc_tag *tag, bool ok)
{
    struct watch *w = (struct watch *)((char *)tag - offsetof(struct watch, send_tag));
    struct sbx_health *h = w->h;

    pthread_mutex_lock(&h->lock);
    if (w->bb)
        grpc_byte_buffer_destroy(w->bb);
    w->bb = NULL;
    w->in_flight = false;
    if (!ok)
        w->ended = true;
    watch_pump_locked(w);
    pthread_mutex_unlock(&h->lock);
    watch_unref(w);
}

static void watch_closed(struct sbx_grpc_tag *tag, bool ok)
{
    struct watch *w = (struct watch *)((char *)tag - offsetof(struct watch, close_tag));
    struct sbx_health *h = w->h;

    (void)ok;
    pthread_mutex_lock(&h->lock);
    *w->pprev = w->next;
    if (w->next)
        w->next->pprev = w->pprev;
    w->ended = true;
    pthread_mutex_unlock(&h->lock);
    watch_unref(w);
}

static void handle_watch(struct sbx_grpc_req *req)
{
    struct sbx_health *h = req->method_data;
    _cleanup_pb_ ProtobufCMessage *m =
        sbx_grpc_unpack(req->payload, &grpc__health__v1__health_check_request__descriptor);
    Grpc__Health__V1__HealthCheckRequest *r = (Grpc__Health__V1__HealthCheckRequest *)m;
    struct watch *w;
    grpc_op op;

    if (!m) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_INVALID_ARGUMENT, "malformed HealthCheckRequest");
        return;
    }
    w = calloc(1, sizeof(*w));
    if (!w) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    w->send_tag.fn = watch_sent;
    w->close_tag.fn = watch_closed;
    w->h = h;
    w->req = req;
    w->known = known_service(r->service);
    w->sent = -1;
    w->refs = 1; /* the close tag's */
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &w->cancelled;
    pthread_mutex_lock(&h->lock);
    w->next = h->watches;
    if (w->next)
        w->next->pprev = &w->next;
    w->pprev = &h->watches;
    h->watches = w;
    w->ending = h->stopping;
    if (sbx_grpc_start_batch(req, &op, 1, &w->close_tag) != GRPC_CALL_OK) {
        pthread_mutex_unlock(&h->lock);
        watch_closed(&w->close_tag, false);
        return;
    }
    watch_pump_locked(w);
    pthread_mutex_unlock(&h->lock);
}

void sbx_health_set_serving(struct sbx_health *h, bool serving)
{
    pthread_mutex_lock(&h->lock);
    h->serving = serving;
    for (struct watch *w = h->watches; w; w = w->next)
        watch_pump_locked(w);
    pthread_mutex_unlock(&h->lock);
}

void sbx_health_end_watches(struct sbx_health *h)
{
    pthread_mutex_lock(&h->lock);
    h->stopping = true;
    for (struct watch *w = h->watches; w; w = w->next) {
        w->ending = true;
        watch_pump_locked(w);
    }
    pthread_mutex_unlock(&h->lock);
}

int sbx_grpc_health_register(struct sbx_grpc *srv, struct sbx_health *h, struct sbx_error *err)
{
    const struct sbx_grpc_method methods[] = {
        {"/grpc.health.v1.Health/Check", false, handle_check, h, 4},
        {"/grpc.health.v1.Health/List", false, handle_list, h, 1},
        {"/grpc.health.v1.Health/Watch", false, handle_watch, h, 2},
    };

    return sbx_grpc_register(srv, methods, SBX_ARRAY_SIZE(methods), err);
}
