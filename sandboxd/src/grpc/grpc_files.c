/* sandboxd.v1.Files/Watch: a watch's events as a server stream, one message in flight at a
 * time (a client that does not read holds nothing but the watch's bounded log). */
#define _GNU_SOURCE
#include "grpc_files.h"

#include <errno.h>
#include <grpc/support/alloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "grpc_stream.h"
#include "utf8.h"
#include "sandboxd/v1/files.pb-c.h"

#define MIN_RESCAN_MS 100

struct watch_call {
    struct sbx_grpc_stream *st;
    struct sbx_fswatch *r;
    struct sbx_fswatch_waiter wt;
};

/* A path as a proto string (UTF-8: other bytes become U+FFFD in *clean) and, when it is not
 * UTF-8, its exact bytes. */
static char *path_field(char *p, char **clean, ProtobufCBinaryData *raw)
{
    if (!p)
        return (char *)"";
    if (sbx_utf8_valid(p))
        return p;
    raw->data = (uint8_t *)p;
    raw->len = strlen(p);
    *clean = sbx_utf8_sanitize(p);
    return *clean ? *clean : (char *)"";
}

/* Sends ev; returns what sbx_grpc_stream_send does. */
static int send_event(struct watch_call *c, struct sbx_fsev *ev)
{
    Sandboxd__V1__WatchEvent m = SANDBOXD__V1__WATCH_EVENT__INIT;
    Sandboxd__V1__WatchOverflow o = SANDBOXD__V1__WATCH_OVERFLOW__INIT;
    Sandboxd__V1__WatchReady rd = SANDBOXD__V1__WATCH_READY__INIT;
    _cleanup_free_ char *clean_path = NULL, *clean_from = NULL;

    m.seq = ev->seq;
    m.kind = (Sandboxd__V1__WatchEventKind)ev->kind; /* the same numbers */
    m.dir = ev->dir;
    if (ev->kind == SBX_FSEV_OVERFLOW) {
        o.from = ev->lost_from;
        o.to = ev->lost_to;
        o.rescan = true;
        o.reason = (char *)(ev->reason ? ev->reason : "");
        m.overflow = &o;
    } else if (ev->kind == SBX_FSEV_READY) {
        rd.watch_id = (char *)ev->watch_id;
        rd.resumed = ev->resumed;
        rd.directories = ev->dirs;
        m.ready = &rd;
    } else {
        m.path = path_field(ev->path, &clean_path, &m.path_bytes);
        if (ev->kind == SBX_FSEV_RENAME) {
            m.from = path_field(ev->from, &clean_from, &m.from_bytes);
            m.to = m.path;
        }
    }
    return sbx_grpc_stream_send(c->st, &m.base, 0);
}

static grpc_status_code end_status(int rc)
{
    switch (-rc) {
    case EBUSY:
        return GRPC_STATUS_ABORTED;
    case EMFILE:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    default:
        return sbx_grpc_status(rc);
    }
}

/* Arms the waiter; false when there is news already (read again). */
static bool watch_wait(struct watch_call *c)
{
    sbx_grpc_stream_ref(c->st); /* the waiter's */
    if (sbx_fswatch_wait(c->r, &c->wt)) {
        /* Closed meanwhile, before its handler could disarm: disarm here. */
        if (sbx_grpc_stream_over(c->st) && sbx_fswatch_unwait(c->r, &c->wt))
            sbx_grpc_stream_unref(c->st);
        return true;
    }
    sbx_grpc_stream_unref(c->st);
    return false;
}

/* Sends the next event, or arms the waiter when there is none yet. Runs with no send in flight
 * and the waiter disarmed. */
static void watch_pump(struct watch_call *c)
{
    struct sbx_error e = {0};
    struct sbx_fsev ev;
    int rc;

    do {
        if (sbx_grpc_stream_over(c->st))
            return;
        rc = sbx_fswatch_next(c->r, &ev, &e);
        if (rc == 1) {
            (void)send_event(c, &ev);
            sbx_fsev_release(&ev);
            return;
        }
        if (rc < 0) {
            (void)sbx_grpc_stream_finish(c->st, NULL, end_status(rc), e.msg);
            return;
        }
    } while (!watch_wait(c));
}

static void watch_woken(struct sbx_fswatch_waiter *wt)
{
    struct watch_call *c = (struct watch_call *)((char *)wt - offsetof(struct watch_call, wt));

    watch_pump(c);
    sbx_grpc_stream_unref(c->st); /* the waiter's */
}

static void watch_sent(void *data, bool ok, bool final)
{
    if (ok && !final)
        watch_pump(data);
}

static void watch_closed(void *data, bool cancelled)
{
    struct watch_call *c = data;

    (void)cancelled;
    if (sbx_fswatch_unwait(c->r, &c->wt))
        sbx_grpc_stream_unref(c->st); /* the waiter's: it will not run */
}

/* The watch is kept for a resume (the core's retention). */
static void watch_release(void *data)
{
    struct watch_call *c = data;

    sbx_fswatch_close(c->r);
    free(c);
}

static const struct sbx_grpc_stream_ops watch_ops = {
    .sent = watch_sent, .closed = watch_closed, .release = watch_release};

/* The client's address without its port ("10.0.0.1", "::1"), as the REST route names it, for
 * the per-client limit. */
static void peer_of(struct sbx_grpc_req *req, char *out, size_t len)
{
    char *peer = grpc_call_get_peer(req->call);
    const char *p = peer ? peer : "?";
    char *colon;
    size_t n;

    if (strncmp(p, "ipv4:", 5) == 0 || strncmp(p, "ipv6:", 5) == 0)
        p += 5;
    if (*p == '[')
        p++;
    snprintf(out, len, "%s", p);
    gpr_free(peer);
    colon = strrchr(out, ':');
    if (colon && (strchr(out, '.') || colon[-1] == ']'))
        *colon = '\0'; /* the port */
    n = strlen(out);
    if (n && out[n - 1] == ']')
        out[n - 1] = '\0';
}

static int check_request(const Sandboxd__V1__WatchRequest *r, char *msg, size_t len)
{
    if (r->rescan_interval_ms && r->rescan_interval_ms < MIN_RESCAN_MS)
        return snprintf(msg, len, "rescan_interval_ms must be 0 or at least %d", MIN_RESCAN_MS);
    if (r->since && !r->watch_id[0])
        return snprintf(msg, len, "since needs watch_id (the watch to resume)");
    for (size_t i = 0; i < r->n_include; i++)
        if (!sbx_utf8_valid(r->include[i]))
            return snprintf(msg, len, "include[%zu] is not UTF-8", i);
    for (size_t i = 0; i < r->n_exclude; i++)
        if (!sbx_utf8_valid(r->exclude[i]))
            return snprintf(msg, len, "exclude[%zu] is not UTF-8", i);
    return 0;
}

static void handle_watch(struct sbx_grpc_req *req)
{
    _cleanup_pb_ ProtobufCMessage *m =
        sbx_grpc_unpack_req(req, &sandboxd__v1__watch_request__descriptor);
    const Sandboxd__V1__WatchRequest *r = (const Sandboxd__V1__WatchRequest *)m;
    struct sbx_files_service *svc = req->method_data;
    struct sbx_fswatch_spec s = {0};
    struct sbx_error e = {0};
    struct watch_call *c;
    char client[128], msg[256];
    int rc;

    if (!m)
        return;
    if (check_request(r, msg, sizeof(msg)) > 0) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_INVALID_ARGUMENT, msg);
        return;
    }
    peer_of(req, client, sizeof(client));
    s = (struct sbx_fswatch_spec){.path = r->path[0] ? r->path : ".",
                                  .recursive = r->recursive,
                                  .include = r->include,
                                  .n_include = r->n_include,
                                  .exclude = r->exclude,
                                  .n_exclude = r->n_exclude,
                                  .rescan_ms = r->rescan_interval_ms,
                                  .client = client,
                                  .resume_id = r->watch_id,
                                  .since = r->since};
    c = calloc(1, sizeof(*c));
    if (!c) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    c->wt.fn = watch_woken;
    rc = sbx_fswatch_open(svc->watches, &s, &c->r, &e);
    if (rc < 0) {
        free(c);
        sbx_grpc_reply(req, NULL, end_status(rc), e.msg);
        return;
    }
    if (sbx_grpc_stream_new(req, &watch_ops, c, &c->st) < 0) {
        sbx_fswatch_close(c->r);
        free(c);
        sbx_grpc_reply(req, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    watch_pump(c);
    sbx_grpc_stream_unref(c->st); /* ours */
}

int sbx_grpc_files_register(struct sbx_grpc *srv, struct sbx_files_service *svc,
                            struct sbx_error *err)
{
    const struct sbx_grpc_method methods[] = {
        {"/sandboxd.v1.Files/Watch", false, handle_watch, svc, 4},
    };

    return sbx_grpc_register(srv, methods, SBX_ARRAY_SIZE(methods), err);
}
