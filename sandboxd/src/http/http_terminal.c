/* The terminal routes: a process's pty over a WebSocket, replayed from any byte offset its ring
 * still holds, then followed; the client's binary frames are the keys typed, its text frames
 * JSON control (resize). Several clients may attach to one terminal: each sees every byte, and
 * each may type (their input interleaves as it arrives). Closing a socket never ends the
 * process; the process's exit ends every socket attached to it, with its exit detail. */
#define _GNU_SOURCE
#include "http_terminal.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cleanup.h"
#include "http_request.h"
#include "http_ws.h"
#include "jobs.h"
#include "launch.h"
#include "log.h"
#include "metrics.h"
#include "parse.h"

#define CHUNK (16 * 1024)
/* Without an offset, the replay begins this many lines from the end... */
#define REPLAY_LINES 50
/* ...within this many bytes. */
#define REPLAY_BYTES (64 * 1024)

struct term {
    struct sbx_http *h;
    struct sbx_job *job;
    struct sbx_ws *ws;
    struct sbx_job_waiter w;
    uint64_t off;  /* of the next output byte to send */
    unsigned refs; /* the socket's, an armed waiter's, a stdin write's */
    bool attached; /* the socket is open: an unattached spawned shell dies with the request */
    bool spawned;
    bool reserved; /* holds a place among the WebSockets until the upgrade */
    bool greeted, ended, closed, writing;
};

static void term_unref(struct term *t)
{
    if (--t->refs)
        return;
    sbx_job_unref(t->job);
    free(t);
}

/* The request's term, when the upgrade never came: a shell spawned for it goes too. */
static void term_drop(void *data)
{
    struct term *t = data;

    if (t->spawned && !t->attached)
        (void)sbx_job_signal(t->job, SIGKILL, SBX_SIGNAL_TREE, NULL);
    if (t->reserved)
        sbx_ws_unreserve(t->h->ws);
    term_unref(t);
}

static void send_json(struct term *t, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

    json_decref(j);
    if (s)
        (void)sbx_ws_send(t->ws, SBX_WS_TEXT, s, strlen(s));
    free(s);
}

static const char *reason_name(enum sbx_exit_reason r)
{
    static const char *const names[] = {"running",   "exited",     "signaled", "killed",
                                        "timed_out", "oom_killed", "shutdown"};

    return (size_t)r < SBX_ARRAY_SIZE(names) ? names[r] : "unknown";
}

static void send_exit(struct term *t, const struct sbx_job_info *ji)
{
    char why[64];

    send_json(t, json_pack("{s:s, s:i, s:i, s:s, s:I}", "type", "exit", "exit_code",
                           ji->ex.exit_code, "signal", ji->ex.signal, "reason",
                           reason_name(ji->reason), "offset", (json_int_t)t->off));
    if (ji->ex.signal)
        snprintf(why, sizeof(why), "process exited: signal %d", ji->ex.signal);
    else
        snprintf(why, sizeof(why), "process exited: code %d", ji->ex.exit_code);
    sbx_ws_close(t->ws, SBX_WS_NORMAL, why);
    t->ended = true;
}

static void term_woken(struct sbx_job_waiter *w);

/* Sends output from t->off on while the socket has room; then the exit, or waits for more. Runs
 * on the loop thread with the waiter disarmed. */
static void pump(struct term *t)
{
    uint8_t buf[CHUNK];

    while (!t->closed && !t->ended) {
        struct sbx_job_info ji;
        size_t room = sbx_ws_room(t->ws), n;
        uint64_t at;
        if (room < 512)
            return; /* writable() comes back */
        /* Exited first: all its output is in the ring by then, so the read after sees it. */
        sbx_job_info(t->job, &ji);
        n = sbx_job_read(t->job, SBX_STDOUT, t->off, buf, room - 256 < CHUNK ? room - 256 : CHUNK,
                         &at);
        if (at > t->off) {
            /* Gone from the ring before it could be sent: said, never silent. */
            send_json(t, json_pack("{s:s, s:I, s:I}", "type", "truncated", "from",
                                   (json_int_t)t->off, "to", (json_int_t)at));
            t->off = at;
            continue;
        }
        if (n) {
            (void)sbx_ws_send(t->ws, SBX_WS_BINARY, buf, n);
            sbx_metrics_bytes_out(n);
            t->off += n;
            continue;
        }
        if (ji.exited) {
            send_exit(t, &ji);
            return;
        }
        t->w.seen[0] = t->off;
        t->w.seen[1] = UINT64_MAX;
        t->refs++; /* the waiter's */
        if (sbx_job_watch(t->job, &t->w))
            return;
        t->refs--; /* news already */
    }
}

static void term_woken(struct sbx_job_waiter *w)
{
    struct term *t = (struct term *)((char *)w - offsetof(struct term, w));

    pump(t);
    term_unref(t); /* the waiter's */
}

static void greet(struct term *t)
{
    struct sbx_job_info ji;

    sbx_job_info(t->job, &ji);
    send_json(t, json_pack("{s:s, s:i, s:I, s:I, s:I}", "type", "attached", "id", ji.id, "offset",
                           (json_int_t)t->off, "start", (json_int_t)ji.start[0], "end",
                           (json_int_t)ji.end[0]));
    t->greeted = true;
}

static void on_writable(struct sbx_ws *ws, void *data)
{
    struct term *t = data;

    t->ws = ws;
    if (!t->greeted)
        greet(t);
    /* A waiter armed means nothing new to send: it calls pump itself. */
    if (!t->w.armed)
        pump(t);
}

static void stdin_written(void *data, int result)
{
    struct term *t = data;

    t->writing = false;
    if (!t->closed) {
        if (result < 0)
            send_json(t, json_pack("{s:s, s:s}", "type", "error", "message",
                                   result == -EPIPE ? "stdin is closed" : "writing stdin failed"));
        sbx_ws_pause(t->ws, false);
    }
    term_unref(t); /* the write's */
}

static void type_keys(struct term *t, const uint8_t *buf, size_t len)
{
    struct sbx_error e = {0};
    int r;

    if (!len)
        return;
    t->writing = true;
    t->refs++;
    sbx_ws_pause(t->ws, true); /* one write at a time: a client cannot queue without bound */
    r = sbx_proc_write(sbx_job_proc(t->job), buf, len, stdin_written, t, &e);
    if (r < 0)
        stdin_written(t, r);
    else
        sbx_metrics_bytes_in(len);
}

static void control(struct term *t, const uint8_t *buf, size_t len)
{
    json_t *j = json_loadb((const char *)buf, len, 0, NULL);
    const char *type = json_string_value(json_object_get(j, "type"));
    json_int_t cols = json_integer_value(json_object_get(j, "cols"));
    json_int_t rows = json_integer_value(json_object_get(j, "rows"));
    struct sbx_error e = {0};
    const char *err = NULL;

    if (!type) {
        err = "a control message is a JSON object with a \"type\"";
    } else if (strcmp(type, "resize") == 0) {
        if (cols < 1 || rows < 1 || cols > 0xffff || rows > 0xffff)
            err = "resize needs cols and rows from 1 to 65535";
        else if (sbx_proc_resize(sbx_job_proc(t->job), (unsigned short)cols, (unsigned short)rows,
                                 &e) < 0)
            err = e.msg;
    } else {
        err = "unknown control message type";
    }
    json_decref(j);
    if (err)
        send_json(t, json_pack("{s:s, s:s}", "type", "error", "message", err));
}

static void on_message(struct sbx_ws *ws, void *data, const struct sbx_ws_msg *m)
{
    struct term *t = data;

    t->ws = ws;
    if (m->op == SBX_WS_BINARY)
        type_keys(t, m->data, m->len);
    else
        control(t, m->data, m->len);
}

static void on_closed(struct sbx_ws *ws, void *data)
{
    struct term *t = data;

    (void)ws;
    t->closed = true;
    t->ws = NULL;
    if (sbx_job_unwatch(t->job, &t->w))
        term_unref(t); /* the waiter's: it will not run */
    sbx_metrics_terminal(false);
    term_unref(t); /* the socket's */
}

static const struct sbx_ws_ops term_ops = {
    .message = on_message, .writable = on_writable, .closed = on_closed};

/* ------------------------------------------------------------------------------------------ */
/* The handshake */

static void release_upgraded(void *arg)
{
    MHD_upgrade_action(arg, MHD_UPGRADE_ACTION_CLOSE);
}

static void on_upgraded(void *cls, struct MHD_Connection *conn, void *req_cls, const char *extra,
                        size_t extra_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
    struct sbx_http *h = cls;
    struct hreq *r = req_cls;
    struct term *t = r ? r->upgrade_data : NULL;
    struct sbx_error e = {0};

    (void)conn;
    if (!t) {
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
        return;
    }
    r->upgrade_data = NULL;
    r->upgrade_drop = NULL;
    t->attached = true;
    t->reserved = false; /* sbx_ws_open takes the place */
    sbx_metrics_terminal(true);
    if (sbx_ws_open(h->ws, sock, (const uint8_t *)extra, extra_size, release_upgraded, urh,
                    &term_ops, t, &e) < 0) {
        log_info("http: terminal not opened: %s", e.msg);
        sbx_metrics_terminal(false);
        term_unref(t);
    }
}

static bool has_token(const char *list, const char *token)
{
    size_t n = strlen(token);

    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (strncasecmp(p, token, n) == 0 && (p[n] == '\0' || p[n] == ',' || p[n] == ' '))
            return true;
        p = strchr(p, ',');
    }
    return false;
}

/* A browser page of another origin may not open a terminal here (RFC 6455 §10.2): the Origin
 * a browser sends must name the host the request went to. Other clients send none. */
static bool same_origin(struct hctx *c)
{
    const char *origin = sbx_http_header(c, "Origin");
    const char *host = sbx_http_header(c, MHD_HTTP_HEADER_HOST);
    const char *sep;

    if (!origin)
        return true;
    sep = strstr(origin, "://");
    return sep && host && strcasecmp(sep + 3, host) == 0;
}

/* Checks the client's handshake (RFC 6455 §4.2.1); true when it answered a refusal. */
static bool handshake_refused(struct hctx *c, enum MHD_Result *ret)
{
    const char *version = sbx_http_header(c, "Sec-WebSocket-Version");
    struct MHD_Response *resp;

    if (!has_token(sbx_http_header(c, MHD_HTTP_HEADER_UPGRADE), "websocket") ||
        !has_token(sbx_http_header(c, MHD_HTTP_HEADER_CONNECTION), "upgrade")) {
        resp = sbx_http_json_response(json_pack("{s:s, s:s}", "code", "UPGRADE_REQUIRED", "message",
                                                "this route is a WebSocket"));
        if (resp)
            MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, "websocket");
        *ret = sbx_http_queue(c, 426, resp);
        return true;
    }
    if (!version || strcmp(version, "13") != 0) {
        resp = sbx_http_json_response(json_pack("{s:s, s:s}", "code", "UPGRADE_REQUIRED", "message",
                                                "Sec-WebSocket-Version must be 13"));
        if (resp)
            MHD_add_response_header(resp, "Sec-WebSocket-Version", "13");
        *ret = sbx_http_queue(c, 426, resp);
        return true;
    }
    if (!sbx_ws_key_valid(sbx_http_header(c, "Sec-WebSocket-Key"))) {
        *ret = sbx_http_respond_error(c, 400, "INVALID_ARGUMENT",
                                      "Sec-WebSocket-Key must be 16 bytes in base64");
        return true;
    }
    return false;
}

/* Answers 101 and hands t to the upgrade (t taken either way). */
static enum MHD_Result upgrade(struct hctx *c, struct term *t)
{
    struct MHD_Response *resp;
    char accept[29];

    if (sbx_ws_reserve(c->h->ws) < 0) {
        term_drop(t);
        return sbx_http_respond_error(c, 503, "RESOURCE_EXHAUSTED",
                                      "too many WebSocket connections (--max-websockets)");
    }
    t->reserved = true;
    resp = MHD_create_response_for_upgrade(on_upgraded, c->h);
    if (!resp) {
        term_drop(t);
        return MHD_NO;
    }
    sbx_ws_accept(sbx_http_header(c, "Sec-WebSocket-Key"), accept);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, "websocket");
    MHD_add_response_header(resp, "Sec-WebSocket-Accept", accept);
    c->r->upgrade_data = t;
    c->r->upgrade_drop = term_drop;
    return sbx_http_queue(c, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
}

/* What every terminal route checks first; true when it answered. */
static bool refused(struct hctx *c, enum MHD_Result *ret)
{
    if (!c->h->o.jobs || !c->h->ws) {
        *ret = sbx_http_respond_error(c, 503, "UNAVAILABLE", "terminals are not served here");
        return true;
    }
    if (__atomic_load_n(&c->h->draining, __ATOMIC_ACQUIRE)) {
        *ret = sbx_http_respond_error(c, 503, "UNAVAILABLE", "sandboxd is shutting down");
        return true;
    }
    if (handshake_refused(c, ret))
        return true;
    if (sbx_ws_set_full(c->h->ws)) {
        *ret = sbx_http_respond_error(c, 503, "RESOURCE_EXHAUSTED",
                                      "too many WebSocket connections (--max-websockets)");
        return true;
    }
    if (!same_origin(c)) {
        *ret = sbx_http_respond_error(c, 403, "PERMISSION_DENIED",
                                      "a page of another origin may not open a terminal");
        return true;
    }
    return false;
}

/* An unsigned query argument in [min, max], or def when absent; -1 when invalid. */
static long long arg_number(struct hctx *c, const char *name, long long min, long long max,
                            long long def)
{
    const char *s = sbx_http_arg(c, name);
    long long v;

    if (!s)
        return def;
    return sbx_parse_int(s, min, max, &v) < 0 ? -1 : v;
}

/* The offset a replay begins at without one asked for: REPLAY_LINES lines from the end. */
static uint64_t default_offset(struct sbx_job *job)
{
    struct sbx_job_info ji;
    uint8_t *buf;
    uint64_t from, at;
    size_t n;
    unsigned lines = 0;

    sbx_job_info(job, &ji);
    from = ji.end[0] - ji.start[0] > REPLAY_BYTES ? ji.end[0] - REPLAY_BYTES : ji.start[0];
    buf = malloc(REPLAY_BYTES);
    if (!buf)
        return from;
    n = sbx_job_read(job, SBX_STDOUT, from, buf, REPLAY_BYTES, &at);
    for (size_t i = n; i > 0; i--) {
        if (buf[i - 1] == '\n' && ++lines > REPLAY_LINES) {
            free(buf);
            return at + i;
        }
    }
    free(buf);
    return at;
}

static struct term *term_new(struct hctx *c, struct sbx_job *job, bool spawned)
{
    struct term *t = calloc(1, sizeof(*t));

    if (!t) {
        sbx_job_unref(job);
        return NULL;
    }
    t->h = c->h;
    t->job = job;
    t->refs = 1;
    t->spawned = spawned;
    t->w.fn = term_woken;
    return t;
}

enum MHD_Result sbx_http_terminal_attach(struct hctx *c)
{
    long long id = -1, off;
    const char *rest = c->path;
    struct sbx_job_info ji;
    struct sbx_job *job;
    struct term *t;
    enum MHD_Result ret;
    char num[16];
    size_t n = strspn(rest, "0123456789");

    if (n == 0 || n >= sizeof(num) || strcmp(rest + n, "/terminal") != 0)
        return sbx_http_respond_error(c, 404, "NOT_FOUND", "no such route");
    if (refused(c, &ret))
        return ret;
    memcpy(num, rest, n);
    num[n] = '\0';
    off = arg_number(c, "offset", 0, INT64_MAX, -2);
    if (sbx_parse_int(num, 1, INT32_MAX, &id) < 0 || off == -1)
        return sbx_http_respond_error(c, 400, "INVALID_ARGUMENT",
                                      id < 0 ? "invalid process id" : "invalid offset");
    job = sbx_job_get(c->h->o.jobs, (int32_t)id);
    if (!job)
        return sbx_http_respond_error(c, 404, "NOT_FOUND", "no such process");
    sbx_job_info(job, &ji);
    if (!ji.pty) {
        sbx_job_unref(job);
        return sbx_http_respond_error(c, 409, "FAILED_PRECONDITION",
                                      "the process has no terminal (spawn it with pty)");
    }
    t = term_new(c, job, false);
    if (!t)
        return sbx_http_respond_error(c, 503, "RESOURCE_EXHAUSTED", "out of memory");
    t->off = off >= 0 ? (uint64_t)off : default_offset(job);
    return upgrade(c, t);
}

/* The login shell, or "sh -lc COMMAND". */
static void shell_argv(const char *command, char *argv[4])
{
    const char *sh = access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";

    argv[0] = (char *)sh;
    argv[1] = (char *)(command ? "-lc" : "-l");
    argv[2] = (char *)command;
    argv[3] = NULL;
}

enum MHD_Result sbx_http_terminal_new(struct hctx *c)
{
    const char *command = sbx_http_arg(c, "command");
    long long cols = arg_number(c, "cols", 1, 0xffff, 80);
    long long rows = arg_number(c, "rows", 1, 0xffff, 24);
    struct sbx_launch_config lc = {0};
    struct sbx_launch l = {.cwd_fd = -1};
    struct sbx_job_spec js = {0};
    struct sbx_error e = {0};
    struct sbx_job *job = NULL;
    char *argv[4];
    struct term *t;
    enum MHD_Result ret;
    int r;

    if (refused(c, &ret))
        return ret;
    if (cols < 0 || rows < 0)
        return sbx_http_respond_error(c, 400, "INVALID_ARGUMENT",
                                      "cols and rows must be from 1 to 65535");
    if (command && !*command)
        return sbx_http_respond_error(c, 400, "INVALID_ARGUMENT", "command is empty");
    shell_argv(command, argv);
    lc.command = argv;
    lc.n_command = command ? 3 : 2;
    r = sbx_launch_config_alloc(&lc, 1, &e);
    if (r == 0) {
        lc.keys[0] = "TERM";
        lc.values[0] = "xterm-256color";
        lc.n_env = 1;
        r = sbx_launch_build(c->h->o.root, &lc, &l, &e);
    }
    if (r == 0) {
        js.proc.argv = l.argv;
        js.proc.envp = l.envp;
        js.proc.cwd_fd = l.cwd_fd;
        js.proc.pty = true;
        js.proc.cols = (unsigned short)cols;
        js.proc.rows = (unsigned short)rows;
        js.tag = "terminal";
        r = sbx_job_start(c->h->o.jobs, &js, &job, &e);
    }
    sbx_launch_release(&l);
    sbx_launch_config_release(&lc);
    if (r < 0)
        return sbx_http_respond_errno(c, r, &e);
    t = term_new(c, job, true);
    if (!t)
        return sbx_http_respond_error(c, 503, "RESOURCE_EXHAUSTED", "out of memory");
    return upgrade(c, t);
}
