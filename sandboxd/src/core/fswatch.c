/* Directory watches: the registry (limits, the timer that expires kept watches, rescans and
 * wakes quiet readers), each watch's log of events and the reader that reads it. */
#define _GNU_SOURCE
#include "fswatch.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "fswatch_internal.h"
#include "metrics.h"

/* A write merges into an unread write of its path among the last this many events. */
#define MERGE_WINDOW  16
#define MIN_LOG_BYTES (64 * 1024)
#define ENTRY_BYTES   256 /* the log's byte bound is this much per event */

struct sbx_fswatches {
    struct sbx_loop *loop;
    const struct sbx_root *root;
    struct sbx_fswatches_opts o;
    pthread_mutex_t lock; /* the list, the counts, shutdown */
    struct fs_watch *head;
    size_t count, opening;
    size_t dirs_used; /* atomic */
    bool shutdown;
    struct sbx_timer timer;
    bool timer_armed;
};

/* The reader: one client's cursor in a watch's log. */
struct sbx_fswatch {
    struct fs_watch *w;
    uint64_t cursor; /* the next sequence number it reads */
    bool ready_pending, resumed;
};

uint64_t sbx_fsw_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void sbx_fsev_release(struct sbx_fsev *ev)
{
    free(ev->path);
    free(ev->from);
    ev->path = ev->from = NULL;
}

size_t sbx_fsw_dirs_reserve(struct sbx_fswatches *ws, struct sbx_error *err)
{
    size_t cur = __atomic_load_n(&ws->dirs_used, __ATOMIC_RELAXED);

    do {
        if (cur >= ws->o.max_dirs)
            return (size_t)sbx_error_set(err, EMFILE,
                                         "watching more than %zu directories at once "
                                         "(--max-watch-dirs)",
                                         ws->o.max_dirs);
    } while (!__atomic_compare_exchange_n(&ws->dirs_used, &cur, cur + 1, false, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    sbx_metrics_fswatch_dirs(1);
    return 0;
}

void sbx_fsw_dirs_unreserve(struct sbx_fswatches *ws, size_t n)
{
    __atomic_sub_fetch(&ws->dirs_used, n, __ATOMIC_RELAXED);
    sbx_metrics_fswatch_dirs(-(long)n);
}

/* ------------------------------------------------------------------------------------------ */
/* Globs */

static bool glob_match(const char *pattern, const char *path)
{
    const char *base;

    if (strchr(pattern, '/'))
        return fnmatch(pattern, path, FNM_PATHNAME) == 0;
    base = strrchr(path, '/');
    return fnmatch(pattern, base ? base + 1 : path, 0) == 0;
}

bool sbx_fsw_excluded(const struct fs_watch *w, const char *path)
{
    for (size_t i = 0; i < w->n_exclude; i++)
        if (glob_match(w->exclude[i], path))
            return true;
    return false;
}

bool sbx_fsw_included(const struct fs_watch *w, const char *path)
{
    if (sbx_fsw_excluded(w, path))
        return false;
    for (size_t i = 0; i < w->n_include; i++)
        if (glob_match(w->include[i], path))
            return true;
    return w->n_include == 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The log */

static size_t entry_bytes(const struct fs_entry *e)
{
    return sizeof(*e) + (e->path ? strlen(e->path) : 0) + (e->from ? strlen(e->from) : 0);
}

static void entry_free(struct fs_entry *e)
{
    free(e->path);
    free(e->from);
    e->path = e->from = NULL;
}

static struct fs_entry *entry_at(struct fs_watch *w, uint64_t seq)
{
    return &w->log[seq % w->cap];
}

static size_t max_log_bytes(const struct fs_watch *w)
{
    size_t b = w->cap * ENTRY_BYTES;
    return b > MIN_LOG_BYTES ? b : MIN_LOG_BYTES;
}

/* Under lock: a write of path that merges into an unread write of it. */
static bool merges_locked(struct fs_watch *w, const char *path)
{
    uint64_t low = w->next > MERGE_WINDOW ? w->next - MERGE_WINDOW : 0;

    if (low < w->first)
        low = w->first;
    if (low < w->read_upto)
        low = w->read_upto;
    for (uint64_t s = w->next; s-- > low;) {
        struct fs_entry *e = entry_at(w, s);
        if (e->kind == SBX_FSEV_RENAME && e->from && strcmp(e->from, path) == 0)
            return false;
        if (e->path && strcmp(e->path, path) == 0)
            return e->kind == SBX_FSEV_WRITE;
    }
    return false;
}

/* Under lock: path's latest event is its creation (a scan logged it, then inotify reported it). */
static bool created_locked(struct fs_watch *w, const char *path)
{
    uint64_t low = w->next > MERGE_WINDOW ? w->next - MERGE_WINDOW : 0;

    if (low < w->first)
        low = w->first;
    for (uint64_t s = w->next; s-- > low;) {
        struct fs_entry *e = entry_at(w, s);
        if (e->kind == SBX_FSEV_RENAME && e->from && strcmp(e->from, path) == 0)
            return false;
        if (e->path && strcmp(e->path, path) == 0)
            return e->kind == SBX_FSEV_CREATE || e->kind == SBX_FSEV_RENAME;
    }
    return false;
}

static void push_locked(struct fs_watch *w, struct fs_entry *e)
{
    size_t b = entry_bytes(e);

    while (w->next > w->first &&
           (w->next - w->first >= w->cap || w->bytes + b > max_log_bytes(w))) {
        struct fs_entry *old = entry_at(w, w->first++);
        w->bytes -= entry_bytes(old);
        entry_free(old);
    }
    e->seq = w->next++;
    *entry_at(w, e->seq) = *e;
    w->bytes += b;
    w->news = true;
    sbx_metrics_fswatch_events(1);
}

void sbx_fsw_append(struct fs_watch *w, enum sbx_fsev_kind kind, bool dir, char *path, char *from)
{
    struct fs_entry e = {.kind = kind, .dir = dir, .path = path, .from = from};

    if (!path || !(sbx_fsw_included(w, path) || (from && sbx_fsw_included(w, from)))) {
        entry_free(&e);
        return;
    }
    pthread_mutex_lock(&w->lock);
    if ((kind == SBX_FSEV_WRITE && merges_locked(w, path)) ||
        (kind == SBX_FSEV_CREATE && created_locked(w, path)))
        entry_free(&e);
    else
        push_locked(w, &e);
    pthread_mutex_unlock(&w->lock);
}

void sbx_fsw_append_overflow(struct fs_watch *w, const char *reason)
{
    struct fs_entry e = {.kind = SBX_FSEV_OVERFLOW, .reason = reason};

    pthread_mutex_lock(&w->lock);
    push_locked(w, &e);
    pthread_mutex_unlock(&w->lock);
    sbx_metrics_fswatch_overflow(true);
}

/* Under lock: the reader has something to read (an event, ready, or the end). */
static bool has_news_locked(struct fs_watch *w, struct sbx_fswatch *r)
{
    return w->reader != r || r->ready_pending || r->cursor < w->next || w->ended;
}

/* Under lock: takes the armed waiter, to be fired once unlocked. */
static struct sbx_fswatch_waiter *take_waiter_locked(struct fs_watch *w)
{
    struct sbx_fswatch_waiter *wt = w->waiter;

    if (wt)
        wt->armed = false;
    w->waiter = NULL;
    return wt;
}

static void fire(struct sbx_fswatch_waiter *wt)
{
    if (wt)
        wt->fn(wt);
}

static void fire_task(void *arg)
{
    fire(arg);
}

void sbx_fsw_notify(struct fs_watch *w)
{
    struct sbx_fswatch_waiter *wt = NULL;

    pthread_mutex_lock(&w->lock);
    if (w->news && w->reader && w->waiter && has_news_locked(w, w->reader))
        wt = take_waiter_locked(w);
    w->news = false;
    pthread_mutex_unlock(&w->lock);
    fire(wt);
}

/* ------------------------------------------------------------------------------------------ */
/* A watch's life */

void sbx_fsw_ref(struct fs_watch *w)
{
    __atomic_add_fetch(&w->refs, 1, __ATOMIC_RELAXED);
}

void sbx_fsw_unref(struct fs_watch *w)
{
    if (!w || __atomic_sub_fetch(&w->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    for (uint64_t s = w->first; s < w->next; s++)
        entry_free(entry_at(w, s));
    free(w->log);
    for (size_t i = 0; i < w->n_include; i++)
        free(w->include[i]);
    for (size_t i = 0; i < w->n_exclude; i++)
        free(w->exclude[i]);
    free(w->include);
    free(w->exclude);
    free(w->client);
    free(w->pending_from);
    sbx_fsw_snap_free(w->snap);
    sbx_closep(&w->io.fd);
    sbx_closep(&w->base_fd);
    pthread_mutex_destroy(&w->lock);
    free(w);
}

/* Unlinks w from the registry; true when it was there (its reference is then the caller's). */
static bool unlink_watch(struct sbx_fswatches *ws, struct fs_watch *w)
{
    bool found = false;

    pthread_mutex_lock(&ws->lock);
    for (struct fs_watch **p = &ws->head; *p; p = &(*p)->link) {
        if (*p == w) {
            *p = w->link;
            ws->count--;
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&ws->lock);
    if (found)
        sbx_metrics_fswatch_active(-1);
    return found;
}

void sbx_fsw_end(struct fs_watch *w, int code, const char *fmt, ...)
{
    struct sbx_fswatch_waiter *wt;
    va_list ap;

    if (w->io.fd >= 0) {
        sbx_loop_del(w->ws->loop, &w->io);
        sbx_closep(&w->io.fd);
    }
    sbx_fsw_dirs_release(w);
    pthread_mutex_lock(&w->lock);
    if (!w->ended) {
        w->ended = true;
        w->end_err.code = code;
        va_start(ap, fmt);
        vsnprintf(w->end_err.msg, sizeof(w->end_err.msg), fmt, ap);
        va_end(ap);
    }
    wt = take_waiter_locked(w);
    pthread_mutex_unlock(&w->lock);
    fire(wt);
    if (unlink_watch(w->ws, w))
        sbx_fsw_unref(w); /* the registry's */
}

/* ------------------------------------------------------------------------------------------ */
/* The registry's timer: kept watches expire, rescans come due, quiet readers are woken. */

static uint64_t tick_ms(const struct sbx_fswatches *ws)
{
    uint64_t t = 1000;

    if (ws->o.keepalive_ms && ws->o.keepalive_ms < t)
        t = ws->o.keepalive_ms;
    if (ws->o.retain_ms < t)
        t = ws->o.retain_ms;
    return t < 10 ? 10 : t;
}

/* Under the registry's lock. */
static void arm_timer_locked(struct sbx_fswatches *ws)
{
    if (!ws->timer_armed && ws->count && !ws->shutdown) {
        ws->timer_armed = true;
        (void)sbx_timer_arm(&ws->timer, tick_ms(ws));
    }
}

void sbx_fsw_tick_soon(struct sbx_fswatches *ws, uint64_t ms)
{
    pthread_mutex_lock(&ws->lock);
    if (!ws->shutdown) {
        ws->timer_armed = true;
        (void)sbx_timer_arm(&ws->timer, ms);
    }
    pthread_mutex_unlock(&ws->lock);
}

enum tick_action { TICK_NONE, TICK_EXPIRE, TICK_RESCAN, TICK_WAKE, TICK_MOVE };

static enum tick_action tick_decide(struct sbx_fswatches *ws, struct fs_watch *w, uint64_t now)
{
    enum tick_action a = TICK_NONE;

    /* The loop thread's own fields: the timer runs there. */
    if (w->have_pending && w->pending_due_ms && now >= w->pending_due_ms)
        return TICK_MOVE;
    pthread_mutex_lock(&w->lock);
    if (!w->reader && !w->ended && now - w->detached_at_ms >= ws->o.retain_ms)
        a = TICK_EXPIRE;
    else if (w->rescan_ms && now >= w->next_rescan_ms)
        a = TICK_RESCAN;
    else if (w->waiter && ws->o.keepalive_ms && now - w->waiter_since_ms >= ws->o.keepalive_ms)
        a = TICK_WAKE;
    pthread_mutex_unlock(&w->lock);
    return a;
}

static void tick_one(struct fs_watch *w, enum tick_action a, uint64_t now)
{
    struct sbx_fswatch_waiter *wt;

    switch (a) {
    case TICK_EXPIRE:
        sbx_fsw_end(w, ENOENT, "watch %s expired (kept %" PRIu64 " ms without a reader)", w->id,
                    w->ws->o.retain_ms);
        break;
    case TICK_RESCAN:
        w->next_rescan_ms = now + w->rescan_ms;
        sbx_fsw_rescan(w);
        sbx_fsw_notify(w);
        break;
    case TICK_MOVE:
        sbx_fsw_move_due(w);
        break;
    case TICK_WAKE:
        pthread_mutex_lock(&w->lock);
        wt = take_waiter_locked(w);
        pthread_mutex_unlock(&w->lock);
        fire(wt);
        break;
    case TICK_NONE:
        break;
    }
}

static void on_tick(struct sbx_timer *t)
{
    struct sbx_fswatches *ws =
        (struct sbx_fswatches *)((char *)t - offsetof(struct sbx_fswatches, timer));
    uint64_t now = sbx_fsw_now_ms();
    struct fs_watch **all = NULL;
    enum tick_action *act = NULL;
    size_t n = 0;

    pthread_mutex_lock(&ws->lock);
    ws->timer_armed = false;
    if (ws->count) {
        all = calloc(ws->count, sizeof(*all));
        act = calloc(ws->count, sizeof(*act));
    }
    for (struct fs_watch *w = ws->head; w && all && act; w = w->link) {
        act[n] = tick_decide(ws, w, now);
        if (act[n] != TICK_NONE) {
            __atomic_add_fetch(&w->refs, 1, __ATOMIC_RELAXED);
            all[n++] = w;
        }
    }
    pthread_mutex_unlock(&ws->lock);
    for (size_t i = 0; i < n; i++) {
        tick_one(all[i], act[i], now);
        sbx_fsw_unref(all[i]);
    }
    free(all);
    free(act);
    pthread_mutex_lock(&ws->lock);
    arm_timer_locked(ws);
    pthread_mutex_unlock(&ws->lock);
}

int sbx_fswatches_new(struct sbx_fswatches **ret, struct sbx_loop *loop,
                      const struct sbx_root *root, const struct sbx_fswatches_opts *o,
                      struct sbx_error *err)
{
    struct sbx_fswatches *ws = calloc(1, sizeof(*ws));
    int r;

    if (!ws)
        return sbx_error_set(err, ENOMEM, "allocate watches");
    ws->loop = loop;
    ws->root = root;
    ws->o = *o;
    if (ws->o.queue_events < 16)
        ws->o.queue_events = 16;
    pthread_mutex_init(&ws->lock, NULL);
    r = sbx_timer_init(&ws->timer, loop, on_tick, err);
    if (r < 0) {
        pthread_mutex_destroy(&ws->lock);
        free(ws);
        return r;
    }
    *ret = ws;
    return 0;
}

void sbx_fswatches_shutdown(struct sbx_fswatches *ws)
{
    struct fs_watch *w;

    if (!ws)
        return;
    pthread_mutex_lock(&ws->lock);
    ws->shutdown = true;
    pthread_mutex_unlock(&ws->lock);
    for (;;) {
        pthread_mutex_lock(&ws->lock);
        w = ws->head;
        if (w)
            __atomic_add_fetch(&w->refs, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&ws->lock);
        if (!w)
            break;
        sbx_fsw_end(w, ESHUTDOWN, "sandboxd is shutting down");
        sbx_fsw_unref(w);
    }
}

void sbx_fswatches_free(struct sbx_fswatches *ws)
{
    if (!ws)
        return;
    sbx_fswatches_shutdown(ws);
    sbx_timer_release(&ws->timer);
    pthread_mutex_destroy(&ws->lock);
    free(ws);
}

/* ------------------------------------------------------------------------------------------ */
/* Opening */

static struct sbx_fswatch *reader_new(struct fs_watch *w, uint64_t cursor, bool resumed)
{
    struct sbx_fswatch *r = calloc(1, sizeof(*r));

    if (!r)
        return NULL;
    r->w = w;
    r->cursor = cursor;
    r->ready_pending = true;
    r->resumed = resumed;
    return r;
}

/* Takes the kept watch of id over for a new reader. Under the registry's lock. */
static int resume_locked(struct sbx_fswatches *ws, const struct sbx_fswatch_spec *s,
                         struct sbx_fswatch **ret, struct sbx_error *err)
{
    struct sbx_fswatch_waiter *wt = NULL;
    struct sbx_fswatch *r;
    struct fs_watch *w;
    int rc = 0;

    for (w = ws->head; w && strcmp(w->id, s->resume_id) != 0; w = w->link)
        ;
    if (!w)
        return sbx_error_set(err, ENOENT,
                             "watch \"%.32s\" not found (it ended, or was not kept that long): "
                             "open a new watch and rescan",
                             s->resume_id);
    pthread_mutex_lock(&w->lock);
    if (s->since >= w->next) {
        rc = sbx_error_set(err, EINVAL, "since %" PRIu64 " is past the watch's last event %" PRIu64,
                           s->since, w->next - 1);
    } else if (!(r = reader_new(w, s->since + 1, true))) {
        rc = sbx_error_set(err, ENOMEM, "allocate watch reader");
    } else {
        /* A reader still there (its client gone unnoticed, or a second client) loses it. */
        wt = take_waiter_locked(w);
        w->reader = r;
        w->read_upto = r->cursor;
        __atomic_add_fetch(&w->refs, 1, __ATOMIC_RELAXED);
        *ret = r;
    }
    pthread_mutex_unlock(&w->lock);
    if (wt && sbx_loop_post(ws->loop, fire_task, wt) < 0)
        fire(wt);
    return rc;
}

static int check_limits_locked(struct sbx_fswatches *ws, const char *client, struct sbx_error *err)
{
    size_t mine = 0;

    if (ws->shutdown)
        return sbx_error_set(err, ESHUTDOWN, "sandboxd is shutting down");
    if (ws->count + ws->opening >= ws->o.max_watches)
        return sbx_error_set(err, EMFILE, "too many watches: %zu at once (--max-watches)",
                             ws->o.max_watches);
    for (struct fs_watch *w = ws->head; w; w = w->link)
        mine += strcmp(w->client, client) == 0;
    if (mine >= ws->o.max_per_client)
        return sbx_error_set(err, EMFILE,
                             "too many watches of client %s: %zu at once "
                             "(--max-watches-per-client)",
                             client, ws->o.max_per_client);
    return 0;
}

static char **copy_globs(char *const *g, size_t n, struct sbx_error *err, int *rc)
{
    char **out = n ? calloc(n, sizeof(*out)) : NULL;

    if (n && !out) {
        *rc = sbx_error_set(err, ENOMEM, "allocate globs");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (!g[i][0] || strlen(g[i]) > SBX_FSWATCH_MAX_GLOB_LEN) {
            *rc = sbx_error_set(err, EINVAL, "a glob must be 1 to %d bytes",
                                SBX_FSWATCH_MAX_GLOB_LEN);
        } else if (!(out[i] = strdup(g[i]))) {
            *rc = sbx_error_set(err, ENOMEM, "allocate globs");
        }
        if (*rc < 0) {
            for (size_t k = 0; k < i; k++)
                free(out[k]);
            free(out);
            return NULL;
        }
    }
    return out;
}

static int watch_alloc(struct sbx_fswatches *ws, const struct sbx_fswatch_spec *s,
                       struct fs_watch **ret, struct sbx_error *err)
{
    struct fs_watch *w = calloc(1, sizeof(*w));
    uint8_t rnd[8] = {0};
    int rc = 0;

    if (!w)
        return sbx_error_set(err, ENOMEM, "allocate watch");
    pthread_mutex_init(&w->lock, NULL);
    w->ws = ws;
    w->refs = 1;
    w->io.fd = w->base_fd = -1;
    w->recursive = s->recursive;
    w->rescan_ms = s->rescan_ms;
    w->first = w->next = w->read_upto = 1;
    w->cap = ws->o.queue_events;
    (void)!getrandom(rnd, sizeof(rnd), GRND_NONBLOCK);
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(w->id + 2 * i, 3, "%02x", rnd[i]);
    *ret = w;
    w->log = calloc(w->cap, sizeof(*w->log));
    w->client = strdup(s->client ? s->client : "");
    if (!w->log || !w->client)
        return sbx_error_set(err, ENOMEM, "allocate watch");
    w->include = copy_globs(s->include, s->n_include, err, &rc);
    if (rc == 0)
        w->n_include = s->n_include;
    if (rc == 0)
        w->exclude = copy_globs(s->exclude, s->n_exclude, err, &rc);
    if (rc == 0)
        w->n_exclude = s->n_exclude;
    return rc;
}

/* Opens the directory and inotify, adds every directory: before the fd goes on the loop. */
static int watch_setup(struct sbx_fswatches *ws, struct fs_watch *w,
                       const struct sbx_fswatch_spec *s, struct sbx_error *err)
{
    int r;

    w->base_fd = sbx_path_open(ws->root, s->path, O_PATH | O_DIRECTORY, err);
    if (w->base_fd < 0) {
        r = w->base_fd;
        if (r == -ENOTDIR)
            return sbx_error_set(err, ENOTDIR, "\"%s\" is not a directory", s->path);
        return r;
    }
    w->io.fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->io.fd < 0) {
        if (errno == EMFILE || errno == ENFILE)
            return sbx_error_set(err, EMFILE,
                                 "no inotify instance left (fs.inotify.max_user_instances)");
        return sbx_error_set(err, errno, "inotify_init1");
    }
    w->io.fn = sbx_fsw_on_inotify;
    r = sbx_fsw_add_tree(w, "", false, err);
    if (r == 0 && w->rescan_ms) {
        r = sbx_fsw_snap_take(w, &w->snap, err);
        w->next_rescan_ms = sbx_fsw_now_ms() + w->rescan_ms;
    }
    if (r == 0)
        r = sbx_loop_add(ws->loop, &w->io, EPOLLIN, err);
    return r;
}

static int open_new(struct sbx_fswatches *ws, const struct sbx_fswatch_spec *s,
                    struct sbx_fswatch **ret, struct sbx_error *err)
{
    struct fs_watch *w = NULL;
    struct sbx_fswatch *r = NULL;
    int rc = watch_alloc(ws, s, &w, err);

    if (rc == 0)
        rc = watch_setup(ws, w, s, err);
    if (rc == 0 && !(r = reader_new(w, 1, false)))
        rc = sbx_error_set(err, ENOMEM, "allocate watch reader");
    pthread_mutex_lock(&ws->lock);
    ws->opening--;
    if (rc == 0 && ws->shutdown)
        rc = sbx_error_set(err, ESHUTDOWN, "sandboxd is shutting down");
    if (rc == 0) {
        w->reader = r;
        w->refs = 2; /* the registry's, the reader's */
        w->link = ws->head;
        ws->head = w;
        ws->count++;
        arm_timer_locked(ws);
    }
    pthread_mutex_unlock(&ws->lock);
    if (rc < 0) {
        if (w && w->io.fd >= 0 && w->io.fn)
            sbx_loop_del(ws->loop, &w->io);
        if (w)
            sbx_fsw_dirs_release(w);
        free(r);
        sbx_fsw_unref(w);
        return rc;
    }
    sbx_metrics_fswatch_active(1);
    *ret = r;
    return 0;
}

int sbx_fswatch_open(struct sbx_fswatches *ws, const struct sbx_fswatch_spec *s,
                     struct sbx_fswatch **ret, struct sbx_error *err)
{
    int rc;

    if (s->n_include > SBX_FSWATCH_MAX_GLOBS || s->n_exclude > SBX_FSWATCH_MAX_GLOBS)
        return sbx_error_set(err, EINVAL, "at most %d include and %d exclude globs",
                             SBX_FSWATCH_MAX_GLOBS, SBX_FSWATCH_MAX_GLOBS);
    pthread_mutex_lock(&ws->lock);
    if (s->resume_id && s->resume_id[0]) {
        rc = ws->shutdown ? sbx_error_set(err, ESHUTDOWN, "sandboxd is shutting down")
                          : resume_locked(ws, s, ret, err);
        pthread_mutex_unlock(&ws->lock);
        return rc;
    }
    rc = check_limits_locked(ws, s->client ? s->client : "", err);
    if (rc == 0)
        ws->opening++;
    pthread_mutex_unlock(&ws->lock);
    return rc < 0 ? rc : open_new(ws, s, ret, err);
}

void sbx_fswatch_close(struct sbx_fswatch *r)
{
    struct fs_watch *w;

    if (!r)
        return;
    w = r->w;
    pthread_mutex_lock(&w->lock);
    if (w->reader == r) {
        w->reader = NULL;
        w->read_upto = r->cursor;
        w->detached_at_ms = sbx_fsw_now_ms();
    }
    pthread_mutex_unlock(&w->lock);
    free(r);
    sbx_fsw_unref(w);
}

/* ------------------------------------------------------------------------------------------ */
/* Reading */

static void fill_from_entry(struct sbx_fsev *ev, const struct fs_entry *e)
{
    ev->seq = e->seq;
    ev->kind = e->kind;
    ev->dir = e->dir;
    ev->path = e->path ? strdup(e->path) : NULL;
    ev->from = e->from ? strdup(e->from) : NULL;
    if (e->kind == SBX_FSEV_OVERFLOW) {
        ev->lost_from = ev->lost_to = e->seq;
        ev->reason = e->reason;
    }
}

int sbx_fswatch_next(struct sbx_fswatch *r, struct sbx_fsev *ev, struct sbx_error *err)
{
    struct fs_watch *w = r->w;
    int rc = 1;

    memset(ev, 0, sizeof(*ev));
    pthread_mutex_lock(&w->lock);
    if (w->reader != r) {
        rc = sbx_error_set(err, EBUSY, "watch %s was resumed by another client", w->id);
    } else if (r->ready_pending) {
        r->ready_pending = false;
        ev->kind = SBX_FSEV_READY;
        ev->seq = r->cursor - 1;
        ev->watch_id = w->id;
        ev->resumed = r->resumed;
        ev->dirs = __atomic_load_n(&w->dirs.live, __ATOMIC_RELAXED);
    } else if (r->cursor < w->first) {
        ev->kind = SBX_FSEV_OVERFLOW;
        ev->lost_from = r->cursor;
        ev->lost_to = ev->seq = w->first - 1;
        ev->reason = "the reader fell behind: events dropped from the watch's queue";
        r->cursor = w->first;
        sbx_metrics_fswatch_overflow(false);
    } else if (r->cursor < w->next) {
        fill_from_entry(ev, entry_at(w, r->cursor++)); /* a copy that failed is "" */
    } else if (w->ended) {
        rc = -w->end_err.code;
        if (err)
            *err = w->end_err;
    } else {
        rc = 0;
    }
    if (w->reader == r)
        w->read_upto = r->cursor;
    pthread_mutex_unlock(&w->lock);
    return rc;
}

bool sbx_fswatch_wait(struct sbx_fswatch *r, struct sbx_fswatch_waiter *wt)
{
    struct fs_watch *w = r->w;
    bool armed = false;

    pthread_mutex_lock(&w->lock);
    if (!has_news_locked(w, r) && (!w->waiter || w->waiter == wt)) {
        if (!w->waiter)
            w->waiter_since_ms = sbx_fsw_now_ms();
        w->waiter = wt;
        wt->armed = armed = true;
    }
    pthread_mutex_unlock(&w->lock);
    return armed;
}

bool sbx_fswatch_unwait(struct sbx_fswatch *r, struct sbx_fswatch_waiter *wt)
{
    struct fs_watch *w = r->w;
    bool was = false;

    pthread_mutex_lock(&w->lock);
    if (w->waiter == wt && wt->armed) {
        w->waiter = NULL;
        wt->armed = false;
        was = true;
    }
    pthread_mutex_unlock(&w->lock);
    return was;
}
