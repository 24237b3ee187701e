#include "grpc_health.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "grpc_stream.h"
#include "grpc/health/v1/health.pb-c.h"

#define STATUS(x) GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__##x

/* The services whose health we report; "" is the server as a whole. */
static const char *const services[] = {"", "process.v1.ProcessService", "sandboxd.v1.Processes"};

struct watch {
    struct sbx_grpc_stream *st;
    struct sbx_health *h;
    struct watch *next, **pprev; /* in h->watches while the call lives */
    /* Under h->lock: */
    bool known;     /* a service we serve (else SERVICE_UNKNOWN, for good) */
    bool in_flight; /* one status at a time: the latest is sent when the last is out */
    bool ending;    /* the status is to be sent */
    bool ended;
    int sent; /* last status sent, -1 before the first */
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
        sbx_grpc_unpack_req(req, &grpc__health__v1__health_check_request__descriptor);
    Grpc__Health__V1__HealthCheckRequest *r = (Grpc__Health__V1__HealthCheckRequest *)m;
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;

    if (!m)
        return;
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

/* Sends what the watcher has not heard yet: the current status, or the end of the stream.
 * Called with h->lock held. */
static void watch_pump_locked(struct watch *w)
{
    Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    int status = status_locked(w->h, w->known), r;

    if (w->in_flight || w->ended)
        return;
    if (w->ending) {
        w->ended = true;
        (void)sbx_grpc_stream_finish(w->st, NULL, GRPC_STATUS_UNAVAILABLE,
                                     "sandboxd is shutting down");
        return;
    }
    if (status == w->sent)
        return;
    resp.status = status;
    w->sent = status;
    w->in_flight = true;
    r = sbx_grpc_stream_send(w->st, &resp.base, 0);
    if (r < 0) {
        w->in_flight = false;
        w->ended = true;
    }
}

static void watch_sent(void *data, bool ok, bool final)
{
    struct watch *w = data;
    struct sbx_health *h = w->h;

    (void) final;
    pthread_mutex_lock(&h->lock);
    w->in_flight = false;
    if (!ok)
        w->ended = true;
    watch_pump_locked(w);
    pthread_mutex_unlock(&h->lock);
}

static void watch_closed(void *data, bool cancelled)
{
    struct watch *w = data;
    struct sbx_health *h = w->h;

    (void)cancelled;
    pthread_mutex_lock(&h->lock);
    if (w->pprev) {
        *w->pprev = w->next;
        if (w->next)
            w->next->pprev = w->pprev;
    }
    w->ended = true;
    pthread_mutex_unlock(&h->lock);
}

static const struct sbx_grpc_stream_ops watch_ops = {
    .sent = watch_sent, .closed = watch_closed, .release = free};

static void handle_watch(struct sbx_grpc_req *req)
{
    struct sbx_health *h = req->method_data;
    _cleanup_pb_ ProtobufCMessage *m =
        sbx_grpc_unpack_req(req, &grpc__health__v1__health_check_request__descriptor);
    Grpc__Health__V1__HealthCheckRequest *r = (Grpc__Health__V1__HealthCheckRequest *)m;
    struct watch *w;

    if (!m)
        return;
    w = calloc(1, sizeof(*w));
    if (!w) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    w->h = h;
    w->known = known_service(r->service);
    w->sent = -1;
    if (sbx_grpc_stream_new(req, &watch_ops, w, &w->st) < 0) {
        free(w);
        sbx_grpc_reply(req, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    /* Listed unless its close came first (then it is over: ended, never listed). */
    pthread_mutex_lock(&h->lock);
    if (!w->ended) {
        w->next = h->watches;
        if (w->next)
            w->next->pprev = &w->next;
        w->pprev = &h->watches;
        h->watches = w;
        w->ending = h->stopping;
        watch_pump_locked(w);
    }
    pthread_mutex_unlock(&h->lock);
    sbx_grpc_stream_unref(w->st); /* ours */
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
