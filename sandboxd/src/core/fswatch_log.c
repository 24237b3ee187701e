/* The directory watch's log: the events a watch holds for its reader (a write merged into an
 * unread write of its path, bounded by count and bytes), the globs that decide what goes in,
 * the waiter woken when something did, and the registry's budget of directories. What the
 * tree (fswatch_tree.c) and the rescan (fswatch_snap.c) write to, below the registry
 * (fswatch.c), which reads it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fswatch_internal.h"
#include "metrics.h"

/* A write merges into an unread write of its path among the last this many events. */
#define MERGE_WINDOW  16
#define MIN_LOG_BYTES (64 * 1024)
#define ENTRY_BYTES   256 /* the log's byte bound is this much per event */

uint64_t sbx_fsw_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

size_t sbx_fsw_dirs_reserve(struct fs_dir_budget *b, struct sbx_error *err)
{
    size_t cur = __atomic_load_n(&b->used, __ATOMIC_RELAXED);

    do {
        if (cur >= b->max)
            return (size_t)sbx_error_set(err, EMFILE,
                                         "watching more than %zu directories at once "
                                         "(--max-watch-dirs)",
                                         b->max);
    } while (!__atomic_compare_exchange_n(&b->used, &cur, cur + 1, false, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    sbx_metrics_fswatch_dirs(1);
    return 0;
}

void sbx_fsw_dirs_unreserve(struct fs_dir_budget *b, size_t n)
{
    __atomic_sub_fetch(&b->used, n, __ATOMIC_RELAXED);
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

void sbx_fsw_entry_free(struct fs_entry *e)
{
    free(e->path);
    free(e->from);
    e->path = e->from = NULL;
}

struct fs_entry *sbx_fsw_entry_at(struct fs_watch *w, uint64_t seq)
{
    return &w->log[seq % w->cap];
}

static size_t max_log_bytes(const struct fs_watch *w)
{
    size_t b = w->cap * ENTRY_BYTES;
    return b > MIN_LOG_BYTES ? b : MIN_LOG_BYTES;
}

/* Under lock: path's latest event among the last MERGE_WINDOW from `from` on, or NULL when it
 * has none there or was renamed away since. */
static struct fs_entry *latest_locked(struct fs_watch *w, const char *path, uint64_t from)
{
    uint64_t low = w->next > MERGE_WINDOW ? w->next - MERGE_WINDOW : 0;

    if (low < from)
        low = from;
    for (uint64_t s = w->next; s-- > low;) {
        struct fs_entry *e = sbx_fsw_entry_at(w, s);
        if (e->kind == SBX_FSEV_RENAME && e->from && strcmp(e->from, path) == 0)
            return NULL;
        if (e->path && strcmp(e->path, path) == 0)
            return e;
    }
    return NULL;
}

/* Under lock: a write of path that merges into an unread write of it. */
static bool merges_locked(struct fs_watch *w, const char *path)
{
    struct fs_entry *e = latest_locked(w, path, w->read_upto > w->first ? w->read_upto : w->first);

    return e && e->kind == SBX_FSEV_WRITE;
}

/* Under lock: path's latest event is its creation (a scan logged it, then inotify reported it). */
static bool created_locked(struct fs_watch *w, const char *path)
{
    struct fs_entry *e = latest_locked(w, path, w->first);

    return e && (e->kind == SBX_FSEV_CREATE || e->kind == SBX_FSEV_RENAME);
}

static void push_locked(struct fs_watch *w, struct fs_entry *e)
{
    size_t b = entry_bytes(e);

    while (w->next > w->first &&
           (w->next - w->first >= w->cap || w->bytes + b > max_log_bytes(w))) {
        struct fs_entry *old = sbx_fsw_entry_at(w, w->first++);
        w->bytes -= entry_bytes(old);
        sbx_fsw_entry_free(old);
    }
    e->seq = w->next++;
    *sbx_fsw_entry_at(w, e->seq) = *e;
    w->bytes += b;
    w->news = true;
    sbx_metrics_fswatch_events(1);
}

void sbx_fsw_append(struct fs_watch *w, enum sbx_fsev_kind kind, bool dir, char *path, char *from)
{
    struct fs_entry e = {.kind = kind, .dir = dir, .path = path, .from = from};

    if (!path || !(sbx_fsw_included(w, path) || (from && sbx_fsw_included(w, from)))) {
        sbx_fsw_entry_free(&e);
        return;
    }
    pthread_mutex_lock(&w->lock);
    if ((kind == SBX_FSEV_WRITE && merges_locked(w, path)) ||
        (kind == SBX_FSEV_CREATE && created_locked(w, path)))
        sbx_fsw_entry_free(&e);
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

bool sbx_fsw_has_news_locked(struct fs_watch *w, struct sbx_fswatch *r)
{
    return w->reader != r || r->ready_pending || r->cursor < w->next || w->ended;
}

struct sbx_fswatch_waiter *sbx_fsw_take_waiter_locked(struct fs_watch *w)
{
    struct sbx_fswatch_waiter *wt = w->waiter;

    if (wt)
        wt->armed = false;
    w->waiter = NULL;
    return wt;
}

void sbx_fsw_fire(struct sbx_fswatch_waiter *wt)
{
    if (wt)
        wt->fn(wt);
}

void sbx_fsw_notify(struct fs_watch *w)
{
    struct sbx_fswatch_waiter *wt = NULL;

    pthread_mutex_lock(&w->lock);
    if (w->news && w->reader && w->waiter && sbx_fsw_has_news_locked(w, w->reader))
        wt = sbx_fsw_take_waiter_locked(w);
    w->news = false;
    pthread_mutex_unlock(&w->lock);
    sbx_fsw_fire(wt);
}
