/* Directory watches: the registry (limits, the timer that expires kept watches, rescans and
 * wakes quiet readers), a watch's life, and the reader that reads its log (fswatch_log.c). */
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
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "fswatch_internal.h"
#include "metrics.h"

struct sbx_fswatches {
    struct sbx_loop *loop;
    const struct sbx_root *root;
    struct sbx_fswatches_opts o;
    pthread_mutex_t lock; /* the list, the counts, shutdown */
    struct fs_watch *head;
    size_t count, opening;
    struct fs_dir_budget dirs; /* of every watch */
    bool shutdown;
    struct sbx_timer timer;
    bool timer_armed;
};

void sbx_fsev_release(struct sbx_fsev *ev)
{
    free(ev->path);
    free(ev->from);
    ev->path = ev->from = NULL;
}

static void fire_task(void *arg)
{
    sbx_fsw_fire(arg);
}

/* ------------------------------------------------------------------------------------------ */
/* A watch's life */

static void watch_ref(struct fs_watch *w)
{
    __atomic_add_fetch(&w->refs, 1, __ATOMIC_RELAXED);
}

static void watch_unref(struct fs_watch *w)
{
    if (!w || __atomic_sub_fetch(&w->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    for (uint64_t s = w->first; s < w->next; s++)
        sbx_fsw_entry_free(sbx_fsw_entry_at(w, s));
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

__attribute__((format(printf, 3, 4))) static void watch_end(struct fs_watch *w, int code,
                                                            const char *fmt, ...)
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
    wt = sbx_fsw_take_waiter_locked(w);
    pthread_mutex_unlock(&w->lock);
    sbx_fsw_fire(wt);
    if (unlink_watch(w->ws, w))
        watch_unref(w); /* the registry's */
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

/* The registry's timer fires within ms (a move away waits to be paired). */
static void tick_soon(struct sbx_fswatches *ws, uint64_t ms)
{
    pthread_mutex_lock(&ws->lock);
    if (!ws->shutdown) {
        ws->timer_armed = true;
        (void)sbx_timer_arm(&ws->timer, ms);
    }
    pthread_mutex_unlock(&ws->lock);
}

enum tick_action { TICK_NONE, TICK_EXPIRE, TICK_GONE, TICK_RESCAN, TICK_WAKE, TICK_MOVE };

/* Whether the watched directory was removed. inotify tells a directory's own deletion only when
 * its inode goes, and the watch's own descriptor of it keeps it: the timer looks instead. Its
 * events still queued are read first (they come before the end). Loop thread. */
static bool removed(struct fs_watch *w)
{
    struct stat st;
    int queued = 0;

    return w->io.fd >= 0 && fstat(w->base_fd, &st) == 0 && st.st_nlink == 0 &&
           ioctl(w->io.fd, FIONREAD, &queued) == 0 && queued == 0;
}

static enum tick_action tick_decide(struct sbx_fswatches *ws, struct fs_watch *w, uint64_t now)
{
    enum tick_action a = TICK_NONE;

    /* The loop thread's own fields: the timer runs there. */
    if (w->have_pending && w->pending_due_ms && now >= w->pending_due_ms)
        return TICK_MOVE;
    pthread_mutex_lock(&w->lock);
    if (!w->reader && !w->ended && now - w->detached_at_ms >= ws->o.retain_ms)
        a = TICK_EXPIRE;
    else if (!w->ended && removed(w))
        a = TICK_GONE;
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
    struct sbx_error e = {0};

    switch (a) {
    case TICK_EXPIRE:
        watch_end(w, ENOENT, "watch %s expired (kept %" PRIu64 " ms without a reader)", w->id,
                  w->ws->o.retain_ms);
        break;
    case TICK_GONE:
        sbx_fsw_append(w, SBX_FSEV_REMOVE, true, strdup("."), NULL);
        watch_end(w, ENOENT, "the watched directory was removed");
        sbx_fsw_notify(w);
        break;
    case TICK_RESCAN:
        w->next_rescan_ms = now + w->rescan_ms;
        if (sbx_fsw_rescan(w, &e) < 0)
            watch_end(w, e.code, "%s", e.msg);
        sbx_fsw_notify(w);
        break;
    case TICK_MOVE:
        sbx_fsw_move_due(w);
        break;
    case TICK_WAKE:
        pthread_mutex_lock(&w->lock);
        wt = sbx_fsw_take_waiter_locked(w);
        pthread_mutex_unlock(&w->lock);
        sbx_fsw_fire(wt);
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
        watch_unref(all[i]);
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
    ws->dirs.max = o->max_dirs;
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
        watch_end(w, ESHUTDOWN, "sandboxd is shutting down");
        watch_unref(w);
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

/* The loop's callback of a watch's inotify fd: the tree handles what it holds; a watch that
 * must end ends here, and a move away waiting to be paired gets the timer. */
static void on_inotify(struct sbx_watch *io, uint32_t events)
{
    struct fs_watch *w = (struct fs_watch *)((char *)io - offsetof(struct fs_watch, io));
    struct sbx_error e = {0};
    uint64_t tick = 0;

    (void)events;
    watch_ref(w); /* the end below may drop the registry's */
    if (sbx_fsw_read_events(w, &tick, &e) < 0)
        watch_end(w, e.code, "%s", e.msg);
    else if (tick)
        tick_soon(w->ws, tick);
    sbx_fsw_notify(w);
    watch_unref(w);
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
        wt = sbx_fsw_take_waiter_locked(w);
        w->reader = r;
        w->read_upto = r->cursor;
        __atomic_add_fetch(&w->refs, 1, __ATOMIC_RELAXED);
        *ret = r;
    }
    pthread_mutex_unlock(&w->lock);
    if (wt && sbx_loop_post(ws->loop, fire_task, wt) < 0)
        sbx_fsw_fire(wt);
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
    w->budget = &ws->dirs;
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
    w->io.fn = on_inotify;
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
        watch_unref(w);
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
    watch_unref(w);
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
        fill_from_entry(ev, sbx_fsw_entry_at(w, r->cursor++)); /* a copy that failed is "" */
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
    if (!sbx_fsw_has_news_locked(w, r) && (!w->waiter || w->waiter == wt)) {
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
