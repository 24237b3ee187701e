/* filesystem.Filesystem's unary calls on the E2B port (Stat, MakeDir, Move, ListDir, Remove):
 * decode, resolve the path as envd does for the request's user, call core/userfs.h as that
 * user, map errno to envd's Connect codes, encode. The watches are e2b_fs_watch.c's. */
#define _GNU_SOURCE
#include "e2b_fs.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "connect.h"
#include "e2b/filesystem/filesystem.pb-c.h"
#include "e2b_fs_internal.h"
#include "e2b_internal.h"
#include "userfs.h"

int sbx_e2b_fs_setup(struct sbx_loop *loop, const struct sbx_e2b_fs_opts *o, struct sbx_error *err)
{
    struct e2b_fs_state *g = &sbx_e2b_fs_state;
    struct sbx_fswatches_opts wo = {
        .max_watches = o->max_watches,
        .max_per_client = o->max_watches,
        .max_dirs = o->max_dirs,
        .queue_events = o->queue_events,
        .retain_ms = 1000, /* a reader that went is not resumed on this port */
        .keepalive_ms = o->keepalive_ms,
    };
    int r;

    g->o = *o;
    g->slash.fd = -1;
    r = sbx_root_open(&g->slash, "/", err);
    if (r < 0)
        return r;
    r = sbx_fswatches_new(&g->watches, loop, &g->slash, &wo, err);
    if (r < 0) {
        sbx_root_release(&g->slash);
        return r;
    }
    pthread_mutex_init(&g->lock, NULL);
    g->ready = true;
    return 0;
}

void sbx_e2b_fs_shutdown(void)
{
    if (sbx_e2b_fs_state.ready)
        sbx_fswatches_shutdown(sbx_e2b_fs_state.watches);
}

void sbx_e2b_fs_teardown(void)
{
    struct e2b_fs_state *g = &sbx_e2b_fs_state;

    if (!g->ready)
        return;
    sbx_e2b_fs_watchers_clear();
    sbx_fswatches_free(g->watches);
    sbx_root_release(&g->slash);
    pthread_mutex_destroy(&g->lock);
    g->ready = false;
}

/* The request's user as credentials, and path resolved for them; fails the call if it cannot. */
static bool begin(struct sbx_e2b_call *c, const char *path, struct sbx_cred *cred, char **abs)
{
    const struct sbx_e2b_user *u = sbx_e2b_call_user(c);
    struct sbx_error err = {0};
    int r;

    if (!sbx_e2b_fs_state.ready) {
        sbx_e2b_call_fail(c, SBX_CONNECT_UNAVAILABLE, "the filesystem service is not set up");
        return false;
    }
    sbx_e2b_cred_of(u, cred);
    r = sbx_e2b_fs_resolve(sbx_e2b_call_server(c), u, path, abs, &err);
    if (r < 0)
        sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT, "%s", err.msg);
    return r == 0;
}

static void fail(struct sbx_e2b_call *c, int r, const struct sbx_error *err)
{
    sbx_e2b_call_fail(c, sbx_e2b_fs_code(r), "%s", err->msg);
}

/* Sends a response whose field entry is u's. */
static void send_entry(struct sbx_e2b_call *c, ProtobufCMessage *resp, Filesystem__EntryInfo **f,
                       const struct sbx_ufs_entry *u)
{
    struct e2b_pb_entry p;

    sbx_e2b_fs_entry_pb(u, &p);
    *f = &p.e;
    if (sbx_e2b_call_send(c, resp) < 0)
        sbx_e2b_call_fail(c, SBX_CONNECT_INTERNAL, "cannot encode the answer");
    sbx_e2b_fs_entry_pb_release(&p);
}

/* The operations that answer with one entry: a path (two for a move) to an entry. */
typedef int (*entry_op)(const struct sbx_cred *cred, const char *a, const char *b,
                        struct sbx_ufs_entry *ret, struct sbx_error *err);

static int op_stat(const struct sbx_cred *cred, const char *a, const char *b,
                   struct sbx_ufs_entry *ret, struct sbx_error *err)
{
    (void)b;
    return sbx_ufs_stat(cred, a, ret, err);
}

static int op_mkdir(const struct sbx_cred *cred, const char *a, const char *b,
                    struct sbx_ufs_entry *ret, struct sbx_error *err)
{
    (void)b;
    return sbx_ufs_mkdir(sbx_e2b_fs_slash(), cred, a, ret, err);
}

static int op_move(const struct sbx_cred *cred, const char *a, const char *b,
                   struct sbx_ufs_entry *ret, struct sbx_error *err)
{
    return sbx_ufs_move(sbx_e2b_fs_slash(), cred, a, b, ret, err);
}

/* Resolves path (and path2, unless NULL), runs op as the user, answers resp with the entry in
 * its field. */
static void answer_entry(struct sbx_e2b_call *c, const char *path, const char *path2, entry_op op,
                         ProtobufCMessage *resp, Filesystem__EntryInfo **field)
{
    _cleanup_free_ char *a = NULL, *b = NULL;
    struct sbx_ufs_entry e = {0};
    struct sbx_error err = {0};
    struct sbx_cred cred;
    int r;

    if (!begin(c, path, &cred, &a) || (path2 && !begin(c, path2, &cred, &b)))
        return;
    r = op(&cred, a, b, &e, &err);
    if (r < 0) {
        fail(c, r, &err);
        return;
    }
    send_entry(c, resp, field, &e);
    sbx_ufs_entry_release(&e);
}

static void fs_stat(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    const Filesystem__StatRequest *q = (const Filesystem__StatRequest *)req;
    Filesystem__StatResponse resp = FILESYSTEM__STAT_RESPONSE__INIT;

    answer_entry(c, q->path, NULL, op_stat, &resp.base, &resp.entry);
}

static void fs_make_dir(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    const Filesystem__MakeDirRequest *q = (const Filesystem__MakeDirRequest *)req;
    Filesystem__MakeDirResponse resp = FILESYSTEM__MAKE_DIR_RESPONSE__INIT;

    answer_entry(c, q->path, NULL, op_mkdir, &resp.base, &resp.entry);
}

static void fs_move(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    const Filesystem__MoveRequest *q = (const Filesystem__MoveRequest *)req;
    Filesystem__MoveResponse resp = FILESYSTEM__MOVE_RESPONSE__INIT;

    answer_entry(c, q->source, q->destination, op_move, &resp.base, &resp.entry);
}

static void fs_remove(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    const Filesystem__RemoveRequest *q = (const Filesystem__RemoveRequest *)req;
    Filesystem__RemoveResponse resp = FILESYSTEM__REMOVE_RESPONSE__INIT;
    _cleanup_free_ char *abs = NULL;
    struct sbx_error err = {0};
    struct sbx_cred cred;
    int r;

    if (!begin(c, q->path, &cred, &abs))
        return;
    r = sbx_ufs_remove(sbx_e2b_fs_slash(), &cred, abs, &err);
    if (r < 0) {
        fail(c, r, &err);
        return;
    }
    if (sbx_e2b_call_send(c, &resp.base) < 0)
        sbx_e2b_call_fail(c, SBX_CONNECT_INTERNAL, "cannot encode the answer");
}

static void fs_list_dir(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    const Filesystem__ListDirRequest *q = (const Filesystem__ListDirRequest *)req;
    Filesystem__ListDirResponse resp = FILESYSTEM__LIST_DIR_RESPONSE__INIT;
    _cleanup_free_ struct e2b_pb_entry *pb = NULL;
    _cleanup_free_ Filesystem__EntryInfo **ptrs = NULL;
    _cleanup_free_ char *abs = NULL;
    struct sbx_ufs_entry *es = NULL;
    struct sbx_error err = {0};
    struct sbx_cred cred;
    size_t n = 0;
    int r;

    if (!begin(c, q->path, &cred, &abs))
        return;
    r = sbx_ufs_list(&cred, abs, q->depth, &es, &n, &err);
    if (r < 0) {
        fail(c, r, &err);
        return;
    }
    pb = calloc(n ? n : 1, sizeof(*pb));
    ptrs = calloc(n ? n : 1, sizeof(*ptrs));
    if (!pb || !ptrs) {
        sbx_ufs_entries_free(es, n);
        sbx_e2b_call_fail(c, SBX_CONNECT_RESOURCE_EXHAUSTED, "no memory for the listing");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        sbx_e2b_fs_entry_pb(&es[i], &pb[i]);
        ptrs[i] = &pb[i].e;
    }
    resp.n_entries = n;
    resp.entries = ptrs;
    if (sbx_e2b_call_send(c, &resp.base) < 0)
        sbx_e2b_call_fail(c, SBX_CONNECT_INTERNAL, "cannot encode the answer");
    for (size_t i = 0; i < n; i++)
        sbx_e2b_fs_entry_pb_release(&pb[i]);
    sbx_ufs_entries_free(es, n);
}

static const Filesystem__WatchDirResponse__KeepAlive keepalive_event =
    FILESYSTEM__WATCH_DIR_RESPONSE__KEEP_ALIVE__INIT;
static const Filesystem__WatchDirResponse keepalive = {
    PROTOBUF_C_MESSAGE_INIT(&filesystem__watch_dir_response__descriptor),
    FILESYSTEM__WATCH_DIR_RESPONSE__EVENT_KEEPALIVE,
    {.keepalive = (Filesystem__WatchDirResponse__KeepAlive *)&keepalive_event},
};

#define METHOD(name, req, resp, handler)                                                           \
    {                                                                                              \
        .path = "/filesystem.Filesystem/" name, .in = &filesystem__##req##__descriptor,            \
        .out = &filesystem__##resp##__descriptor, .fn = handler,                                   \
    }

const struct sbx_e2b_method sbx_e2b_fs_methods[] = {
    METHOD("Stat", stat_request, stat_response, fs_stat),
    METHOD("MakeDir", make_dir_request, make_dir_response, fs_make_dir),
    METHOD("Move", move_request, move_response, fs_move),
    METHOD("ListDir", list_dir_request, list_dir_response, fs_list_dir),
    METHOD("Remove", remove_request, remove_response, fs_remove),
    {.path = "/filesystem.Filesystem/WatchDir",
     .in = &filesystem__watch_dir_request__descriptor,
     .out = &filesystem__watch_dir_response__descriptor,
     .server_streaming = true,
     .fn = sbx_e2b_fs_watch_dir,
     .keepalive = &keepalive.base},
    METHOD("CreateWatcher", create_watcher_request, create_watcher_response,
           sbx_e2b_fs_create_watcher),
    METHOD("GetWatcherEvents", get_watcher_events_request, get_watcher_events_response,
           sbx_e2b_fs_get_watcher_events),
    METHOD("RemoveWatcher", remove_watcher_request, remove_watcher_response,
           sbx_e2b_fs_remove_watcher),
};

const size_t sbx_e2b_fs_n_methods = SBX_ARRAY_SIZE(sbx_e2b_fs_methods);
