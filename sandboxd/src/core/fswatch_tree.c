/* The directory watch's tree: the inotify watch of each directory (added through its fd, opened
 * one name at a time beneath the watched directory without following a symlink, so nothing
 * outside is ever watched), scans of new directories, and the kernel's events turned into ours
 * (moves paired by cookie). On the loop thread, and on the opening thread before that. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "fswatch_internal.h"

#define MASK                                                                                       \
    (IN_CREATE | IN_DELETE | IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_MOVED_FROM |              \
     IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)

/* One read of at most this much per turn of the loop: a flood into many watches does not keep
 * the loop (which also reaps, and answers liveness) to itself; what the kernel cannot queue
 * meanwhile is told as an overflow. */
#define READ_BYTES (16 * 1024)
/* How long a move away waits for its arrival once the kernel's queue is empty. */
#define MOVE_GRACE_MS 50

/* ------------------------------------------------------------------------------------------ */
/* The directories watched: watch descriptor -> path, open addressing. */

static size_t slot_of(const struct fs_dirs *d, int wd)
{
    return ((unsigned)wd * 2654435761u) & (d->cap - 1);
}

static struct fs_dir *dirs_find(struct fs_dirs *d, int wd)
{
    if (!d->cap)
        return NULL;
    for (size_t i = slot_of(d, wd);; i = (i + 1) & (d->cap - 1)) {
        if (d->slot[i].wd == wd)
            return &d->slot[i];
        if (d->slot[i].wd == 0)
            return NULL;
    }
}

static void dirs_insert(struct fs_dirs *d, int wd, char *path)
{
    size_t i = slot_of(d, wd);

    while (d->slot[i].wd != 0)
        i = (i + 1) & (d->cap - 1);
    d->slot[i].wd = wd;
    d->slot[i].path = path;
    d->used++;
    __atomic_store_n(&d->live, d->live + 1, __ATOMIC_RELAXED);
}

static int dirs_grow(struct fs_dirs *d)
{
    size_t cap = d->cap ? d->cap : 16;
    struct fs_dirs n = {0};

    while (d->live * 2 + 2 > cap)
        cap *= 2;
    n.cap = cap;
    n.slot = calloc(cap, sizeof(*n.slot));
    if (!n.slot)
        return -ENOMEM;
    for (size_t i = 0; i < d->cap; i++)
        if (d->slot[i].wd > 0)
            dirs_insert(&n, d->slot[i].wd, d->slot[i].path);
    free(d->slot);
    d->slot = n.slot;
    d->cap = n.cap;
    d->used = n.used;
    return 0;
}

/* Takes path. */
static int dirs_put(struct fs_dirs *d, int wd, char *path)
{
    if ((d->used + 1) * 2 > d->cap && dirs_grow(d) < 0) {
        free(path);
        return -ENOMEM;
    }
    dirs_insert(d, wd, path);
    return 0;
}

static void dirs_remove(struct fs_watch *w, struct fs_dir *e)
{
    free(e->path);
    e->path = NULL;
    e->wd = -1;
    __atomic_store_n(&w->dirs.live, w->dirs.live - 1, __ATOMIC_RELAXED);
    sbx_fsw_dirs_unreserve(w->budget, 1);
}

void sbx_fsw_dirs_release(struct fs_watch *w)
{
    size_t live = w->dirs.live;

    for (size_t i = 0; i < w->dirs.cap; i++)
        free(w->dirs.slot[i].path);
    free(w->dirs.slot);
    memset(&w->dirs, 0, sizeof(w->dirs));
    if (live)
        sbx_fsw_dirs_unreserve(w->budget, live);
}

/* Whether p is dir or lies beneath it. */
static bool beneath(const char *p, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(p, dir, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

/* A directory moved away from the tree: its watches and those beneath it go. */
static void drop_subtree(struct fs_watch *w, const char *dir)
{
    for (size_t i = 0; i < w->dirs.cap; i++) {
        struct fs_dir *e = &w->dirs.slot[i];
        if (e->wd > 0 && e->wd != w->root_wd && beneath(e->path, dir)) {
            (void)inotify_rm_watch(w->io.fd, e->wd);
            dirs_remove(w, e);
        }
    }
}

/* A directory moved within the tree: the paths of its watches follow. */
static void retarget(struct fs_watch *w, const char *from, const char *to)
{
    size_t n = strlen(from);

    for (size_t i = 0; i < w->dirs.cap; i++) {
        struct fs_dir *e = &w->dirs.slot[i];
        char *p;
        if (e->wd <= 0 || e->wd == w->root_wd || !beneath(e->path, from))
            continue;
        if (asprintf(&p, "%s%s", to, e->path + n) < 0)
            continue;
        free(e->path);
        e->path = p;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Adding directories */

char *sbx_fsw_join(const char *dir, const char *name)
{
    char *p;

    if (!dir[0])
        return strdup(name);
    return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

int sbx_fsw_open_dir(int fd, const char *rel)
{
    _cleanup_free_ char *copy = strdup(rel);
    int cur = -1;

    if (!copy)
        return -ENOMEM;
    if (!rel[0]) {
        cur = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return cur < 0 ? -errno : cur;
    }
    for (char *save = NULL, *name = strtok_r(copy, "/", &save); name;
         name = strtok_r(NULL, "/", &save)) {
        int next =
            openat(cur < 0 ? fd : cur, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int saved = errno;
        sbx_closep(&cur);
        if (next < 0)
            return -saved;
        cur = next;
    }
    return cur;
}

/* Adds the inotify watch of directory fd at path; *known when it was watched already (the same
 * inode: inotify gives the same descriptor). */
static int watch_dir(struct fs_watch *w, int fd, const char *path, bool *known,
                     struct sbx_error *err)
{
    char proc[64];
    struct fs_dir *d;
    int wd, r;

    *known = false;
    if ((r = (int)sbx_fsw_dirs_reserve(w->budget, err)) < 0)
        return r;
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    wd = inotify_add_watch(w->io.fd, proc, MASK);
    if (wd < 0) {
        int e = errno;
        sbx_fsw_dirs_unreserve(w->budget, 1);
        if (e == ENOSPC)
            return sbx_error_set(err, EMFILE,
                                 "the kernel's limit of inotify watches is reached "
                                 "(fs.inotify.max_user_watches)");
        return sbx_error_set(err, e, "watch \"%s\": %s", path[0] ? path : ".", strerror(e));
    }
    if (!path[0])
        w->root_wd = wd;
    d = dirs_find(&w->dirs, wd);
    if (d) {
        sbx_fsw_dirs_unreserve(w->budget, 1);
        *known = true;
        return 0;
    }
    {
        char *p = strdup(path);
        if (!p || dirs_put(&w->dirs, wd, p) < 0) {
            sbx_fsw_dirs_unreserve(w->budget, 1);
            (void)inotify_rm_watch(w->io.fd, wd);
            return sbx_error_set(err, ENOMEM, "allocate watched directory");
        }
    }
    return 0;
}

/* Directories to visit; announce: log the directory's own create if it turns out not to be
 * watched yet (one found beneath a directory watched already: made while it was moved). */
struct queue {
    char **v;
    bool *announce;
    size_t head, n, cap;
};

static int queue_push(struct queue *q, char *p, bool announce)
{
    if (!p)
        return -ENOMEM;
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 16;
        char **v = realloc(q->v, cap * sizeof(*v));
        bool *a = v ? realloc(q->announce, cap * sizeof(*a)) : NULL;
        if (v)
            q->v = v;
        if (!a) {
            free(p);
            return -ENOMEM;
        }
        q->announce = a;
        q->cap = cap;
    }
    q->announce[q->n] = announce;
    q->v[q->n++] = p;
    return 0;
}

static void queue_free(struct queue *q)
{
    for (size_t i = q->head; i < q->n; i++)
        free(q->v[i]);
    free(q->v);
    free(q->announce);
}

static bool entry_is_dir(DIR *d, const struct dirent *de)
{
    struct stat st;

    if (de->d_type != DT_UNKNOWN)
        return de->d_type == DT_DIR;
    return fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

/* Lists directory fd (taken) at path: logs a create per entry when emit, queues the
 * directories to watch (to be announced if new when announce). */
static int scan_dir(struct fs_watch *w, int fd, const char *path, bool emit, bool announce,
                    struct queue *q)
{
    DIR *d = fdopendir(fd);
    struct dirent *de;
    int r = 0;

    if (!d) {
        close(fd);
        return 0; /* gone meanwhile: its removal is reported */
    }
    while (r == 0 && (de = readdir(d))) {
        bool isdir;
        char *child;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        isdir = entry_is_dir(d, de);
        child = sbx_fsw_join(path, de->d_name);
        if (!child) {
            r = -ENOMEM;
            break;
        }
        if (emit)
            sbx_fsw_append(w, SBX_FSEV_CREATE, isdir, strdup(child), NULL);
        if (isdir && w->recursive && !sbx_fsw_excluded(w, child))
            r = queue_push(q, child, announce);
        else
            free(child);
    }
    closedir(d);
    return r;
}

/* With emit, a directory watched already is walked too (not told again): one made beneath it
 * while it was being moved, before its watch was added, is found and told. */
int sbx_fsw_add_tree(struct fs_watch *w, const char *rel, bool emit, struct sbx_error *err)
{
    struct queue q = {0};
    int r = queue_push(&q, strdup(rel), false);

    while (r == 0 && q.head < q.n) {
        bool announce = q.announce[q.head], known;
        _cleanup_free_ char *path = q.v[q.head++];
        int fd = sbx_fsw_open_dir(w->base_fd, path);
        if (fd < 0) {
            if (!path[0]) {
                r = sbx_error_set(err, -fd, "open the watched directory: %s", strerror(-fd));
                break;
            }
            continue; /* gone, or a symlink now: not followed */
        }
        r = watch_dir(w, fd, path, &known, err);
        if (r == 0 && emit && announce && !known)
            sbx_fsw_append(w, SBX_FSEV_CREATE, true, strdup(path), NULL);
        if (r < 0 || !w->recursive) {
            close(fd);
            continue;
        }
        r = scan_dir(w, fd, path, emit && !known, emit && known, &q);
        if (r < 0)
            sbx_error_set(err, -r, "scan \"%s\"", path);
    }
    queue_free(&q);
    return r < 0 ? r : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The kernel's events */

/* A move away whose arrival did not follow: it left the tree. */
static void flush_pending(struct fs_watch *w)
{
    char *from;

    if (!w->have_pending)
        return;
    w->have_pending = false;
    from = TAKE_PTR(w->pending_from);
    if (w->pending_dir && w->recursive && from)
        drop_subtree(w, from);
    sbx_fsw_append(w, SBX_FSEV_REMOVE, w->pending_dir, from, NULL);
}

/* The watch must end: the first reason is kept, nothing more of this read is handled, and the
 * registry ends the watch once the read returns (sbx_fsw_read_events). */
__attribute__((format(printf, 3, 4))) static void fail(struct fs_watch *w, int code,
                                                       const char *fmt, ...)
{
    va_list ap;

    if (w->failing)
        return;
    w->failing = true;
    w->fail_err.code = code;
    va_start(ap, fmt);
    vsnprintf(w->fail_err.msg, sizeof(w->fail_err.msg), fmt, ap);
    va_end(ap);
}

/* A directory that appeared (made, or moved in): watched and scanned, so that what was made in
 * it before its watch was added is seen too. A limit reached ends the watch: a directory that
 * is not watched would lose its events silently. */
static void arrived(struct fs_watch *w, const char *path)
{
    struct sbx_error e = {0};

    if (!w->recursive || sbx_fsw_excluded(w, path))
        return;
    if (sbx_fsw_add_tree(w, path, true, &e) < 0)
        fail(w, e.code, "directory \"%s\" cannot be watched: %s", path, e.msg);
}

static void moved_to(struct fs_watch *w, const struct inotify_event *ev, char *path, bool isdir)
{
    if (w->have_pending && ev->cookie == w->pending_cookie) {
        char *from = TAKE_PTR(w->pending_from);
        w->have_pending = false;
        if (isdir && w->recursive && from)
            retarget(w, from, path);
        sbx_fsw_append(w, SBX_FSEV_RENAME, isdir, strdup(path), from);
        if (isdir)
            arrived(w, path); /* what was made in it before it was watched */
        free(path);
        return;
    }
    sbx_fsw_append(w, SBX_FSEV_CREATE, isdir, strdup(path), NULL);
    if (isdir)
        arrived(w, path);
    free(path);
}

static void on_kernel_overflow(struct fs_watch *w)
{
    struct sbx_error e = {0};

    flush_pending(w);
    sbx_fsw_append_overflow(w, "the kernel's inotify queue overflowed "
                               "(fs.inotify.max_queued_events): events were lost");
    /* Directories made meanwhile are watched now (their contents are the rescan's to find). */
    if (w->recursive && sbx_fsw_add_tree(w, "", false, &e) < 0)
        fail(w, e.code, "after an overflow: %s", e.msg);
}

/* An event about a watched directory itself. */
static void on_self(struct fs_watch *w, const struct inotify_event *ev)
{
    if (ev->wd != w->root_wd)
        return; /* a subdirectory's: its parent reports it, with its name */
    if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
        flush_pending(w);
        sbx_fsw_append(w, SBX_FSEV_REMOVE, true, strdup("."), NULL);
        fail(w, ENOENT, "the watched directory was removed or moved away");
    } else if (ev->mask & IN_ATTRIB) {
        sbx_fsw_append(w, SBX_FSEV_CHMOD, true, strdup("."), NULL);
    }
}

static void handle(struct fs_watch *w, const struct inotify_event *ev)
{
    struct fs_dir *d;
    bool isdir = ev->mask & IN_ISDIR;
    char *path;

    if (ev->mask & IN_Q_OVERFLOW) {
        on_kernel_overflow(w);
        return;
    }
    d = dirs_find(&w->dirs, ev->wd);
    if (!d)
        return; /* a watch we dropped */
    if (ev->mask & IN_IGNORED) {
        if (ev->wd == w->root_wd)
            fail(w, ENOENT, "the watched directory was removed");
        else
            dirs_remove(w, d);
        return;
    }
    if (!ev->len) {
        on_self(w, ev);
        return;
    }
    path = sbx_fsw_join(d->path, ev->name);
    if (!path)
        return;
    if (w->have_pending && !((ev->mask & IN_MOVED_TO) && ev->cookie == w->pending_cookie))
        flush_pending(w);
    if (ev->mask & IN_MOVED_FROM) {
        w->have_pending = true;
        w->pending_due_ms = 0;
        w->pending_cookie = ev->cookie;
        w->pending_from = path;
        w->pending_dir = isdir;
    } else if (ev->mask & IN_MOVED_TO) {
        moved_to(w, ev, path, isdir);
    } else if (ev->mask & IN_CREATE) {
        sbx_fsw_append(w, SBX_FSEV_CREATE, isdir, strdup(path), NULL);
        if (isdir)
            arrived(w, path);
        free(path);
    } else if (ev->mask & IN_DELETE) {
        sbx_fsw_append(w, SBX_FSEV_REMOVE, isdir, path, NULL);
    } else if (ev->mask & (IN_MODIFY | IN_CLOSE_WRITE)) {
        sbx_fsw_append(w, SBX_FSEV_WRITE, isdir, path, NULL);
    } else if (ev->mask & IN_ATTRIB) {
        sbx_fsw_append(w, SBX_FSEV_CHMOD, isdir, path, NULL);
    } else {
        free(path);
    }
}

/* Handles one read's events; false once the watch ended. */
static bool handle_buffer(struct fs_watch *w, const char *buf, size_t n)
{
    for (size_t off = 0; off + sizeof(struct inotify_event) <= n;) {
        const struct inotify_event *ev = (const struct inotify_event *)(buf + off);
        handle(w, ev);
        if (w->failing)
            return false;
        off += sizeof(*ev) + ev->len;
    }
    return true;
}

int sbx_fsw_read_events(struct fs_watch *w, uint64_t *tick_ms, struct sbx_error *err)
{
    char buf[READ_BYTES] __attribute__((aligned(__alignof__(struct inotify_event))));
    bool drained = false;
    ssize_t n;

    *tick_ms = 0;
    n = read(w->io.fd, buf, sizeof(buf));
    if (n > 0 && handle_buffer(w, buf, (size_t)n) && w->have_pending) {
        int queued = 1;
        drained = ioctl(w->io.fd, FIONREAD, &queued) == 0 && queued == 0;
    } else if (n < 0) {
        drained = errno == EAGAIN;
    }
    if (w->failing) {
        *err = w->fail_err;
        return -w->fail_err.code;
    }
    /* A move away's arrival is queued by the same rename, but the queue may be read between
     * the two (the renaming thread preempted in between: seen under ASan on a loaded machine,
     * a rename told as a remove and a create). Once the queue has been empty for a while, none
     * is coming and the move left the tree. */
    if (drained && !w->pending_due_ms) {
        w->pending_due_ms = sbx_fsw_now_ms() + MOVE_GRACE_MS;
        *tick_ms = MOVE_GRACE_MS;
    }
    return 0;
}

void sbx_fsw_move_due(struct fs_watch *w)
{
    int queued = 0;

    if (!w->have_pending || w->io.fd < 0)
        return;
    if (ioctl(w->io.fd, FIONREAD, &queued) == 0 && queued > 0)
        return; /* the next read pairs it, or tells it */
    flush_pending(w);
    sbx_fsw_notify(w);
}
