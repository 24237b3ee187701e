#define _GNU_SOURCE
#include "grpc_jobs.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "grpc_launch.h"
#include "grpc_spec.h"
#include "log.h"
#include "metrics.h"
#include "utf8.h"
#include "sandboxd/v1/processes.pb-c.h"

#define DEFAULT_CHUNK (64 * 1024)

static bool draining(const struct sbx_jobs_service *svc)
{
    return svc->draining && __atomic_load_n(svc->draining, __ATOMIC_ACQUIRE);
}

/* ------------------------------------------------------------------------------------------ */
/* ProcessInfo */

struct info_buf {
    Sandboxd__V1__ProcessInfo m;
    Google__Protobuf__Timestamp started, exited;
    Sandboxd__V1__ExitStatus ex;
    Sandboxd__V1__StreamOffsets off[2];
    struct sbx_job_info ji;
};

static void exit_fill(Sandboxd__V1__ExitStatus *e, const struct sbx_exit *ex,
                      enum sbx_exit_reason reason)
{
    sandboxd__v1__exit_status__init(e);
    e->exit_code = ex->exit_code;
    e->signal = ex->signal;
    e->core_dumped = ex->core_dumped;
    /* The core's reasons have the proto's numbers. */
    e->reason = (Sandboxd__V1__ExitReason)reason;
}

static void info_fill(struct info_buf *b, struct sbx_job *job)
{
    size_t argc = 0;

    sbx_job_info(job, &b->ji);
    sandboxd__v1__process_info__init(&b->m);
    b->m.id = b->ji.id;
    b->m.pid = b->ji.pid;
    b->m.tag = (char *)b->ji.tag;
    while (b->ji.argv[argc])
        argc++;
    b->m.n_command = argc;
    b->m.command = (char **)b->ji.argv;
    b->m.state =
        b->ji.exited ? SANDBOXD__V1__STATE__STATE_EXITED : SANDBOXD__V1__STATE__STATE_RUNNING;
    google__protobuf__timestamp__init(&b->started);
    b->started.seconds = b->ji.started.tv_sec;
    b->started.nanos = (int32_t)b->ji.started.tv_nsec;
    b->m.started_at = &b->started;
    if (b->ji.exited) {
        google__protobuf__timestamp__init(&b->exited);
        b->exited.seconds = b->ji.ended.tv_sec;
        b->exited.nanos = (int32_t)b->ji.ended.tv_nsec;
        b->m.exited_at = &b->exited;
        exit_fill(&b->ex, &b->ji.ex, b->ji.reason);
        b->m.exit = &b->ex;
    }
    for (int s = 0; s < 2; s++) {
        sandboxd__v1__stream_offsets__init(&b->off[s]);
        b->off[s].start = b->ji.start[s];
        b->off[s].end = b->ji.end[s];
    }
    b->m.stdout = &b->off[0];
    b->m.stderr = &b->off[1];
    b->m.pty = b->ji.pty;
    b->m.stdin = b->ji.stdin_open;
}

static void reply_info(struct sbx_grpc_req *req, struct sbx_job *job)
{
    struct info_buf b;

    info_fill(&b, job);
    sbx_grpc_reply(req, &b.m.base, GRPC_STATUS_OK, NULL);
}

/* Looks the request's job up, or answers NOT_FOUND. */
static struct sbx_job *lookup(struct sbx_grpc_req *req, int32_t id)
{
    struct sbx_jobs_service *svc = req->method_data;
    struct sbx_job *job = sbx_job_get(svc->jobs, id);
    char msg[64];

    if (!job) {
        snprintf(msg, sizeof(msg), "process %d not found", id);
        sbx_grpc_reply(req, NULL, GRPC_STATUS_NOT_FOUND, msg);
    }
    return job;
}

#define UNPACK(req, type, lname)                                                                   \
    _cleanup_pb_ ProtobufCMessage *m_ =                                                            \
        sbx_grpc_unpack((req)->payload, &sandboxd__v1__##lname##__descriptor);                     \
    type *r = (type *)m_;                                                                          \
    if (!m_) {                                                                                     \
        sbx_grpc_reply((req), NULL, GRPC_STATUS_INVALID_ARGUMENT, "malformed " #type);             \
        return;                                                                                    \
    }

/* ------------------------------------------------------------------------------------------ */
/* Starting */

/* Starts the job a spec describes; on failure answers the call and returns NULL. ring_bytes:
 * 0 for the default. */
static struct sbx_job *start(struct sbx_grpc_req *req, const Sandboxd__V1__ProcessSpec *spec,
                             bool stdin_pipe, bool pty, size_t ring_bytes, const char *what)
{
    struct sbx_jobs_service *svc = req->method_data;
    struct sbx_launch_config lc = {0};
    struct sbx_launch l = {.cwd_fd = -1};
    struct sbx_job_spec js = {0};
    struct sbx_spec_extras x = {0};
    struct sbx_error e = {0};
    struct sbx_job *job = NULL;
    int r;

    if (draining(svc)) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_UNAVAILABLE, "sandboxd is shutting down");
        return NULL;
    }
    if (!spec) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_INVALID_ARGUMENT, "spec is required");
        return NULL;
    }
    if (!sbx_utf8_valid(spec->tag)) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_INVALID_ARGUMENT,
                       "string field contains invalid UTF-8");
        return NULL;
    }
    if (pty && spec->pty && (spec->pty->rows > 0xffff || spec->pty->cols > 0xffff)) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_INVALID_ARGUMENT,
                       "cols and rows must be below 65536");
        return NULL;
    }
    lc.command = spec->command;
    lc.n_command = spec->n_command;
    lc.cwd = spec->cwd;
    r = sbx_spec_extras_build(spec, &js.proc, &x, &e);
    if (r == 0)
        r = sbx_launch_config_alloc(&lc, spec->n_env, &e);
    if (r == 0) {
        SBX_LAUNCH_ENV(&lc, spec->env, spec->n_env);
        r = sbx_launch_build(svc->root, &lc, &l, &e);
    }
    if (r == 0) {
        js.proc.argv = l.argv;
        js.proc.envp = l.envp;
        js.proc.cwd_fd = l.cwd_fd;
        js.proc.pty = pty && spec->pty;
        js.proc.rows = js.proc.pty ? (unsigned short)spec->pty->rows : 0;
        js.proc.cols = js.proc.pty ? (unsigned short)spec->pty->cols : 0;
        js.proc.stdin_null = !stdin_pipe;
        js.tag = spec->tag;
        js.timeout_ms = spec->timeout_ms;
        js.grace_ms = spec->grace_ms;
        js.ring_bytes = ring_bytes;
        js.memory_bytes = spec->limits ? spec->limits->memory_bytes : 0;
        js.pids = spec->limits ? spec->limits->pids : 0;
        r = sbx_job_start(svc->jobs, &js, &job, &e);
    }
    sbx_launch_release(&l);
    sbx_launch_config_release(&lc);
    sbx_spec_extras_release(&x);
    if (r < 0) {
        sbx_launch_reply_error(req, r, &e, what);
        return NULL;
    }
    return job;
}

static void handle_spawn(struct sbx_grpc_req *req)
{
    UNPACK(req, Sandboxd__V1__SpawnRequest, spawn_request);
    struct sbx_job *job =
        start(req, r->spec, r->spec && r->spec->stdin, true, 0, "failed to spawn");

    if (!job)
        return;
    reply_info(req, job);
    sbx_job_unref(job);
}

/* ------------------------------------------------------------------------------------------ */
/* Calls that wait for a job's exit (Run, Wait) */

struct wait_call {
    struct sbx_grpc_tag close_tag;
    struct sbx_job_waiter w;
    struct sbx_grpc_req *req; /* until answered, under lock */
    struct sbx_job *job;
    struct sbx_jobs *jobs;
    pthread_mutex_t lock;
    int refs;
    int cancelled;
    bool closed;
    bool run; /* Run: the job dies with the call, is forgotten after the answer */
};

static void wait_call_unref(struct wait_call *c)
{
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    sbx_job_unref(c->job);
    sbx_grpc_req_free(c->req); /* NULL once answered */
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* Takes the call's request to answer it, once. */
static struct sbx_grpc_req *take_req(struct wait_call *c)
{
    struct sbx_grpc_req *req;

    pthread_mutex_lock(&c->lock);
    req = c->req;
    c->req = NULL;
    pthread_mutex_unlock(&c->lock);
    return req;
}

static void answer_run(struct wait_call *c, struct sbx_grpc_req *req)
{
    Sandboxd__V1__RunResponse m = SANDBOXD__V1__RUN_RESPONSE__INIT;
    Sandboxd__V1__ExitStatus ex;
    struct sbx_job_info ji;
    uint8_t *buf[2] = {NULL, NULL};
    size_t len[2] = {0, 0};

    sbx_job_info(c->job, &ji);
    for (int s = 0; s < 2; s++) {
        uint64_t at;
        size_t held = (size_t)(ji.end[s] - ji.start[s]);
        buf[s] = held ? malloc(held) : NULL;
        if (buf[s])
            len[s] = sbx_job_read(c->job, (enum sbx_stream)s, ji.start[s], buf[s], held, &at);
    }
    exit_fill(&ex, &ji.ex, ji.reason);
    m.exit = &ex;
    m.stdout.data = buf[0];
    m.stdout.len = len[0];
    m.stderr.data = buf[1];
    m.stderr.len = len[1];
    m.stdout_truncated = ji.start[0] > 0 || len[0] < ji.end[0] - ji.start[0];
    m.stderr_truncated = ji.start[1] > 0 || len[1] < ji.end[1] - ji.start[1];
    m.stdout_total = ji.end[0];
    m.stderr_total = ji.end[1];
    m.pid = ji.pid;
    sbx_metrics_bytes_out(len[0] + len[1]);
    sbx_grpc_reply_watched(req, &m.base, GRPC_STATUS_OK, NULL);
    free(buf[0]);
    free(buf[1]);
}

/* The job exited: answer. On the loop thread, or on the caller's when it had exited already. */
static void wait_woken(struct sbx_job_waiter *w)
{
    struct wait_call *c = (struct wait_call *)((char *)w - offsetof(struct wait_call, w));
    struct sbx_grpc_req *req = take_req(c);

    if (c->run) {
        /* Forgotten before it is answered: a List right after the answer does not show it
         * (the call's reference keeps what the answer reads). */
        struct sbx_error e = {0};
        struct sbx_job_info ji;
        sbx_job_info(c->job, &ji);
        (void)sbx_job_remove(c->jobs, ji.id, &e);
    }
    if (req && c->run) {
        answer_run(c, req);
    } else if (req) {
        struct info_buf b;
        info_fill(&b, c->job);
        sbx_grpc_reply_watched(req, &b.m.base, GRPC_STATUS_OK, NULL);
    }
    wait_call_unref(c); /* the waiter's */
}

static void wait_closed(struct sbx_grpc_tag *tag, bool ok)
{
    struct wait_call *c = (struct wait_call *)((char *)tag - offsetof(struct wait_call, close_tag));
    struct sbx_grpc_req *req;

    (void)ok;
    __atomic_store_n(&c->closed, true, __ATOMIC_RELEASE);
    if (c->cancelled) {
        if (c->run) /* the process dies with its call, as Execute's does; it answers then */
            (void)sbx_job_signal(c->job, SIGKILL, SBX_SIGNAL_TREE, NULL);
        else if (sbx_job_unwatch(c->job, &c->w) && (req = take_req(c))) {
            sbx_grpc_reply_watched(req, NULL, GRPC_STATUS_CANCELLED, "cancelled");
            wait_call_unref(c); /* the waiter's: it will not run */
        }
    }
    wait_call_unref(c);
}

/* Watches the call's end and the job's exit; answers at the exit. Takes over req and job. */
static void wait_for_exit(struct sbx_grpc_req *req, struct sbx_job *job, bool run)
{
    struct sbx_jobs_service *svc = req->method_data;
    struct wait_call *c = calloc(1, sizeof(*c));
    grpc_op op;

    if (!c) {
        if (run)
            (void)sbx_job_signal(job, SIGKILL, SBX_SIGNAL_TREE, NULL);
        sbx_job_unref(job);
        sbx_grpc_reply(req, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->req = req;
    c->job = job;
    c->jobs = svc->jobs;
    c->run = run;
    c->refs = 3; /* ours, the close tag's, the waiter's */
    c->close_tag.fn = wait_closed;
    c->w.fn = wait_woken;
    c->w.seen[0] = c->w.seen[1] = UINT64_MAX; /* the exit alone wakes it */
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    if (sbx_grpc_start_batch(req, &op, 1, &c->close_tag) != GRPC_CALL_OK)
        wait_closed(&c->close_tag, false);
    if (!sbx_job_watch(job, &c->w)) {
        wait_woken(&c->w);
    } else if (!run && __atomic_load_n(&c->closed, __ATOMIC_ACQUIRE) && c->cancelled &&
               sbx_job_unwatch(job, &c->w)) {
        /* Cancelled before the waiter was armed: answer now. */
        struct sbx_grpc_req *r = take_req(c);
        if (r)
            sbx_grpc_reply_watched(r, NULL, GRPC_STATUS_CANCELLED, "cancelled");
        wait_call_unref(c); /* the waiter's */
    }
    wait_call_unref(c);
}

static void stdin_done(void *data, int result)
{
    (void)data;
    (void)result; /* a process that exits without reading its stdin is no error */
}

static void handle_run(struct sbx_grpc_req *req)
{
    UNPACK(req, Sandboxd__V1__RunRequest, run_request);
    struct sbx_jobs_service *svc = req->method_data;
    size_t limit = svc->max_output;
    struct sbx_error e = {0};
    struct sbx_job *job;

    if (r->output_limit_bytes && r->output_limit_bytes < limit)
        limit = (size_t)r->output_limit_bytes;
    job = start(req, r->spec, true, false, limit, "failed to run command");
    if (!job)
        return;
    if (r->stdin.len)
        (void)sbx_proc_write(sbx_job_proc(job), r->stdin.data, r->stdin.len, stdin_done, NULL, &e);
    (void)sbx_proc_close_stdin(sbx_job_proc(job), stdin_done, NULL, &e);
    sbx_metrics_bytes_in(r->stdin.len);
    wait_for_exit(req, job, true);
}

static void handle_wait(struct sbx_grpc_req *req)
{
    UNPACK(req, Sandboxd__V1__WaitRequest, wait_request);
    struct sbx_job *job = lookup(req, r->id);

    if (job)
        wait_for_exit(req, job, false);
}

/* ------------------------------------------------------------------------------------------ */
/* Unary calls on a job */

static void handle_get(struct sbx_grpc_req *req)
{
    UNPACK(req, Sandboxd__V1__GetRequest, get_request);
    struct sbx_job *job = lookup(req, r->id);

    if (!job)
        return;
    reply_info(req, job);
    sbx_job_unref(job);
}

static void handle_list(struct sbx_grpc_req *req)
{
    UNPACK(req, Sandboxd__V1__ListRequest, list_request);
    struct sbx_jobs_service *svc = req->method_data;
    Sandboxd__V1__ListResponse resp = SANDBOXD__V1__LIST_RESPONSE__INIT;
    struct sbx_job **jobs = NULL;
    struct info_buf *bufs = NULL;
    Sandboxd__V1__ProcessInfo **infos = NULL;
    size_t n;

    if (!sbx_utf8_valid(r->tag)) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_INVALID_ARGUMENT,
                       "string field contains invalid UTF-8");
        return;
    }
    n = sbx_jobs_list(svc->jobs, r->tag && r->tag[0] ? r->tag : NULL, &jobs);
    if (n) {
        bufs = calloc(n, sizeof(*bufs));
        infos = calloc(n, sizeof(*infos));
    }
    if (n && (!bufs || !infos)) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    } else {
        for (size_t i = 0; i < n; i++) {
            info_fill(&bufs[i], jobs[i]);
            infos[i] = &bufs[i].m;
        }
        resp.n_processes = n;
        resp.processes = infos;
        sbx_grpc_reply(req, &resp.base, GRPC_STATUS_OK, NULL);
    }
    for (size_t i = 0; i < n; i++)
        sbx_job_unref(jobs[i]);
    free(jobs);
    free(bufs);
    free(infos);
}

static void handle_signal(struct sbx_grpc_req *req)
{
    UNPACK(req, Sandboxd__V1__SignalRequest, signal_request);
    Sandboxd__V1__SignalResponse resp = SANDBOXD__V1__SIGNAL_RESPONSE__INIT;
    struct sbx_error e = {0};
    enum sbx_signal_scope scope;
    struct sbx_job *job;
    char msg[384];
    int n;

    switch (r->scope) {
    case SANDBOXD__V1__SIGNAL_SCOPE__SIGNAL_SCOPE_GROUP:
        scope = SBX_SIGNAL_GROUP;
        break;
    case SANDBOXD__V1__SIGNAL_SCOPE__SIGNAL_SCOPE_PROCESS:
        scope = SBX_SIGNAL_PROCESS;
        break;
    case SANDBOXD__V1__SIGNAL_SCOPE__SIGNAL_SCOPE_TREE:
        scope = SBX_SIGNAL_TREE;
        break;
    default:
        sbx_grpc_reply(req, NULL, GRPC_STATUS_INVALID_ARGUMENT, "unknown signal scope");
        return;
    }
    if (r->signal < 1 || r->signal > 64) {
        snprintf(msg, sizeof(msg), "signal must be 1 to 64, not %d", r->signal);
        sbx_grpc_reply(req, NULL, GRPC_STATUS_INVALID_ARGUMENT, msg);
        return;
    }
    job = lookup(req, r->id);
    if (!job)
        return;
    n = sbx_job_signal(job, r->signal, scope, &e);
    sbx_job_unref(job);
    if (n < 0) {
        snprintf(msg, sizeof(msg), "failed to send signal: %s", e.msg);
        sbx_grpc_reply(req, NULL, sbx_grpc_status(n), msg);
        return;
    }
    resp.count = n;
    sbx_grpc_reply(req, &resp.base, GRPC_STATUS_OK, NULL);
}

static void stdin_written(void *data, int result)
{
    struct sbx_grpc_req *req = data;
    Sandboxd__V1__WriteStdinResponse resp = SANDBOXD__V1__WRITE_STDIN_RESPONSE__INIT;
    char msg[128];

    if (result < 0) {
        snprintf(msg, sizeof(msg), "failed to write stdin: %s", strerror(-result));
        sbx_grpc_reply(req, NULL,
                       result == -EPIPE ? GRPC_STATUS_FAILED_PRECONDITION : GRPC_STATUS_INTERNAL,
                       msg);
    } else {
        sbx_grpc_reply(req, &resp.base, GRPC_STATUS_OK, NULL);
    }
}

static void handle_write_stdin(struct sbx_grpc_req *req)
{
    UNPACK(req, Sandboxd__V1__WriteStdinRequest, write_stdin_request);
    struct sbx_error e = {0};
    struct sbx_job_info ji;
    struct sbx_proc *p;
    struct sbx_job *job;
    char msg[384];
    int rc = 0;

    job = lookup(req, r->id);
    if (!job)
        return;
    sbx_job_info(job, &ji);
    p = sbx_job_proc(job);
    if (!ji.stdin_open) {
        rc = sbx_error_set(&e, EPIPE,
                           ji.exited ? "process %d has exited"
                                     : "process %d has no stdin (spawn it with stdin)",
                           r->id);
    } else if (r->eof) {
        rc = sbx_proc_write_close(p, r->data.data, r->data.len, stdin_written, req, &e);
    } else {
        rc = sbx_proc_write(p, r->data.data, r->data.len, stdin_written, req, &e);
    }
    if (rc == 0)
        sbx_metrics_bytes_in(r->data.len);
    sbx_job_unref(job);
    if (rc < 0) {
        snprintf(msg, sizeof(msg), "failed to write stdin: %s", e.msg);
        sbx_grpc_reply(req, NULL,
                       rc == -EPIPE ? GRPC_STATUS_FAILED_PRECONDITION : sbx_grpc_status(rc), msg);
    }
}

static void handle_resize(struct sbx_grpc_req *req)
{
    UNPACK(req, Sandboxd__V1__ResizeRequest, resize_request);
    Sandboxd__V1__ResizeResponse resp = SANDBOXD__V1__RESIZE_RESPONSE__INIT;
    struct sbx_error e = {0};
    struct sbx_job *job;
    char msg[384];
    int rc;

    if (!r->size || r->size->rows > 0xffff || r->size->cols > 0xffff) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_INVALID_ARGUMENT,
                       "size is required; cols and rows must be below 65536");
        return;
    }
    job = lookup(req, r->id);
    if (!job)
        return;
    rc = sbx_proc_resize(sbx_job_proc(job), (unsigned short)r->size->cols,
                         (unsigned short)r->size->rows, &e);
    sbx_job_unref(job);
    if (rc < 0) {
        snprintf(msg, sizeof(msg), "failed to resize: %s", e.msg);
        sbx_grpc_reply(req, NULL, GRPC_STATUS_FAILED_PRECONDITION, msg);
        return;
    }
    sbx_grpc_reply(req, &resp.base, GRPC_STATUS_OK, NULL);
}

static void handle_remove(struct sbx_grpc_req *req)
{
    UNPACK(req, Sandboxd__V1__RemoveRequest, remove_request);
    struct sbx_jobs_service *svc = req->method_data;
    Sandboxd__V1__RemoveResponse resp = SANDBOXD__V1__REMOVE_RESPONSE__INIT;
    struct sbx_error e = {0};
    int rc = sbx_job_remove(svc->jobs, r->id, &e);

    if (rc < 0)
        sbx_grpc_reply(req, NULL,
                       rc == -EBUSY ? GRPC_STATUS_FAILED_PRECONDITION : sbx_grpc_status(rc), e.msg);
    else
        sbx_grpc_reply(req, &resp.base, GRPC_STATUS_OK, NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* Attach: output from offsets, then (following) as it comes, then the exit */

struct attach {
    struct sbx_grpc_tag send_tag, close_tag;
    struct sbx_job_waiter w;
    struct sbx_grpc_req *req;
    struct sbx_job *job;
    int refs;
    int cancelled;
    bool closed;       /* the call is over: send nothing more */
    bool initial_sent; /* initial metadata went with the first message */
    bool final_sent;
    bool follow;
    bool want[2];
    uint64_t off[2];
    size_t chunk;
    uint8_t *buf;
    grpc_byte_buffer *bb;
    grpc_slice details;
};

static void attach_unref(struct attach *a)
{
    if (__atomic_sub_fetch(&a->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    sbx_job_unref(a->job);
    sbx_grpc_req_free(a->req);
    free(a->buf);
    free(a);
}

/* Sends one event, with the OK status after it when final (event may be NULL then). */
static void attach_send(struct attach *a, const Sandboxd__V1__AttachEvent *ev, bool final)
{
    grpc_op ops[3];
    size_t n = 0;

    memset(ops, 0, sizeof(ops));
    if (!a->initial_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        a->initial_sent = true;
    }
    if (ev) {
        a->bb = sbx_grpc_pack(&ev->base);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = a->bb;
    }
    if (final) {
        sbx_metrics_request(SBX_METRIC_GRPC, GRPC_STATUS_OK);
        a->details = grpc_empty_slice();
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = GRPC_STATUS_OK;
        ops[n++].data.send_status_from_server.status_details = &a->details;
        a->final_sent = true;
    }
    __atomic_add_fetch(&a->refs, 1, __ATOMIC_RELAXED);
    if (sbx_grpc_start_batch(a->req, ops, n, &a->send_tag) != GRPC_CALL_OK)
        a->send_tag.fn(&a->send_tag, false);
}

static Sandboxd__V1__Stream stream_of(int s)
{
    return s == 0 ? SANDBOXD__V1__STREAM__STREAM_STDOUT : SANDBOXD__V1__STREAM__STREAM_STDERR;
}

/* Sends the next event, or arms the waiter when there is none yet. Runs with no send in flight
 * and the waiter disarmed: from the call's start, a send's completion, or the waiter. */
static void attach_pump(struct attach *a)
{
    Sandboxd__V1__AttachEvent ev = SANDBOXD__V1__ATTACH_EVENT__INIT;
    Sandboxd__V1__Output out = SANDBOXD__V1__OUTPUT__INIT;
    Sandboxd__V1__Truncated tr = SANDBOXD__V1__TRUNCATED__INIT;
    Sandboxd__V1__ExitStatus ex;
    struct sbx_job_info ji;

    for (;;) {
        if (__atomic_load_n(&a->closed, __ATOMIC_ACQUIRE))
            return;
        /* Exited first: all its output is in the rings by then, so reads after this see it. */
        sbx_job_info(a->job, &ji);
        for (int s = 0; s < 2; s++) {
            uint64_t at;
            size_t n;
            if (!a->want[s])
                continue;
            n = sbx_job_read(a->job, (enum sbx_stream)s, a->off[s], a->buf, a->chunk, &at);
            if (at > a->off[s]) {
                tr.stream = stream_of(s);
                tr.from = a->off[s];
                tr.to = at;
                a->off[s] = at;
                ev.event_case = SANDBOXD__V1__ATTACH_EVENT__EVENT_TRUNCATED;
                ev.truncated = &tr;
                attach_send(a, &ev, false);
                return;
            }
            if (n > 0) {
                out.stream = stream_of(s);
                out.offset = at;
                out.data.data = a->buf;
                out.data.len = n;
                a->off[s] = at + n;
                ev.event_case = SANDBOXD__V1__ATTACH_EVENT__EVENT_OUTPUT;
                ev.output = &out;
                sbx_metrics_bytes_out(n);
                attach_send(a, &ev, false);
                return;
            }
        }
        if (ji.exited) {
            exit_fill(&ex, &ji.ex, ji.reason);
            ev.event_case = SANDBOXD__V1__ATTACH_EVENT__EVENT_EXIT;
            ev.exit = &ex;
            attach_send(a, &ev, true);
            return;
        }
        if (!a->follow) {
            attach_send(a, NULL, true);
            return;
        }
        a->w.seen[0] = a->want[0] ? a->off[0] : UINT64_MAX;
        a->w.seen[1] = a->want[1] ? a->off[1] : UINT64_MAX;
        __atomic_add_fetch(&a->refs, 1, __ATOMIC_RELAXED); /* the waiter's */
        if (sbx_job_watch(a->job, &a->w)) {
            /* Closed meanwhile, before its handler could disarm: disarm here. */
            if (__atomic_load_n(&a->closed, __ATOMIC_ACQUIRE) && sbx_job_unwatch(a->job, &a->w))
                __atomic_sub_fetch(&a->refs, 1, __ATOMIC_RELAXED);
            return;
        }
        __atomic_sub_fetch(&a->refs, 1, __ATOMIC_RELAXED); /* news already: read again */
    }
}

static void attach_woken(struct sbx_job_waiter *w)
{
    struct attach *a = (struct attach *)((char *)w - offsetof(struct attach, w));

    attach_pump(a);
    attach_unref(a); /* the waiter's */
}

static void attach_sent(struct sbx_grpc_tag *tag, bool ok)
{
    struct attach *a = (struct attach *)((char *)tag - offsetof(struct attach, send_tag));

    if (a->bb)
        grpc_byte_buffer_destroy(a->bb);
    a->bb = NULL;
    if (!ok)
        __atomic_store_n(&a->closed, true, __ATOMIC_RELEASE);
    else if (!a->final_sent)
        attach_pump(a);
    attach_unref(a);
}

static void attach_closed(struct sbx_grpc_tag *tag, bool ok)
{
    struct attach *a = (struct attach *)((char *)tag - offsetof(struct attach, close_tag));

    (void)ok;
    /* The process carries on whoever reads it. A waiting reader lets go of its waiter. */
    __atomic_store_n(&a->closed, true, __ATOMIC_RELEASE);
    if (sbx_job_unwatch(a->job, &a->w))
        attach_unref(a); /* the waiter's: it will not run */
    attach_unref(a);
}

static void handle_attach(struct sbx_grpc_req *req)
{
    UNPACK(req, Sandboxd__V1__AttachRequest, attach_request);
    struct sbx_jobs_service *svc = req->method_data;
    struct sbx_job *job;
    struct attach *a;
    grpc_op op;

    job = lookup(req, r->id);
    if (!job)
        return;
    a = calloc(1, sizeof(*a));
    if (a) {
        a->chunk = svc->chunk_size ? svc->chunk_size : DEFAULT_CHUNK;
        a->buf = malloc(a->chunk);
    }
    if (!a || !a->buf) {
        free(a);
        sbx_job_unref(job);
        sbx_grpc_reply(req, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    a->req = req;
    a->job = job;
    a->refs = 1; /* ours */
    a->follow = r->follow;
    a->want[0] = !r->skip_stdout;
    a->want[1] = !r->skip_stderr;
    a->off[0] = r->stdout_offset;
    a->off[1] = r->stderr_offset;
    a->send_tag.fn = attach_sent;
    a->close_tag.fn = attach_closed;
    a->w.fn = attach_woken;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &a->cancelled;
    a->refs++;
    if (sbx_grpc_start_batch(req, &op, 1, &a->close_tag) != GRPC_CALL_OK)
        attach_closed(&a->close_tag, false);
    attach_pump(a);
    attach_unref(a);
}

int sbx_grpc_jobs_register(struct sbx_grpc *srv, struct sbx_jobs_service *svc,
                           struct sbx_error *err)
{
    const struct sbx_grpc_method methods[] = {
        {"/sandboxd.v1.Processes/Spawn", false, handle_spawn, svc, 4},
        {"/sandboxd.v1.Processes/Run", false, handle_run, svc, 4},
        {"/sandboxd.v1.Processes/List", false, handle_list, svc, 2},
        {"/sandboxd.v1.Processes/Get", false, handle_get, svc, 2},
        {"/sandboxd.v1.Processes/Attach", false, handle_attach, svc, 4},
        {"/sandboxd.v1.Processes/Wait", false, handle_wait, svc, 4},
        {"/sandboxd.v1.Processes/Signal", false, handle_signal, svc, 2},
        {"/sandboxd.v1.Processes/WriteStdin", false, handle_write_stdin, svc, 4},
        {"/sandboxd.v1.Processes/Resize", false, handle_resize, svc, 2},
        {"/sandboxd.v1.Processes/Remove", false, handle_remove, svc, 2},
    };

    return sbx_grpc_register(srv, methods, SBX_ARRAY_SIZE(methods), err);
}
