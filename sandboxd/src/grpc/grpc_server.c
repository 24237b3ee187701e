#include "grpc_server.h"

#include <errno.h>
#include <inttypes.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auth.h"
#include "cleanup.h"
#include "log.h"
#include "utf8.h"
#include "metrics.h"
#include "pb_check.h"

#define MAX_METHODS 32
#define MAX_THREADS 8

/* Waits for one call of one method; re-armed after every accepted call. */
struct acceptor {
    struct sbx_grpc_tag tag;
    struct sbx_grpc *srv;
    const struct sbx_grpc_method *m;
    void *handle; /* registered method */
    struct sbx_grpc_req *req;
};

/* Waits for one call of a method nobody registered. */
struct fallback {
    struct sbx_grpc_tag tag;
    struct sbx_grpc *srv;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    int cancelled;
    bool answering;
};

struct sbx_grpc {
    grpc_server *server;
    grpc_completion_queue *cq;
    struct sbx_grpc_opts opts;
    struct sbx_grpc_method methods[MAX_METHODS];
    size_t n_methods;
    struct acceptor *acceptors;
    size_t n_acceptors;
    pthread_t threads[MAX_THREADS];
    int n_threads;
    bool started;
    bool stopping; /* no re-arming of acceptors */
    /* Once the completion queue is shut down nothing may begin on it (gRPC aborts): every
     * batch and request takes cq_lock to read, sbx_grpc_close to set cq_closed. */
    pthread_rwlock_t cq_lock;
    bool cq_closed;
    struct sbx_grpc_tag shutdown_tag;
    void (*on_shut_down)(void *arg);
    void *on_shut_down_arg;
};

grpc_status_code sbx_grpc_status(int r)
{
    switch (-r) {
    case 0:
        return GRPC_STATUS_OK;
    case ENOENT:
    case ESRCH:
        return GRPC_STATUS_NOT_FOUND;
    case EACCES:
    case EPERM:
    case EXDEV:
        return GRPC_STATUS_PERMISSION_DENIED;
    case EINVAL:
    case ENAMETOOLONG:
    case E2BIG:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case ENOTTY:
    case EPIPE:
    case ENOTDIR:
    case EOPNOTSUPP:
        return GRPC_STATUS_FAILED_PRECONDITION;
    case EAGAIN:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case EMSGSIZE:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case ETIMEDOUT:
        return GRPC_STATUS_DEADLINE_EXCEEDED;
    case ECANCELED:
        return GRPC_STATUS_CANCELLED;
    case ENOSYS:
        return GRPC_STATUS_UNIMPLEMENTED;
    case ESHUTDOWN:
        return GRPC_STATUS_UNAVAILABLE;
    default:
        return GRPC_STATUS_INTERNAL;
    }
}

int sbx_grpc_decode(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d,
                    ProtobufCMessage **ret, struct sbx_error *err)
{
    grpc_byte_buffer_reader reader;
    ProtobufCMessage *m = NULL;
    char name[128];
    grpc_slice s;
    bool ok;
    int nul = 0;

    if (!bb || !grpc_byte_buffer_reader_init(&reader, bb))
        return sbx_error_set(err, EINVAL, "malformed %s", d->short_name);
    s = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    m = protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    ok = m && sbx_pb_wellformed(m);
    if (ok)
        nul = sbx_pb_find_nul(d, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s), name, sizeof(name));
    grpc_slice_unref(s);
    if (!ok || nul != 0) {
        if (m)
            protobuf_c_message_free_unpacked(m, NULL);
        if (nul > 0)
            return sbx_error_set(err, EINVAL, "%s contains a NUL byte", name);
        return sbx_error_set(err, EINVAL, "malformed %s", d->short_name);
    }
    *ret = m;
    return 0;
}

ProtobufCMessage *sbx_grpc_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d)
{
    ProtobufCMessage *m = NULL;

    (void)sbx_grpc_decode(bb, d, &m, NULL);
    return m;
}

ProtobufCMessage *sbx_grpc_unpack_req(struct sbx_grpc_req *req, const ProtobufCMessageDescriptor *d)
{
    struct sbx_error e = {0};
    ProtobufCMessage *m = NULL;

    if (sbx_grpc_decode(req->payload, d, &m, &e) < 0) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_INVALID_ARGUMENT, e.msg);
        return NULL;
    }
    return m;
}

grpc_byte_buffer *sbx_grpc_pack(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    grpc_slice s = grpc_slice_malloc(n);
    grpc_byte_buffer *bb;

    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
    bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

void sbx_grpc_req_free(struct sbx_grpc_req *req)
{
    if (!req)
        return;
    if (req->payload)
        grpc_byte_buffer_destroy(req->payload);
    grpc_metadata_array_destroy(&req->md);
    if (req->call)
        grpc_call_unref(req->call);
    free(req);
}

/* True, holding the gate, while the completion queue takes new work. */
static bool gate_enter(struct sbx_grpc *s)
{
    pthread_rwlock_rdlock(&s->cq_lock);
    if (!s->cq_closed)
        return true;
    pthread_rwlock_unlock(&s->cq_lock);
    return false;
}

static void gate_leave(struct sbx_grpc *s)
{
    pthread_rwlock_unlock(&s->cq_lock);
}

/* grpc_call_start_batch, or GRPC_CALL_ERROR once the completion queue is closed. */
static grpc_call_error start_on(struct sbx_grpc *s, grpc_call *call, const grpc_op *ops, size_t n,
                                void *tag)
{
    grpc_call_error e = GRPC_CALL_ERROR;

    if (gate_enter(s)) {
        e = grpc_call_start_batch(call, ops, n, tag, NULL);
        gate_leave(s);
    }
    return e;
}

grpc_call_error sbx_grpc_start_batch(struct sbx_grpc_req *req, const grpc_op *ops, size_t n,
                                     struct sbx_grpc_tag *tag)
{
    return start_on(req->srv, req->call, ops, n, tag);
}

/* A unary reply in flight. */
struct reply {
    struct sbx_grpc_tag tag;
    struct sbx_grpc_req *req;
    grpc_byte_buffer *bb;
    grpc_slice details;
    int cancelled;
};

static void reply_done(struct sbx_grpc_tag *tag, bool ok)
{
    struct reply *r = (struct reply *)tag;

    (void)ok;
    if (r->bb)
        grpc_byte_buffer_destroy(r->bb);
    grpc_slice_unref(r->details);
    sbx_grpc_req_free(r->req);
    free(r);
}

static void send_reply(struct sbx_grpc_req *req, const ProtobufCMessage *reply,
                       grpc_status_code code, const char *details, bool watch_close)
{
    struct reply *r = calloc(1, sizeof(*r));
    grpc_op ops[4];
    size_t n = 0;

    if (!r) {
        grpc_call_cancel(req->call, NULL);
        sbx_grpc_req_free(req);
        return;
    }
    sbx_metrics_request(SBX_METRIC_GRPC, (int)code);
    r->tag.fn = reply_done;
    r->req = req;
    r->details = grpc_slice_from_copied_string(details ? details : "");
    memset(ops, 0, sizeof(ops));
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (code == GRPC_STATUS_OK && reply) {
        r->bb = sbx_grpc_pack(reply);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = r->bb;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n++].data.send_status_from_server.status_details = &r->details;
    if (watch_close) {
        ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops[n++].data.recv_close_on_server.cancelled = &r->cancelled;
    }
    if (sbx_grpc_start_batch(req, ops, n, &r->tag) != GRPC_CALL_OK)
        reply_done(&r->tag, false);
}

void sbx_grpc_reply(struct sbx_grpc_req *req, const ProtobufCMessage *m, grpc_status_code code,
                    const char *details)
{
    send_reply(req, m, code, details, true);
}

void sbx_grpc_reply_watched(struct sbx_grpc_req *req, const ProtobufCMessage *m,
                            grpc_status_code code, const char *details)
{
    send_reply(req, m, code, details, false);
}

/* Services anyone may call when a token is set: kubelet's gRPC probes send no credentials, and
 * reflection serves only the descriptors of the public .proto files, so `grpcurl list` and
 * `describe` work before a token is at hand. */
static const char *const open_prefixes[] = {
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1.ServerReflection/",
    "/grpc.reflection.v1alpha.ServerReflection/",
};

static bool slice_is(grpc_slice s, const char *str)
{
    size_t n = strlen(str);
    return GRPC_SLICE_LENGTH(s) == n && memcmp(GRPC_SLICE_START_PTR(s), str, n) == 0;
}

/* The verdict on a call's initial metadata: one "authorization" entry with the token. */
static enum sbx_auth_verdict check_metadata(const struct sbx_auth *auth,
                                            const grpc_metadata_array *md)
{
    const grpc_slice *value = NULL;

    for (size_t i = 0; i < md->count; i++) {
        if (!slice_is(md->metadata[i].key, "authorization"))
            continue;
        if (value)
            return SBX_AUTH_MALFORMED; /* which one would count? */
        value = &md->metadata[i].value;
    }
    if (!value)
        return SBX_AUTH_MISSING;
    return sbx_auth_check(auth, (const char *)GRPC_SLICE_START_PTR(*value),
                          GRPC_SLICE_LENGTH(*value));
}

/* True when the call may go on; logs a refusal with the method and peer, never the token. */
static bool call_authenticated(struct sbx_grpc *s, grpc_call *call, const char *method,
                               const grpc_metadata_array *md, enum sbx_auth_verdict *ret)
{
    enum sbx_auth_verdict v = SBX_AUTH_OK;
    uint64_t suppressed = 0;
    char more[64] = "";
    char *peer;

    if (!s->opts.auth)
        return true;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(open_prefixes); i++)
        if (method && strncmp(method, open_prefixes[i], strlen(open_prefixes[i])) == 0)
            return true;
    v = check_metadata(s->opts.auth, md);
    *ret = v;
    if (v == SBX_AUTH_OK)
        return true;
    if (!sbx_auth_log_allowed(s->opts.auth, (uint64_t)time(NULL), &suppressed))
        return false;
    if (suppressed)
        snprintf(more, sizeof(more), " (and %" PRIu64 " not logged before)", suppressed);
    peer = grpc_call_get_peer(call);
    log_info("grpc: unauthenticated call of %s from %s: %s%s",
             method ? method : "an unknown method", peer ? peer : "?", sbx_auth_verdict_message(v),
             more);
    gpr_free(peer);
    return false;
}

static void acceptor_arm(struct acceptor *a);

static void acceptor_done(struct sbx_grpc_tag *tag, bool ok)
{
    struct acceptor *a = (struct acceptor *)tag;
    struct sbx_grpc_req *req = a->req;

    a->req = NULL;
    if (!ok) {
        sbx_grpc_req_free(req);
        return; /* shutting down */
    }
    acceptor_arm(a);
    req->method_data = a->m->data;
    {
        enum sbx_auth_verdict v = SBX_AUTH_OK;
        if (!call_authenticated(a->srv, req->call, a->m->path, &req->md, &v)) {
            sbx_grpc_reply(req, NULL, GRPC_STATUS_UNAUTHENTICATED, sbx_auth_verdict_message(v));
            return;
        }
    }
    a->m->handler(req);
}

static void acceptor_arm(struct acceptor *a)
{
    struct sbx_grpc_req *req;
    grpc_call_error e;

    if (__atomic_load_n(&a->srv->stopping, __ATOMIC_ACQUIRE))
        return;
    req = calloc(1, sizeof(*req));
    if (!req) {
        log_error(ENOMEM, "cannot accept calls of %s", a->m->path);
        return;
    }
    req->srv = a->srv;
    grpc_metadata_array_init(&req->md);
    a->req = req;
    e = GRPC_CALL_ERROR;
    if (gate_enter(a->srv)) {
        e = grpc_server_request_registered_call(
            a->srv->server, a->handle, &req->call, &req->deadline, &req->md,
            a->m->client_streaming ? NULL : &req->payload, a->srv->cq, a->srv->cq, &a->tag);
        gate_leave(a->srv);
    }
    if (e != GRPC_CALL_OK) {
        a->req = NULL;
        sbx_grpc_req_free(req);
        log_error(0, "request call of %s: error %d", a->m->path, (int)e);
    }
}

static void fallback_arm(struct fallback *f);

static void fallback_done(struct sbx_grpc_tag *tag, bool ok)
{
    struct fallback *f = (struct fallback *)tag;
    grpc_status_code code = GRPC_STATUS_UNIMPLEMENTED;
    enum sbx_auth_verdict v = SBX_AUTH_OK;
    grpc_op ops[3];
    grpc_slice details;
    char msg[512];

    if (f->answering || !ok) {
        /* Answered (a fresh fallback already waits for the next call), or shutting down. */
        if (f->call)
            grpc_call_unref(f->call);
        grpc_call_details_destroy(&f->details);
        grpc_metadata_array_destroy(&f->md);
        free(f);
        return;
    }
    /* Answer this one, and have a fresh fallback wait for the next. */
    {
        struct fallback *next = calloc(1, sizeof(*next));
        if (next) {
            next->srv = f->srv;
            fallback_arm(next);
        }
    }
    /* A caller without the token learns not even which methods exist. */
    if (!call_authenticated(f->srv, f->call, NULL, &f->md, &v)) {
        code = GRPC_STATUS_UNAUTHENTICATED;
        snprintf(msg, sizeof(msg), "%s", sbx_auth_verdict_message(v));
    } else {
        snprintf(msg, sizeof(msg), "unknown method %.*s", (int)GRPC_SLICE_LENGTH(f->details.method),
                 (const char *)GRPC_SLICE_START_PTR(f->details.method));
    }
    details = grpc_slice_from_copied_string(msg);
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[1].data.send_status_from_server.status = code;
    ops[1].data.send_status_from_server.status_details = &details;
    ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[2].data.recv_close_on_server.cancelled = &f->cancelled;
    f->answering = true;
    if (start_on(f->srv, f->call, ops, 3, &f->tag) != GRPC_CALL_OK) {
        f->answering = false;
        fallback_done(&f->tag, false);
    }
    grpc_slice_unref(details);
}

static void fallback_arm(struct fallback *f)
{
    /* Once the request is made, another completion-queue thread may take the call, answer it
     * and free f: nothing of f is read after that unless the request failed. */
    struct sbx_grpc *srv = f->srv;
    grpc_call_error e = GRPC_CALL_ERROR;

    if (__atomic_load_n(&srv->stopping, __ATOMIC_ACQUIRE)) {
        free(f);
        return;
    }
    f->call = NULL;
    f->answering = false;
    f->tag.fn = fallback_done;
    grpc_call_details_init(&f->details);
    grpc_metadata_array_init(&f->md);
    if (gate_enter(srv)) {
        e = grpc_server_request_call(srv->server, &f->call, &f->details, &f->md, srv->cq, srv->cq,
                                     &f->tag);
        gate_leave(srv);
    }
    if (e != GRPC_CALL_OK) {
        grpc_call_details_destroy(&f->details);
        grpc_metadata_array_destroy(&f->md);
        free(f);
    }
}

static void shutdown_done(struct sbx_grpc_tag *tag, bool ok)
{
    struct sbx_grpc *s = (struct sbx_grpc *)((char *)tag - offsetof(struct sbx_grpc, shutdown_tag));

    (void)ok;
    s->on_shut_down(s->on_shut_down_arg);
}

int sbx_grpc_new(struct sbx_grpc **ret, const struct sbx_grpc_opts *o, struct sbx_error *err)
{
    struct sbx_grpc *s = calloc(1, sizeof(*s));
    grpc_arg args[4];
    grpc_channel_args ch = {.num_args = 4, .args = args};

    if (!s)
        return sbx_error_set(err, ENOMEM, "allocate grpc server");
    s->opts = *o;
    if (s->opts.threads <= 0 || s->opts.threads > MAX_THREADS)
        s->opts.threads = 2;
    memset(args, 0, sizeof(args));
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = o->max_recv_bytes;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = -1;
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = (char *)GRPC_ARG_MAX_CONCURRENT_STREAMS;
    args[2].value.integer = o->max_streams;
    /* gRPC binds with SO_REUSEPORT by default: a second daemon on our port would share it
     * silently, the kernel spreading connections between the two. */
    args[3].type = GRPC_ARG_INTEGER;
    args[3].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
    args[3].value.integer = 0;
    s->shutdown_tag.fn = shutdown_done;
    pthread_rwlock_init(&s->cq_lock, NULL);
    s->server = grpc_server_create(&ch, NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    *ret = s;
    return 0;
}

int sbx_grpc_register(struct sbx_grpc *s, const struct sbx_grpc_method *m, size_t n,
                      struct sbx_error *err)
{
    if (s->n_methods + n > MAX_METHODS)
        return sbx_error_set(err, ENOSPC, "too many methods");
    memcpy(&s->methods[s->n_methods], m, n * sizeof(*m));
    s->n_methods += n;
    return 0;
}

int sbx_grpc_listen(struct sbx_grpc *s, const char *addr, struct sbx_error *err)
{
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(s->server, addr, creds);

    grpc_server_credentials_release(creds);
    if (port == 0)
        return sbx_error_set(err, EADDRINUSE,
                             "cannot listen on '%s' (in use, or not an address of this host)",
                             addr);
    return port;
}

static void *cq_thread(void *arg)
{
    struct sbx_grpc *s = arg;
    struct sbx_error e = {0};

    if (s->opts.thread_init && s->opts.thread_init(&e) < 0)
        log_warn(e.code, "completion-queue thread: %s", e.msg);
    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type == GRPC_OP_COMPLETE) {
            struct sbx_grpc_tag *tag = ev.tag;
            tag->fn(tag, ev.success != 0);
        }
    }
    return NULL;
}

int sbx_grpc_start(struct sbx_grpc *s, struct sbx_error *err)
{
    size_t total = 0, k = 0;
    int r;

    for (size_t i = 0; i < s->n_methods; i++)
        total += (size_t)(s->methods[i].backlog > 0 ? s->methods[i].backlog : 1);
    s->acceptors = calloc(total, sizeof(*s->acceptors));
    if (!s->acceptors)
        return sbx_error_set(err, ENOMEM, "allocate acceptors");
    for (size_t i = 0; i < s->n_methods; i++) {
        const struct sbx_grpc_method *m = &s->methods[i];
        void *handle = grpc_server_register_method(
            s->server, m->path, NULL,
            m->client_streaming ? GRPC_SRM_PAYLOAD_NONE : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER,
            0);
        if (!handle)
            return sbx_error_set(err, EINVAL, "register method '%s'", m->path);
        for (int j = 0; j < (m->backlog > 0 ? m->backlog : 1); j++) {
            struct acceptor *a = &s->acceptors[k++];
            a->tag.fn = acceptor_done;
            a->srv = s;
            a->m = m;
            a->handle = handle;
        }
    }
    s->n_acceptors = k;
    grpc_server_start(s->server);
    s->started = true;
    for (size_t i = 0; i < s->n_acceptors; i++)
        acceptor_arm(&s->acceptors[i]);
    for (int i = 0; i < 2; i++) {
        struct fallback *f = calloc(1, sizeof(*f));
        if (!f)
            return sbx_error_set(err, ENOMEM, "allocate fallback");
        f->srv = s;
        fallback_arm(f);
    }
    for (int i = 0; i < s->opts.threads; i++) {
        r = pthread_create(&s->threads[i], NULL, cq_thread, s);
        if (r != 0)
            return sbx_error_set(err, r, "start completion queue thread");
        s->n_threads++;
    }
    return 0;
}

void sbx_grpc_shutdown(struct sbx_grpc *s, void (*done)(void *arg), void *arg)
{
    if (!s->started || s->stopping) {
        if (!s->started)
            done(arg);
        return;
    }
    s->on_shut_down = done;
    s->on_shut_down_arg = arg;
    __atomic_store_n(&s->stopping, true, __ATOMIC_RELEASE);
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
}

void sbx_grpc_cancel_all(struct sbx_grpc *s)
{
    if (s->started)
        grpc_server_cancel_all_calls(s->server);
}

void sbx_grpc_close(struct sbx_grpc *s)
{
    if (!s || s->cq_closed)
        return;
    pthread_rwlock_wrlock(&s->cq_lock);
    s->cq_closed = true;
    pthread_rwlock_unlock(&s->cq_lock);
    grpc_completion_queue_shutdown(s->cq);
    for (int i = 0; i < s->n_threads; i++)
        pthread_join(s->threads[i], NULL);
    if (!s->n_threads) {
        /* Never started: drain here. */
        while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
               GRPC_QUEUE_SHUTDOWN)
            ;
    }
}

void sbx_grpc_free(struct sbx_grpc *s)
{
    if (!s)
        return;
    sbx_grpc_close(s);
    grpc_server_destroy(s->server);
    grpc_completion_queue_destroy(s->cq);
    pthread_rwlock_destroy(&s->cq_lock);
    free(s->acceptors);
    free(s);
}
