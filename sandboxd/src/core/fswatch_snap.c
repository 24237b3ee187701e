/* The directory watch's periodic rescan: a snapshot of the tree (type, mode, owner, size, mtime
 * of each entry, no symlink followed) compared with the last one, for what inotify cannot see
 * (a gVisor or Kata mount changed from outside the sandbox). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "fswatch_internal.h"

/* Entries a snapshot holds at most: a bigger tree is refused a rescan. */
#define SNAP_MAX 65536

struct snap_entry {
    char *path;
    bool dir;
    mode_t mode;
    uid_t uid;
    gid_t gid;
    off_t size;
    struct timespec mtime;
};

struct fs_snap {
    struct snap_entry *e;
    size_t n, cap;
};

void sbx_fsw_snap_free(struct fs_snap *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        free(s->e[i].path);
    free(s->e);
    free(s);
}

static int snap_add(struct fs_snap *s, char *path, const struct stat *st)
{
    if (s->n == SNAP_MAX) {
        free(path);
        return -EMFILE;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct snap_entry *e = realloc(s->e, cap * sizeof(*e));
        if (!e) {
            free(path);
            return -ENOMEM;
        }
        s->e = e;
        s->cap = cap;
    }
    s->e[s->n++] = (struct snap_entry){.path = path,
                                       .dir = S_ISDIR(st->st_mode),
                                       .mode = st->st_mode,
                                       .uid = st->st_uid,
                                       .gid = st->st_gid,
                                       .size = st->st_size,
                                       .mtime = st->st_mtim};
    return 0;
}

/* Adds the entries of directory rel; appends to *dirs those to descend into. */
static int snap_dir(struct fs_watch *w, struct fs_snap *s, const char *rel, char ***dirs,
                    size_t *n_dirs)
{
    int fd = sbx_fsw_open_dir(w->base_fd, rel);
    struct dirent *de;
    DIR *d;
    int r = 0;

    if (fd < 0)
        return rel[0] ? 0 : fd; /* a subdirectory gone meanwhile */
    d = fdopendir(fd);
    if (!d) {
        close(fd);
        return 0;
    }
    while (r == 0 && (de = readdir(d))) {
        struct stat st;
        char *path;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (!(path = sbx_fsw_join(rel, de->d_name))) {
            r = -ENOMEM;
        } else if (S_ISDIR(st.st_mode) && w->recursive && !sbx_fsw_excluded(w, path)) {
            char **v = realloc(*dirs, (*n_dirs + 1) * sizeof(**dirs));
            char *copy = strdup(path);
            if (!v || !copy) {
                free(copy);
                if (v)
                    *dirs = v;
                free(path);
                r = -ENOMEM;
                break;
            }
            *dirs = v;
            (*dirs)[(*n_dirs)++] = copy;
            r = snap_add(s, path, &st);
        } else {
            r = snap_add(s, path, &st);
        }
    }
    closedir(d);
    return r;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const struct snap_entry *)a)->path, ((const struct snap_entry *)b)->path);
}

int sbx_fsw_snap_take(struct fs_watch *w, struct fs_snap **ret, struct sbx_error *err)
{
    struct fs_snap *s = calloc(1, sizeof(*s));
    char **dirs = NULL;
    size_t n_dirs = 0, next = 0;
    int r = 0;

    if (!s)
        return sbx_error_set(err, ENOMEM, "allocate snapshot");
    r = snap_dir(w, s, "", &dirs, &n_dirs);
    while (r == 0 && next < n_dirs)
        r = snap_dir(w, s, dirs[next++], &dirs, &n_dirs);
    for (size_t i = 0; i < n_dirs; i++)
        free(dirs[i]);
    free(dirs);
    if (r < 0) {
        sbx_fsw_snap_free(s);
        if (r == -EMFILE)
            return sbx_error_set(err, EMFILE, "more than %d entries to rescan", SNAP_MAX);
        return sbx_error_set(err, -r, "rescan: %s", strerror(-r));
    }
    if (s->n) /* an empty tree has no array: qsort must not see NULL */
        qsort(s->e, s->n, sizeof(*s->e), cmp_entry);
    *ret = s;
    return 0;
}

static void diff_one(struct fs_watch *w, const struct snap_entry *o, const struct snap_entry *n)
{
    if (o->dir != n->dir) {
        sbx_fsw_append(w, SBX_FSEV_REMOVE, o->dir, strdup(o->path), NULL);
        sbx_fsw_append(w, SBX_FSEV_CREATE, n->dir, strdup(n->path), NULL);
        return;
    }
    if (!n->dir && (o->size != n->size || o->mtime.tv_sec != n->mtime.tv_sec ||
                    o->mtime.tv_nsec != n->mtime.tv_nsec))
        sbx_fsw_append(w, SBX_FSEV_WRITE, false, strdup(n->path), NULL);
    if (o->mode != n->mode || o->uid != n->uid || o->gid != n->gid)
        sbx_fsw_append(w, SBX_FSEV_CHMOD, n->dir, strdup(n->path), NULL);
}

int sbx_fsw_rescan(struct fs_watch *w, struct sbx_error *err)
{
    struct fs_snap *now = NULL, *old = w->snap;
    size_t i = 0, j = 0;
    int r;

    if ((r = sbx_fsw_snap_take(w, &now, err)) < 0)
        return r;
    while (old && (i < old->n || j < now->n)) {
        int c = i == old->n ? 1 : j == now->n ? -1 : strcmp(old->e[i].path, now->e[j].path);
        if (c < 0) {
            sbx_fsw_append(w, SBX_FSEV_REMOVE, old->e[i].dir, strdup(old->e[i].path), NULL);
            i++;
        } else if (c > 0) {
            sbx_fsw_append(w, SBX_FSEV_CREATE, now->e[j].dir, strdup(now->e[j].path), NULL);
            j++;
        } else {
            diff_one(w, &old->e[i++], &now->e[j++]);
        }
    }
    sbx_fsw_snap_free(old);
    w->snap = now;
    return 0;
}
