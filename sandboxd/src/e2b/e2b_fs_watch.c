/* filesystem.Filesystem's watches on the daemon's directory watches (core/fswatch.h), on a root
 * of "/": WatchDir, a server stream, and the polling trio CreateWatcher / GetWatcherEvents /
 * RemoveWatcher the synchronous SDK uses. The user must be able to read the directory (checked
 * as them, userfs.h); the daemon then watches it. Events map onto envd's: a rename within the
 * tree becomes envd's pair (rename of the old name, create of the new one); the daemon's ready
 * and overflow events have no envd counterpart and are not sent. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "cleanup.h"
#include "connect.h"
#include "e2b_fs_internal.h"
#include "e2b_internal.h"

#define MAX_POLL_EVENTS 1024 /* one GetWatcherEvents answer; the rest wait for the next */

/* One event of envd's, with the entry when asked for and there is one. */
struct pb_event {
    Filesystem__FilesystemEvent ev;
    struct e2b_pb_entry pe;
    struct sbx_ufs_entry e;
    char *path;
    char *name; /* owned when set (a kept event), else ev.name is borrowed */
};

static void pb_event_release(struct pb_event *p)
{
    sbx_e2b_fs_entry_pb_release(&p->pe);
    sbx_ufs_entry_release(&p->e);
    free(p->path);
    free(p->name);
}

/* Fills p for the event named name (relative to dir) of type t; the entry of create, write
 * and chmod events when include (stat as the user; none when it is gone already). */
static void pb_event(struct pb_event *p, const char *dir, const char *name, Filesystem__EventType t,
                     bool include, const struct sbx_cred *cred)
{
    memset(p, 0, sizeof(*p));
    filesystem__filesystem_event__init(&p->ev);
    p->ev.name = (char *)name;
    p->ev.type = t;
    if (!include || t == FILESYSTEM__EVENT_TYPE__EVENT_TYPE_REMOVE ||
        t == FILESYSTEM__EVENT_TYPE__EVENT_TYPE_RENAME)
        return;
    if (asprintf(&p->path, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", name) < 0) {
        p->path = NULL;
        return;
    }
    if (sbx_ufs_stat(cred, p->path, &p->e, NULL) < 0)
        return;
    sbx_e2b_fs_entry_pb(&p->e, &p->pe);
    p->ev._entry_case = FILESYSTEM__FILESYSTEM_EVENT___ENTRY_ENTRY;
    p->ev.entry = &p->pe.e;
}

static Filesystem__EventType type_of(enum sbx_fsev_kind k)
{
    switch (k) {
    case SBX_FSEV_CREATE:
        return FILESYSTEM__EVENT_TYPE__EVENT_TYPE_CREATE;
    case SBX_FSEV_WRITE:
        return FILESYSTEM__EVENT_TYPE__EVENT_TYPE_WRITE;
    case SBX_FSEV_CHMOD:
        return FILESYSTEM__EVENT_TYPE__EVENT_TYPE_CHMOD;
    case SBX_FSEV_REMOVE:
        return FILESYSTEM__EVENT_TYPE__EVENT_TYPE_REMOVE;
    case SBX_FSEV_RENAME:
        return FILESYSTEM__EVENT_TYPE__EVENT_TYPE_RENAME;
    default:
        return FILESYSTEM__EVENT_TYPE__EVENT_TYPE_UNSPECIFIED;
    }
}

/* Whether the user may list the directory holding name (beneath dir); the watched directory
 * itself they were checked for. */
static bool visible(const char *dir, const char *name, const struct sbx_cred *cred)
{
    _cleanup_free_ char *path = NULL;

    if (!name || !strchr(name, '/'))
        return true;
    if (asprintf(&path, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", name) < 0)
        return false;
    return sbx_ufs_may_list_parent(cred, path, NULL) == 0;
}

/* Hands envd's events for ev to fn (one, two for a rename, none for the daemon's own kinds);
 * stops at fn's first failure and returns it. */
static int each_event(const struct sbx_fsev *ev, const char *dir, bool include,
                      const struct sbx_cred *cred, int (*fn)(void *, struct pb_event *), void *arg)
{
    Filesystem__EventType t = type_of(ev->kind);
    struct pb_event p;
    int r;

    if (t == FILESYSTEM__EVENT_TYPE__EVENT_TYPE_UNSPECIFIED)
        return 0;
    /* The daemon watches a whole tree, the user may not list all of it: what happens in a
     * directory they may not read is not theirs to see (a move between such a directory and
     * one they may read shows as a create or a rename alone). */
    if (ev->kind == SBX_FSEV_RENAME) {
        if (visible(dir, ev->from, cred)) {
            pb_event(&p, dir, ev->from ? ev->from : "", t, include, cred);
            r = fn(arg, &p);
            pb_event_release(&p);
            if (r < 0)
                return r;
        }
        t = FILESYSTEM__EVENT_TYPE__EVENT_TYPE_CREATE;
    }
    if (!visible(dir, ev->path, cred))
        return 0;
    pb_event(&p, dir, ev->path ? ev->path : "", t, include, cred);
    r = fn(arg, &p);
    pb_event_release(&p);
    return r;
}

/* Opens a watch of path for the call's user; fails the call when it cannot. */
static struct sbx_fswatch *open_watch(struct sbx_e2b_call *c, const char *path, bool recursive,
                                      bool network_ok, struct sbx_cred *cred, char **abs)
{
    const struct sbx_e2b_user *u = sbx_e2b_call_user(c);
    struct sbx_fswatch_spec spec = {.recursive = recursive, .client = u->name};
    struct sbx_fswatch *w = NULL;
    struct sbx_error err = {0};
    int r;

    if (!sbx_e2b_fs_state.ready) {
        sbx_e2b_call_fail(c, SBX_CONNECT_UNAVAILABLE, "directory watches are off");
        return NULL;
    }
    sbx_e2b_cred_of(u, cred);
    r = sbx_e2b_fs_resolve(sbx_e2b_call_server(c), u, path, abs, &err);
    if (r < 0) {
        sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT, "%s", err.msg);
        return NULL;
    }
    r = sbx_ufs_check_dir(cred, *abs, network_ok, &err);
    spec.path = *abs;
    if (r == 0)
        r = sbx_fswatch_open(sbx_e2b_fs_state.watches, &spec, &w, &err);
    if (r < 0) {
        sbx_e2b_call_fail(c, sbx_e2b_fs_code(r), "%s", err.msg);
        free(*abs);
        *abs = NULL;
        return NULL;
    }
    return w;
}

/* ------------------------------------------------------------------------------------------ */
/* WatchDir: a stream fed from the watch's log. It is pumped by whoever may have news: the
 * handler, the watch's waiter (the loop thread: an event, the end, or the keepalive period)
 * and the call's drain callback (a full stream emptied). The call's gone callback closes the
 * watch as soon as the request is over. */

struct wstream {
    pthread_mutex_t lock;
    int refs; /* the stream's, the armed waiter's, the armed drain's, the gone callback's */
    struct sbx_e2b_call *call; /* referenced */
    struct sbx_fswatch *w;     /* NULL once closed */
    struct sbx_fswatch_waiter wt;
    bool draining; /* a drain callback is armed */
    bool include;
    char *dir;
    struct sbx_cred cred;
};

static void wstream_unref(struct wstream *s)
{
    if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    sbx_e2b_call_unref(s->call);
    free(s->dir);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Under lock: the watch goes; true when the caller drops the stream's reference. */
static bool close_locked(struct wstream *s)
{
    if (!s->w)
        return false;
    if (sbx_fswatch_unwait(s->w, &s->wt))
        __atomic_sub_fetch(&s->refs, 1, __ATOMIC_RELAXED); /* the waiter's; ours remains */
    sbx_fswatch_close(s->w);
    s->w = NULL;
    return true;
}

/* The watch goes now (from any thread but under no lock of the stream's). */
static void close_stream(struct wstream *s)
{
    bool drop;

    pthread_mutex_lock(&s->lock);
    drop = close_locked(s);
    pthread_mutex_unlock(&s->lock);
    if (drop)
        wstream_unref(s);
}

static int send_event(void *arg, struct pb_event *p)
{
    struct wstream *s = arg;
    Filesystem__WatchDirResponse m = FILESYSTEM__WATCH_DIR_RESPONSE__INIT;

    m.event_case = FILESYSTEM__WATCH_DIR_RESPONSE__EVENT_FILESYSTEM;
    m.filesystem = &p->ev;
    return sbx_e2b_call_send(s->call, &m.base);
}

static void drained(void *arg);

/* Under lock: sends what the log holds until it is empty (the waiter armed), the stream is
 * full (the drain armed) or the watch or the call ended. True when the stream is over. */
static bool pump_locked(struct wstream *s)
{
    while (s->w && !s->draining) {
        struct sbx_error err = {0};
        struct sbx_fsev ev;
        int r;

        if (sbx_e2b_call_gone(s->call))
            return true;
        __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
        if (!sbx_e2b_call_writable(s->call, drained, s)) {
            s->draining = true;
            return false;
        }
        __atomic_sub_fetch(&s->refs, 1, __ATOMIC_RELAXED);
        r = sbx_fswatch_next(s->w, &ev, &err);
        if (r < 0) {
            sbx_e2b_call_fail(s->call, sbx_e2b_fs_code(r), "watcher error: %s", err.msg);
            return true;
        }
        if (r == 1) {
            r = each_event(&ev, s->dir, s->include, &s->cred, send_event, s);
            sbx_fsev_release(&ev);
            if (r < 0)
                return true;
            continue;
        }
        __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
        if (sbx_fswatch_wait(s->w, &s->wt))
            return false;
        __atomic_sub_fetch(&s->refs, 1, __ATOMIC_RELAXED);
    }
    return false;
}

static void pump(struct wstream *s)
{
    bool drop = false;

    pthread_mutex_lock(&s->lock);
    if (pump_locked(s))
        drop = close_locked(s);
    pthread_mutex_unlock(&s->lock);
    if (drop)
        wstream_unref(s);
}

static void woken(struct sbx_fswatch_waiter *wt)
{
    struct wstream *s = (struct wstream *)((char *)wt - offsetof(struct wstream, wt));

    pump(s);
    wstream_unref(s); /* the waiter's */
}

static void drained(void *arg)
{
    struct wstream *s = arg;

    pthread_mutex_lock(&s->lock);
    s->draining = false;
    pthread_mutex_unlock(&s->lock);
    pump(s);
    wstream_unref(s); /* the drain's */
}

/* The request is over (the client went, or the end was sent): the watch goes. */
static void stream_gone(void *arg)
{
    struct wstream *s = arg;

    close_stream(s);
    wstream_unref(s); /* the gone callback's */
}

void sbx_e2b_fs_watch_dir(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    const Filesystem__WatchDirRequest *q = (const Filesystem__WatchDirRequest *)req;
    Filesystem__WatchDirResponse__StartEvent start =
        FILESYSTEM__WATCH_DIR_RESPONSE__START_EVENT__INIT;
    Filesystem__WatchDirResponse m = FILESYSTEM__WATCH_DIR_RESPONSE__INIT;
    struct wstream *s = calloc(1, sizeof(*s));
    char *abs = NULL;

    if (!s) {
        sbx_e2b_call_fail(c, SBX_CONNECT_RESOURCE_EXHAUSTED, "no memory for a watch");
        return;
    }
    s->w = open_watch(c, q->path, q->recursive, q->allow_network_mounts, &s->cred, &abs);
    if (!s->w) {
        free(s);
        return;
    }
    pthread_mutex_init(&s->lock, NULL);
    /* The stream's, the gone callback's (which may run at once) and this handler's. */
    s->refs = 3;
    s->call = sbx_e2b_call_ref(c);
    s->dir = abs;
    s->include = q->include_entry;
    s->wt.fn = woken;
    sbx_e2b_call_on_gone(c, stream_gone, s);
    m.event_case = FILESYSTEM__WATCH_DIR_RESPONSE__EVENT_START;
    m.start = &start;
    if (sbx_e2b_call_send(c, &m.base) == 0)
        pump(s);
    else
        close_stream(s);
    wstream_unref(s); /* the handler's */
}

/* ------------------------------------------------------------------------------------------ */
/* The polling watchers: a table of open watches, read on request. */

struct poller {
    char id[33];
    struct sbx_fswatch *w;
    struct sbx_cred cred;
    char *dir;
    bool include;
    struct poller *next;
};

static struct poller *pollers; /* under sbx_e2b_fs_state.lock */
static size_t n_pollers;

static void poller_free(struct poller *p)
{
    sbx_fswatch_close(p->w);
    free(p->dir);
    free(p);
}

void sbx_e2b_fs_watchers_clear(void)
{
    pthread_mutex_lock(&sbx_e2b_fs_state.lock);
    while (pollers) {
        struct poller *p = pollers;
        pollers = p->next;
        poller_free(p);
    }
    n_pollers = 0;
    pthread_mutex_unlock(&sbx_e2b_fs_state.lock);
}

void sbx_e2b_fs_create_watcher(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    const Filesystem__CreateWatcherRequest *q = (const Filesystem__CreateWatcherRequest *)req;
    Filesystem__CreateWatcherResponse resp = FILESYSTEM__CREATE_WATCHER_RESPONSE__INIT;
    struct poller *p = calloc(1, sizeof(*p));
    uint8_t rnd[16];

    if (!p || getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
        free(p);
        sbx_e2b_call_fail(c, SBX_CONNECT_RESOURCE_EXHAUSTED, "cannot make a watcher");
        return;
    }
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(p->id + 2 * i, 3, "%02x", rnd[i]);
    p->w = open_watch(c, q->path, q->recursive, q->allow_network_mounts, &p->cred, &p->dir);
    if (!p->w) {
        free(p);
        return;
    }
    p->include = q->include_entry;
    pthread_mutex_lock(&sbx_e2b_fs_state.lock);
    p->next = pollers;
    pollers = p;
    n_pollers++;
    pthread_mutex_unlock(&sbx_e2b_fs_state.lock);
    resp.watcher_id = p->id;
    if (sbx_e2b_call_send(c, &resp.base) < 0)
        sbx_e2b_call_fail(c, SBX_CONNECT_INTERNAL, "cannot encode the answer");
}

/* Under the lock: the watcher of id, and where it is linked from. */
static struct poller **find_locked(const char *id)
{
    for (struct poller **pp = &pollers; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->id, id) == 0)
            return pp;
    return NULL;
}

struct collect {
    Filesystem__FilesystemEvent **evs;
    struct pb_event *store;
    size_t n;
};

/* Keeps one event in the answer: p's strings are taken over (each_event frees what is left),
 * its name copied (the daemon's event is freed after). */
static int collect_event(void *arg, struct pb_event *p)
{
    struct collect *col = arg;
    struct pb_event *k = &col->store[col->n];
    bool entry = p->ev._entry_case == FILESYSTEM__FILESYSTEM_EVENT___ENTRY_ENTRY;

    *k = *p;
    k->name = strdup(p->ev.name);
    *p = (struct pb_event){0};
    if (!k->name) {
        pb_event_release(k);
        return -ENOMEM;
    }
    k->ev.name = k->name;
    if (entry) {
        /* The message points into the entry's own arrays: made again where they now are. */
        sbx_e2b_fs_entry_pb_release(&k->pe);
        sbx_e2b_fs_entry_pb(&k->e, &k->pe);
        k->ev.entry = &k->pe.e;
    }
    col->evs[col->n++] = &k->ev;
    return 0;
}

/* Under the lock: reads p's log (at most MAX_POLL_EVENTS envd events) into col. */
static int drain_locked(struct poller *p, struct collect *col, struct sbx_error *err)
{
    while (col->n + 2 <= MAX_POLL_EVENTS) {
        struct sbx_fsev ev;
        int r = sbx_fswatch_next(p->w, &ev, err);
        if (r <= 0)
            return r;
        r = each_event(&ev, p->dir, p->include, &p->cred, collect_event, col);
        sbx_fsev_release(&ev);
        if (r < 0)
            return sbx_error_set(err, -r, "no memory for events");
    }
    return 0;
}

void sbx_e2b_fs_get_watcher_events(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    const Filesystem__GetWatcherEventsRequest *q = (const Filesystem__GetWatcherEventsRequest *)req;
    Filesystem__GetWatcherEventsResponse resp = FILESYSTEM__GET_WATCHER_EVENTS_RESPONSE__INIT;
    struct collect col = {
        .evs = calloc(MAX_POLL_EVENTS, sizeof(*col.evs)),
        .store = calloc(MAX_POLL_EVENTS, sizeof(*col.store)),
    };
    struct sbx_error err = {0};
    struct poller **pp;
    int r = -ENOMEM;

    pthread_mutex_lock(&sbx_e2b_fs_state.lock);
    pp = find_locked(q->watcher_id);
    if (pp && col.evs && col.store)
        r = drain_locked(*pp, &col, &err);
    pthread_mutex_unlock(&sbx_e2b_fs_state.lock);
    if (!pp)
        sbx_e2b_call_fail(c, SBX_CONNECT_NOT_FOUND, "watcher with id %s not found", q->watcher_id);
    else if (r < 0)
        sbx_e2b_call_fail(c, sbx_e2b_fs_code(r), "watcher error: %s",
                          err.code ? err.msg : "no memory");
    else {
        resp.n_events = col.n;
        resp.events = col.evs;
        if (sbx_e2b_call_send(c, &resp.base) < 0)
            sbx_e2b_call_fail(c, SBX_CONNECT_INTERNAL, "cannot encode the answer");
    }
    for (size_t i = 0; i < col.n; i++)
        pb_event_release(&col.store[i]);
    free(col.evs);
    free(col.store);
}

void sbx_e2b_fs_remove_watcher(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    const Filesystem__RemoveWatcherRequest *q = (const Filesystem__RemoveWatcherRequest *)req;
    Filesystem__RemoveWatcherResponse resp = FILESYSTEM__REMOVE_WATCHER_RESPONSE__INIT;
    struct poller *p = NULL, **pp;

    pthread_mutex_lock(&sbx_e2b_fs_state.lock);
    pp = find_locked(q->watcher_id);
    if (pp) {
        p = *pp;
        *pp = p->next;
        n_pollers--;
    }
    pthread_mutex_unlock(&sbx_e2b_fs_state.lock);
    if (!p) {
        sbx_e2b_call_fail(c, SBX_CONNECT_NOT_FOUND, "watcher with id %s not found", q->watcher_id);
        return;
    }
    poller_free(p);
    if (sbx_e2b_call_send(c, &resp.base) < 0)
        sbx_e2b_call_fail(c, SBX_CONNECT_INTERNAL, "cannot encode the answer");
}
