#define _GNU_SOURCE
#include "grpc_process.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "grpc_launch.h"
#include "grpc_stream.h"
#include "log.h"
#include "metrics.h"
#include "process/v1/process.pb-c.h"

int sbx_process_launch_from(const struct sbx_root *root, const Process__V1__ProcessConfig *c,
                            struct sbx_launch *l, struct sbx_error *err)
{
    struct sbx_launch_config lc = {0};
    int r = 0;

    if (c) {
        lc.command = c->command;
        lc.n_command = c->n_command;
        lc.cwd = c->cwd;
        r = sbx_launch_config_alloc(&lc, c->n_env_vars, err);
        if (r == 0)
            SBX_LAUNCH_ENV(&lc, c->env_vars, c->n_env_vars);
    }
    if (r == 0)
        r = sbx_launch_build(root, &lc, l, err);
    sbx_launch_config_release(&lc);
    return r;
}

/* One Start or Execute call and the process it runs. The stream holds it: its references are
 * the stream's (the handler's, the close watch's, the sink's until the exit, each send's). */
struct pcall {
    struct sbx_grpc_stream *st;
    struct sbx_proc *proc;
    bool execute;
    pthread_mutex_t lock; /* the close against the start: closed, cancelled, proc */
    bool closed, cancelled;
    /* Execute's capture: cap[] taken from budget */
    size_t max_output;
    struct sbx_budget *budget;
    uint8_t *buf[2];
    size_t len[2], cap[2];
    uint64_t dropped[2]; /* bytes of each stream not captured */
    bool refused;        /* some were dropped for want of budget (or memory) */
    bool over_cap;       /* some were dropped past max_output */
};

static void pcall_release(void *data)
{
    struct pcall *c = data;

    sbx_proc_unref(c->proc);
    sbx_budget_give(c->budget, c->cap[0] + c->cap[1]);
    free(c->buf[0]);
    free(c->buf[1]);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* One send is in flight at a time for the process: the process table's credit guarantees it;
 * each completed send gives the credit back. */
static void pcall_sent(void *data, bool ok, bool final)
{
    struct pcall *c = data;

    if (!ok)
        sbx_proc_detach(c->proc); /* the client is gone: nobody reads the output */
    else if (!final)
        sbx_proc_ack(c->proc);
}

/* The client cancelled or went away: the process dies with its call, as in the reference, but
 * here with its whole process group. */
static void kill_with_call(struct pcall *c)
{
    (void)sbx_proc_signal(c->proc, SIGKILL, NULL);
    sbx_proc_detach(c->proc);
}

static void pcall_closed(void *data, bool cancelled)
{
    struct pcall *c = data;
    struct sbx_proc *p;

    /* run() may be starting the process: it kills it itself when it sees closed. */
    pthread_mutex_lock(&c->lock);
    c->closed = true;
    c->cancelled = cancelled;
    p = c->proc;
    pthread_mutex_unlock(&c->lock);
    if (p && cancelled)
        kill_with_call(c);
}

static const struct sbx_grpc_stream_ops pcall_ops = {
    .sent = pcall_sent, .closed = pcall_closed, .release = pcall_release};

static void stream_output(void *data, enum sbx_stream s, const uint8_t *buf, size_t len, bool more)
{
    struct pcall *c = data;
    Process__V1__StartResponse m = PROCESS__V1__START_RESPONSE__INIT;

    m.event_case = s == SBX_STDOUT ? PROCESS__V1__START_RESPONSE__EVENT_STDOUT
                                   : PROCESS__V1__START_RESPONSE__EVENT_STDERR;
    /* stdout and stderr share the union's storage. */
    m.stdout.data = (uint8_t *)buf;
    m.stdout.len = len;
    sbx_metrics_bytes_out(len);
    /* More is waiting and follows at once: the transport may gather it with this chunk. The
     * last chunk of a burst goes without the hint, which flushes the lot. */
    if (sbx_grpc_stream_send(c->st, &m.base, more ? GRPC_WRITE_BUFFER_HINT : 0) < 0)
        sbx_proc_detach(c->proc); /* over: nobody reads the output */
}

static void stream_exit(void *data, const struct sbx_exit *ex)
{
    struct pcall *c = data;
    Process__V1__StartResponse m = PROCESS__V1__START_RESPONSE__INIT;
    Process__V1__ExitEvent e = PROCESS__V1__EXIT_EVENT__INIT;

    e.exit_code = ex->exit_code;
    m.event_case = PROCESS__V1__START_RESPONSE__EVENT_EXIT;
    m.exit = &e;
    (void)sbx_grpc_stream_finish(c->st, &m.base, GRPC_STATUS_OK, NULL);
    sbx_grpc_stream_unref(c->st); /* the sink's */
}

static const struct sbx_proc_sink stream_sink = {.output = stream_output, .exit = stream_exit};

/* Grows stream s's buffer to hold need bytes (within the cap), when the budget gives the bytes. */
static void capture_grow(struct pcall *c, enum sbx_stream s, size_t need)
{
    size_t cap = c->cap[s] ? c->cap[s] * 2 : 4096, want;
    uint8_t *nb;

    while (cap < need)
        cap *= 2;
    if (cap > c->max_output)
        cap = c->max_output;
    want = cap - c->cap[s];
    cap = c->cap[s] + sbx_budget_take_some(c->budget, want);
    if (cap - c->cap[s] < want) {
        c->refused = true;
        if (cap == c->cap[s])
            return;
    }
    nb = realloc(c->buf[s], cap);
    if (!nb) {
        c->refused = true;
        sbx_budget_give(c->budget, cap - c->cap[s]);
        return;
    }
    c->buf[s] = nb;
    c->cap[s] = cap;
}

static void capture_output(void *data, enum sbx_stream s, const uint8_t *buf, size_t len, bool more)
{
    struct pcall *c = data;
    size_t room = c->max_output - c->len[s], n = len;

    (void)more;
    if (n > room) {
        n = room; /* over the cap: drained and dropped */
        c->over_cap = true;
    }
    if (n > 0 && c->len[s] + n > c->cap[s])
        capture_grow(c, s, c->len[s] + n);
    if (n > c->cap[s] - c->len[s])
        n = c->cap[s] - c->len[s]; /* no memory for more: dropped too */
    c->dropped[s] += len - n;
    if (n == 0)
        return;
    memcpy(c->buf[s] + c->len[s], buf, n);
    c->len[s] += n;
}

/* Says what Execute dropped, since its answer (the reference's message) cannot: trailing
 * metadata "sandboxd-<stream>-truncated: <bytes dropped>", one log line, the metrics. Returns
 * how many entries it wrote into t (whose values live in num). */
static size_t capture_truncation(const struct pcall *c, struct sbx_grpc_trailer *t, char num[2][24])
{
    static const char *const keys[2] = {"sandboxd-stdout-truncated", "sandboxd-stderr-truncated"};
    char why[128];
    size_t n = 0;

    if (!c->dropped[0] && !c->dropped[1])
        return 0;
    for (int s = 0; s < 2; s++) {
        if (!c->dropped[s])
            continue;
        snprintf(num[s], sizeof(num[s]), "%llu", (unsigned long long)c->dropped[s]);
        t[n].key = keys[s];
        t[n++].value = num[s];
    }
    sbx_metrics_output_truncated(c->dropped[0], c->dropped[1]);
    snprintf(why, sizeof(why), "%s%s%s", c->over_cap ? "past the cap (--max-output-bytes)" : "",
             c->over_cap && c->refused ? " and " : "",
             c->refused ? "as the output memory budget (--max-output-memory) ran out" : "");
    /* The budget is the daemon's, shared by every process: running out of it is news. */
    sbx_log(c->refused ? SBX_LOG_WARN : SBX_LOG_INFO, 0,
            "execute: output truncated: %llu bytes of stdout and %llu of stderr dropped %s",
            (unsigned long long)c->dropped[0], (unsigned long long)c->dropped[1], why);
    return n;
}

static void capture_exit(void *data, const struct sbx_exit *ex)
{
    struct pcall *c = data;
    Process__V1__ExecuteResponse m = PROCESS__V1__EXECUTE_RESPONSE__INIT;
    struct sbx_grpc_trailer t[2];
    char num[2][24];
    size_t n = capture_truncation(c, t, num);

    m.exit_code = ex->exit_code;
    m.stdout.data = c->buf[SBX_STDOUT];
    m.stdout.len = c->len[SBX_STDOUT];
    m.stderr.data = c->buf[SBX_STDERR];
    m.stderr.len = c->len[SBX_STDERR];
    (void)sbx_grpc_stream_finish_trailers(c->st, &m.base, GRPC_STATUS_OK, NULL, t, n);
    sbx_grpc_stream_unref(c->st); /* the sink's */
}

static const struct sbx_proc_sink capture_sink = {.output = capture_output, .exit = capture_exit};

/* A call and its stream; on failure the call is answered and NULL returned. */
static struct pcall *pcall_new(struct sbx_grpc_req *req, const struct sbx_process_service *svc,
                               bool execute)
{
    struct pcall *c = calloc(1, sizeof(*c));

    if (!c) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return NULL;
    }
    c->execute = execute;
    c->max_output = svc->max_output;
    c->budget = svc->output_budget;
    pthread_mutex_init(&c->lock, NULL);
    if (sbx_grpc_stream_new(req, &pcall_ops, c, &c->st) < 0) {
        pthread_mutex_destroy(&c->lock);
        free(c);
        sbx_grpc_reply(req, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return NULL;
    }
    return c;
}

/* Starts c's process; on failure answers the call with the reference's wording. */
static int pcall_start(struct pcall *c, struct sbx_process_service *svc, const struct sbx_launch *l,
                       const Process__V1__PTY *pty)
{
    struct sbx_proc_opts o = {.argv = l->argv, .envp = l->envp, .cwd_fd = l->cwd_fd};
    struct sbx_error e = {0};
    bool kill_now;
    char msg[512];
    int r;

    o.pty = pty != NULL;
    o.cols = pty ? (unsigned short)pty->cols : 0;
    o.rows = pty ? (unsigned short)pty->rows : 0;
    o.credit = c->execute ? SBX_CREDIT_UNLIMITED : 0;
    o.anonymous = c->execute;
    sbx_grpc_stream_ref(c->st); /* the sink's, before the process can exit */
    pthread_mutex_lock(&c->lock);
    r = sbx_proc_start(svc->procs, &o, c->execute ? &capture_sink : &stream_sink, c, &c->proc, &e);
    kill_now = r == 0 && c->closed && c->cancelled;
    pthread_mutex_unlock(&c->lock);
    if (r < 0) {
        grpc_status_code code = sbx_launch_error_status(
            r, &e,
            c->execute ? "failed to execute command"
                       : (pty ? "failed to start command with PTY" : "failed to start command"),
            msg, sizeof(msg));
        (void)sbx_grpc_stream_finish(c->st, NULL, code, msg);
        sbx_grpc_stream_unref(c->st); /* the sink's: it will never run */
    } else if (kill_now) {
        kill_with_call(c);
    }
    return r;
}

/* Runs the process of a Start or Execute call. */
static void run(struct sbx_grpc_req *req, const Process__V1__ProcessConfig *config,
                const Process__V1__PTY *pty, bool execute)
{
    struct sbx_process_service *svc = req->method_data;
    struct sbx_launch l = {.cwd_fd = -1};
    struct sbx_error e = {0};
    struct pcall *c;
    int r;

    if (__atomic_load_n(&svc->draining, __ATOMIC_ACQUIRE)) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_UNAVAILABLE, "sandboxd is shutting down");
        return;
    }
    r = sbx_process_launch_from(svc->root, config, &l, &e);
    if (r < 0) {
        sbx_launch_reply_error(req, r, &e,
                               execute ? "failed to execute command" : "failed to start command");
        sbx_launch_release(&l);
        return;
    }
    /* The call's end is watched (by its stream) before the process starts: its exit may send
     * the reply at once, on the loop thread. A cancel that comes first kills the process once
     * it exists. */
    c = pcall_new(req, svc, execute);
    r = c ? pcall_start(c, svc, &l, pty) : -ENOMEM;
    sbx_launch_release(&l);
    if (r == 0 && !execute) {
        Process__V1__StartResponse m = PROCESS__V1__START_RESPONSE__INIT;
        Process__V1__InitEvent init = PROCESS__V1__INIT_EVENT__INIT;
        init.process_id = sbx_proc_id(c->proc);
        m.event_case = PROCESS__V1__START_RESPONSE__EVENT_INIT;
        m.init = &init;
        if (sbx_grpc_stream_send(c->st, &m.base, 0) < 0)
            sbx_proc_detach(c->proc); /* over: nobody reads the output */
    }
    if (c)
        sbx_grpc_stream_unref(c->st); /* ours */
}

static void handle_start(struct sbx_grpc_req *req)
{
    _cleanup_pb_ ProtobufCMessage *m =
        sbx_grpc_unpack_req(req, &process__v1__start_request__descriptor);
    Process__V1__StartRequest *r = (Process__V1__StartRequest *)m;

    if (!m)
        return;
    run(req, r->config, r->pty, false);
}

static void handle_execute(struct sbx_grpc_req *req)
{
    _cleanup_pb_ ProtobufCMessage *m =
        sbx_grpc_unpack_req(req, &process__v1__execute_request__descriptor);
    Process__V1__ExecuteRequest *r = (Process__V1__ExecuteRequest *)m;

    if (!m)
        return;
    run(req, r->config, NULL, true);
}

/* A WriteStdin call waiting for its bytes to reach the pipe. */
struct stdin_call {
    struct sbx_grpc_req *req;
    int32_t id;
};

static void stdin_written(void *data, int result)
{
    struct stdin_call *s = data;
    Process__V1__WriteStdinResponse resp = PROCESS__V1__WRITE_STDIN_RESPONSE__INIT;
    char msg[128];

    if (result < 0) {
        snprintf(msg, sizeof(msg), "failed to write stdin: %s", strerror(-result));
        sbx_grpc_reply(s->req, NULL, GRPC_STATUS_INTERNAL, msg);
    } else {
        sbx_grpc_reply(s->req, &resp.base, GRPC_STATUS_OK, NULL);
    }
    free(s);
}

/* Looks up the request's process, or answers NOT_FOUND. */
static struct sbx_proc *lookup(struct sbx_grpc_req *req, int32_t id)
{
    struct sbx_process_service *svc = req->method_data;
    struct sbx_proc *p = sbx_proc_get(svc->procs, id);
    char msg[64];

    if (!p) {
        snprintf(msg, sizeof(msg), "process %d not found", id);
        sbx_grpc_reply(req, NULL, GRPC_STATUS_NOT_FOUND, msg);
    }
    return p;
}

static void handle_write_stdin(struct sbx_grpc_req *req)
{
    _cleanup_pb_ ProtobufCMessage *m =
        sbx_grpc_unpack_req(req, &process__v1__write_stdin_request__descriptor);
    Process__V1__WriteStdinRequest *r = (Process__V1__WriteStdinRequest *)m;
    struct sbx_error e = {0};
    struct stdin_call *s;
    struct sbx_proc *p;
    char msg[384];
    int rc;

    if (!m)
        return;
    p = lookup(req, r->process_id);
    if (!p)
        return;
    s = malloc(sizeof(*s));
    if (!s) {
        sbx_proc_unref(p);
        sbx_grpc_reply(req, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    s->req = req;
    s->id = r->process_id;
    if (r->payload_case == PROCESS__V1__WRITE_STDIN_REQUEST__PAYLOAD_EOF)
        rc = sbx_proc_close_stdin(p, stdin_written, s, &e);
    else
        rc = sbx_proc_write(p, r->input.data, r->input.len, stdin_written, s, &e);
    if (rc == 0 && r->payload_case == PROCESS__V1__WRITE_STDIN_REQUEST__PAYLOAD_INPUT)
        sbx_metrics_bytes_in(r->input.len);
    sbx_proc_unref(p);
    if (rc < 0) {
        snprintf(msg, sizeof(msg), "failed to write stdin: %s", e.msg);
        sbx_grpc_reply(req, NULL,
                       rc == -EPIPE ? GRPC_STATUS_FAILED_PRECONDITION : sbx_grpc_status(rc), msg);
        free(s);
    }
}

static const char *signal_name(int v)
{
    const ProtobufCEnumValue *ev =
        protobuf_c_enum_descriptor_get_value(&process__v1__signal__descriptor, v);
    return ev ? ev->name : NULL;
}

static void handle_send_signal(struct sbx_grpc_req *req)
{
    _cleanup_pb_ ProtobufCMessage *m =
        sbx_grpc_unpack_req(req, &process__v1__send_signal_request__descriptor);
    Process__V1__SendSignalRequest *r = (Process__V1__SendSignalRequest *)m;
    Process__V1__SendSignalResponse resp = PROCESS__V1__SEND_SIGNAL_RESPONSE__INIT;
    struct sbx_error e = {0};
    struct sbx_proc *p;
    char msg[384];
    int sig, rc;

    if (!m)
        return;
    p = lookup(req, r->process_id);
    if (!p)
        return;
    switch ((int)r->signal) {
    case PROCESS__V1__SIGNAL__SIGNAL_SIGINT:
        sig = SIGINT;
        break;
    case PROCESS__V1__SIGNAL__SIGNAL_SIGKILL:
        sig = SIGKILL;
        break;
    case PROCESS__V1__SIGNAL__SIGNAL_SIGTERM:
        sig = SIGTERM;
        break;
    default:
        sbx_proc_unref(p);
        if (signal_name((int)r->signal))
            snprintf(msg, sizeof(msg), "unsupported or unspecified signal: %s",
                     signal_name((int)r->signal));
        else
            snprintf(msg, sizeof(msg), "unsupported or unspecified signal: %d", (int)r->signal);
        sbx_grpc_reply(req, NULL, GRPC_STATUS_INVALID_ARGUMENT, msg);
        return;
    }
    rc = sbx_proc_signal(p, sig, &e);
    sbx_proc_unref(p);
    if (rc < 0) {
        snprintf(msg, sizeof(msg), "failed to send signal: %s", e.msg);
        sbx_grpc_reply(req, NULL, GRPC_STATUS_INTERNAL, msg);
        return;
    }
    sbx_grpc_reply(req, &resp.base, GRPC_STATUS_OK, NULL);
}

static void handle_resize(struct sbx_grpc_req *req)
{
    _cleanup_pb_ ProtobufCMessage *m =
        sbx_grpc_unpack_req(req, &process__v1__resize_ttyrequest__descriptor);
    Process__V1__ResizeTTYRequest *r = (Process__V1__ResizeTTYRequest *)m;
    Process__V1__ResizeTTYResponse resp = PROCESS__V1__RESIZE_TTYRESPONSE__INIT;
    struct sbx_error e = {0};
    struct sbx_proc *p;
    char msg[384];
    int rc;

    if (!m)
        return;
    if (r->cols > 0xffff || r->rows > 0xffff) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_INVALID_ARGUMENT,
                       "cols and rows must be below 65536");
        return;
    }
    p = lookup(req, r->process_id);
    if (!p)
        return;
    rc = sbx_proc_resize(p, (unsigned short)r->cols, (unsigned short)r->rows, &e);
    sbx_proc_unref(p);
    if (rc < 0) {
        snprintf(msg, sizeof(msg), "failed to resize TTY: %s", e.msg);
        sbx_grpc_reply(req, NULL, GRPC_STATUS_FAILED_PRECONDITION, msg);
        return;
    }
    sbx_grpc_reply(req, &resp.base, GRPC_STATUS_OK, NULL);
}

int sbx_grpc_process_register(struct sbx_grpc *srv, struct sbx_process_service *svc,
                              struct sbx_error *err)
{
    const struct sbx_grpc_method methods[] = {
        {"/process.v1.ProcessService/Start", false, handle_start, svc, 8},
        {"/process.v1.ProcessService/Execute", false, handle_execute, svc, 8},
        {"/process.v1.ProcessService/WriteStdin", false, handle_write_stdin, svc, 4},
        {"/process.v1.ProcessService/SendSignal", false, handle_send_signal, svc, 2},
        {"/process.v1.ProcessService/ResizeTTY", false, handle_resize, svc, 2},
    };

    return sbx_grpc_register(srv, methods, SBX_ARRAY_SIZE(methods), err);
}
