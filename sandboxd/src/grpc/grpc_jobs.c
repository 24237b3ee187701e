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
#include "grpc_stream.h"
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
        sbx_grpc_unpack_req((req), &sandboxd__v1__##lname##__descriptor);                          \
    type *r = (type *)m_;                                                                          \
    if (!m_)                                                                                       \
        return;

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
    struct sbx_grpc_stream *st;
    struct sbx_job_waiter w;
    struct sbx_job *job;
    struct sbx_jobs *jobs;
    bool run; /* Run: the job dies with the call, is forgotten after the answer */
};

static void wait_release(void *data)
{
    struct wait_call *c = data;

    sbx_job_unref(c->job);
    free(c);
}

static void answer_run(struct wait_call *c)
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
    (void)sbx_grpc_stream_finish(c->st, &m.base, GRPC_STATUS_OK, NULL);
    free(buf[0]);
    free(buf[1]);
}

/* The job exited: answer. On the loop thread, or on the caller's when it had exited already. */
static void wait_woken(struct sbx_job_waiter *w)
{
    struct wait_call *c = (struct wait_call *)((char *)w - offsetof(struct wait_call, w));

    if (c->run) {
        /* Forgotten before it is answered: a List right after the answer does not show it
         * (the call's reference keeps what the answer reads). */
        struct sbx_error e = {0};
        struct sbx_job_info ji;
        sbx_job_info(c->job, &ji);
        (void)sbx_job_remove(c->jobs, ji.id, &e);
    }
    if (sbx_grpc_stream_over(c->st)) {
        /* cancelled: nobody to answer */
    } else if (c->run) {
        answer_run(c);
    } else {
        struct info_buf b;
        info_fill(&b, c->job);
        (void)sbx_grpc_stream_finish(c->st, &b.m.base, GRPC_STATUS_OK, NULL);
    }
    sbx_grpc_stream_unref(c->st); /* the waiter's */
}

/* A Wait cancelled before the exit: the waiter is let go (it will not run) and the call counts
 * as answered CANCELLED. */
static void wait_cancelled(struct wait_call *c)
{
    if (!sbx_job_unwatch(c->job, &c->w))
        return;
    sbx_metrics_request(SBX_METRIC_GRPC, GRPC_STATUS_CANCELLED);
    sbx_grpc_stream_unref(c->st); /* the waiter's */
}

static void wait_closed(void *data, bool cancelled)
{
    struct wait_call *c = data;

    if (!cancelled)
        return;
    if (c->run) /* the process dies with its call, as Execute's does; it answers then */
        (void)sbx_job_signal(c->job, SIGKILL, SBX_SIGNAL_TREE, NULL);
    else
        wait_cancelled(c);
}

static const struct sbx_grpc_stream_ops wait_ops = {.closed = wait_closed, .release = wait_release};

/* Watches the call's end and the job's exit; answers at the exit. Takes over req and job. */
static void wait_for_exit(struct sbx_grpc_req *req, struct sbx_job *job, bool run)
{
    struct sbx_jobs_service *svc = req->method_data;
    struct wait_call *c = calloc(1, sizeof(*c));

    if (c) {
        c->job = job;
        c->jobs = svc->jobs;
        c->run = run;
        c->w.fn = wait_woken;
        c->w.seen[0] = c->w.seen[1] = UINT64_MAX; /* the exit alone wakes it */
    }
    if (!c || sbx_grpc_stream_new(req, &wait_ops, c, &c->st) < 0) {
        if (run)
            (void)sbx_job_signal(job, SIGKILL, SBX_SIGNAL_TREE, NULL);
        sbx_job_unref(job);
        free(c);
        sbx_grpc_reply(req, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    sbx_grpc_stream_ref(c->st); /* the waiter's */
    if (!sbx_job_watch(job, &c->w))
        wait_woken(&c->w);
    else if (!run && sbx_grpc_stream_over(c->st))
        wait_cancelled(c);        /* cancelled before the waiter was armed */
    sbx_grpc_stream_unref(c->st); /* ours */
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
    struct sbx_grpc_stream *st;
    struct sbx_job_waiter w;
    struct sbx_job *job;
    bool follow;
    bool want[2];
    uint64_t off[2];
    size_t chunk;
    uint8_t *buf;
};

static void attach_release(void *data)
{
    struct attach *a = data;

    sbx_job_unref(a->job);
    free(a->buf);
    free(a);
}

static Sandboxd__V1__Stream stream_of(int s)
{
    return s == 0 ? SANDBOXD__V1__STREAM__STREAM_STDOUT : SANDBOXD__V1__STREAM__STREAM_STDERR;
}

/* Arms the waiter for news past the offsets read; false when there is news already. */
static bool attach_wait(struct attach *a)
{
    a->w.seen[0] = a->want[0] ? a->off[0] : UINT64_MAX;
    a->w.seen[1] = a->want[1] ? a->off[1] : UINT64_MAX;
    sbx_grpc_stream_ref(a->st); /* the waiter's */
    if (sbx_job_watch(a->job, &a->w)) {
        /* Closed meanwhile, before its handler could disarm: disarm here. */
        if (sbx_grpc_stream_over(a->st) && sbx_job_unwatch(a->job, &a->w))
            sbx_grpc_stream_unref(a->st);
        return true;
    }
    sbx_grpc_stream_unref(a->st);
    return false;
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

    do {
        if (sbx_grpc_stream_over(a->st))
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
                (void)sbx_grpc_stream_send(a->st, &ev.base, 0);
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
                (void)sbx_grpc_stream_send(a->st, &ev.base, 0);
                return;
            }
        }
        if (ji.exited) {
            exit_fill(&ex, &ji.ex, ji.reason);
            ev.event_case = SANDBOXD__V1__ATTACH_EVENT__EVENT_EXIT;
            ev.exit = &ex;
            (void)sbx_grpc_stream_finish(a->st, &ev.base, GRPC_STATUS_OK, NULL);
            return;
        }
        if (!a->follow) {
            (void)sbx_grpc_stream_finish(a->st, NULL, GRPC_STATUS_OK, NULL);
            return;
        }
    } while (!attach_wait(a));
}

static void attach_woken(struct sbx_job_waiter *w)
{
    struct attach *a = (struct attach *)((char *)w - offsetof(struct attach, w));

    attach_pump(a);
    sbx_grpc_stream_unref(a->st); /* the waiter's */
}

static void attach_sent(void *data, bool ok, bool final)
{
    if (ok && !final)
        attach_pump(data);
}

static void attach_closed(void *data, bool cancelled)
{
    struct attach *a = data;

    (void)cancelled;
    /* The process carries on whoever reads it. A waiting reader lets go of its waiter. */
    if (sbx_job_unwatch(a->job, &a->w))
        sbx_grpc_stream_unref(a->st); /* the waiter's: it will not run */
}

static const struct sbx_grpc_stream_ops attach_ops = {
    .sent = attach_sent, .closed = attach_closed, .release = attach_release};

static void handle_attach(struct sbx_grpc_req *req)
{
    UNPACK(req, Sandboxd__V1__AttachRequest, attach_request);
    struct sbx_jobs_service *svc = req->method_data;
    struct sbx_job *job;
    struct attach *a;

    job = lookup(req, r->id);
    if (!job)
        return;
    a = calloc(1, sizeof(*a));
    if (a) {
        a->chunk = svc->chunk_size ? svc->chunk_size : DEFAULT_CHUNK;
        a->buf = malloc(a->chunk);
        a->job = job;
        a->follow = r->follow;
        a->want[0] = !r->skip_stdout;
        a->want[1] = !r->skip_stderr;
        a->off[0] = r->stdout_offset;
        a->off[1] = r->stderr_offset;
        a->w.fn = attach_woken;
    }
    if (!a || !a->buf || sbx_grpc_stream_new(req, &attach_ops, a, &a->st) < 0) {
        if (a)
            free(a->buf);
        free(a);
        sbx_job_unref(job);
        sbx_grpc_reply(req, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    attach_pump(a);
    sbx_grpc_stream_unref(a->st); /* ours */
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
