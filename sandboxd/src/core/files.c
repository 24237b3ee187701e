#define _GNU_SOURCE
#include "files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "cleanup.h"

/* Directory listings larger than this are refused rather than built in memory. */
#define MAX_ENTRIES 100000
/* Trees deeper than this are not removed recursively. */
#define MAX_DEPTH 256

static void dir_closep(DIR **d)
{
    if (*d)
        closedir(*d);
}

int sbx_fs_open(const struct sbx_root *root, const char *path, struct stat *st,
                struct sbx_error *err)
{
    int fd = sbx_path_open(root, path, O_RDONLY | O_NONBLOCK, err);

    if (fd < 0)
        return fd;
    if (fstat(fd, st) < 0 || fcntl(fd, F_SETFL, 0) < 0) {
        int r = sbx_error_set(err, errno, "stat \"%s\": %s", path, strerror(errno));
        close(fd);
        return r;
    }
    return fd;
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const struct sbx_fs_entry *)a)->name, ((const struct sbx_fs_entry *)b)->name);
}

void sbx_fs_entries_free(struct sbx_fs_entry *e, size_t n)
{
    for (size_t i = 0; e && i < n; i++)
        free(e[i].name);
    free(e);
}

/* The stat of a symlink's target, if it stays beneath the root. */
static int stat_link(const struct sbx_root *root, const char *dir, const char *name,
                     struct stat *st)
{
    _cleanup_free_ char *joined = NULL;
    _cleanup_close_ int fd = -1;

    if (asprintf(&joined, "%s/%s", dir, name) < 0)
        return -ENOMEM;
    fd = sbx_path_open(root, joined, O_PATH, NULL);
    if (fd < 0)
        return fd;
    return fstat(fd, st) < 0 ? -errno : 0;
}

int sbx_fs_list(const struct sbx_root *root, const char *path, int dirfd, struct sbx_fs_entry **ret,
                size_t *ret_n, struct sbx_error *err)
{
    _cleanup_(dir_closep) DIR *d = NULL;
    struct sbx_fs_entry *e = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);

    if (fd < 0 || !(d = fdopendir(fd))) {
        int r = sbx_error_set(err, errno, "read directory \"%s\": %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return r;
    }
    rewinddir(d);
    while ((de = readdir(d))) {
        struct stat st;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* vanished meanwhile */
        if (S_ISLNK(st.st_mode) && stat_link(root, path, de->d_name, &st) < 0)
            continue; /* escaping or dangling */
        if (n == MAX_ENTRIES) {
            sbx_fs_entries_free(e, n);
            return sbx_error_set(err, EFBIG, "directory \"%s\" has more than %d entries", path,
                                 MAX_ENTRIES);
        }
        if (n == cap) {
            struct sbx_fs_entry *ne = realloc(e, (cap ? cap * 2 : 32) * sizeof(*e));
            if (!ne) {
                sbx_fs_entries_free(e, n);
                return sbx_error_set(err, ENOMEM, "allocate directory listing");
            }
            e = ne;
            cap = cap ? cap * 2 : 32;
        }
        e[n].name = strdup(de->d_name);
        e[n].st = st;
        if (!e[n].name) {
            sbx_fs_entries_free(e, n);
            return sbx_error_set(err, ENOMEM, "allocate directory listing");
        }
        n++;
    }
    if (n)
        qsort(e, n, sizeof(*e), entry_cmp);
    *ret = e;
    *ret_n = n;
    return 0;
}

/* Creates rel (cleaned, relative to the root) and its missing parents beneath the root; returns
 * an O_PATH fd of it. */
static int mkdir_beneath(const struct sbx_root *root, const char *rel, mode_t mode,
                         struct sbx_error *err)
{
    _cleanup_free_ char *prefix = strdup(rel);
    size_t len = strlen(rel);

    if (!prefix)
        return sbx_error_set(err, ENOMEM, "allocate path");
    for (size_t i = 0; i <= len; i++) {
        _cleanup_close_ int parent = -1;
        const char *slash, *name;
        int fd;

        if (rel[i] != '/' && rel[i] != '\0')
            continue;
        prefix[i] = '\0';
        fd = sbx_path_open(root, prefix, O_PATH | O_DIRECTORY, err);
        if (fd >= 0 && i == len)
            return fd;
        if (fd >= 0) {
            close(fd);
            prefix[i] = '/';
            continue;
        }
        if (fd != -ENOENT)
            return fd;
        slash = strrchr(prefix, '/');
        name = slash ? slash + 1 : prefix;
        if (slash) {
            *(char *)slash = '\0';
            parent = sbx_path_open(root, prefix, O_PATH | O_DIRECTORY, err);
            *(char *)slash = '/';
        } else {
            parent = fcntl(root->fd, F_DUPFD_CLOEXEC, 3);
        }
        if (parent < 0)
            return parent;
        if (mkdirat(parent, name, mode) < 0 && errno != EEXIST)
            return sbx_error_set(err, errno, "create directory \"%s\": %s", prefix,
                                 strerror(errno));
        if (i == len)
            return sbx_path_open(root, prefix, O_PATH | O_DIRECTORY, err);
        prefix[i] = '/';
    }
    return sbx_error_set(err, EINVAL, "empty path");
}

/* Opens the parent of path (beneath the root; created when asked) and names the last component.
 * -EBUSY for the root itself. */
static int open_parent(const struct sbx_root *root, const char *path, bool create, int *ret_dir,
                       char **ret_name, struct sbx_error *err)
{
    _cleanup_free_ char *rel = NULL;
    char *slash, *name;
    int fd, r;

    r = sbx_path_clean(root, path, &rel, err);
    if (r < 0)
        return r;
    if (strcmp(rel, ".") == 0)
        return sbx_error_set(err, EBUSY, "the sandbox root itself");
    slash = strrchr(rel, '/');
    name = strdup(slash ? slash + 1 : rel);
    if (!name)
        return sbx_error_set(err, ENOMEM, "allocate path");
    if (slash)
        *slash = '\0';
    else
        strcpy(rel, ".");
    fd = sbx_path_open(root, rel, O_PATH | O_DIRECTORY, err);
    if (fd == -ENOENT && create)
        fd = mkdir_beneath(root, rel, 0755, err);
    if (fd < 0) {
        free(name);
        return fd;
    }
    *ret_dir = fd;
    *ret_name = name;
    return 0;
}

/* Writeback is started every so many bytes of an upload, so that the final fsync has only the
 * tail left to flush. */
#define WRITEBACK_EVERY (8u << 20)

struct sbx_fs_writer {
    int dirfd; /* O_RDONLY, for fsync */
    int fd;    /* O_RDWR: the hasher reads back what was written */
    char *name;
    char tmp[32];
    uint64_t size, flushed;
    struct sbx_hasher *hash;
};

static void writer_free(struct sbx_fs_writer *w)
{
    sbx_closep(&w->fd);
    sbx_closep(&w->dirfd);
    free(w->name);
    sbx_hasher_free(w->hash);
    free(w);
}

/* When the target is a symlink beneath the root, the parent and name of what it points to. */
static int follow_final_link(const struct sbx_root *root, const char *path, int *dirfd, char **name,
                             struct sbx_error *err)
{
    _cleanup_free_ char *rel = NULL;
    _cleanup_close_ int fd = sbx_path_open(root, path, O_PATH, err);
    int r;

    if (fd == -ENOENT)
        return 0; /* dangling: the link itself is replaced */
    if (fd < 0)
        return fd;
    r = sbx_path_rel_of_fd(root, fd, &rel, err);
    if (r < 0)
        return r;
    sbx_closep(dirfd);
    free(*name);
    *name = NULL;
    *dirfd = -1;
    return open_parent(root, rel, false, dirfd, name, err);
}

int sbx_fs_writer_begin(const struct sbx_root *root, const char *path, mode_t mode,
                        struct sbx_fs_writer **ret, struct sbx_error *err)
{
    struct sbx_fs_writer *w = calloc(1, sizeof(*w));
    _cleanup_close_ int parent = -1;
    struct stat st;
    int r;

    if (!w)
        return sbx_error_set(err, ENOMEM, "allocate writer");
    w->fd = w->dirfd = -1;
    r = open_parent(root, path, true, &parent, &w->name, err);
    if (r == -EBUSY)
        r = sbx_error_set(err, EISDIR, "target path is a directory");
    if (r == 0 && fstatat(parent, w->name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
        r = follow_final_link(root, path, &parent, &w->name, err);
    if (r == 0 && fstatat(parent, w->name, &st, 0) == 0 && S_ISDIR(st.st_mode))
        r = sbx_error_set(err, EISDIR, "target path is a directory");
    if (r == 0) {
        w->dirfd = openat(parent, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (w->dirfd < 0)
            r = sbx_error_set(err, errno, "open parent directory: %s", strerror(errno));
    }
    for (int tries = 0; r == 0 && w->fd < 0; tries++) {
        uint32_t rnd[2] = {0, 0};
        (void)!getrandom(rnd, sizeof(rnd), 0);
        snprintf(w->tmp, sizeof(w->tmp), ".sandboxd-tmp-%08x%08x", rnd[0], rnd[1]);
        w->fd = openat(w->dirfd, w->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (w->fd < 0 && (errno != EEXIST || tries > 8))
            r = sbx_error_set(err, errno, "failed to create temp file: %s", strerror(errno));
    }
    if (r == 0 && fchmod(w->fd, mode) < 0)
        r = sbx_error_set(err, errno, "failed to set file mode: %s", strerror(errno));
    if (r == 0)
        r = sbx_hasher_new(w->fd, &w->hash, err);
    if (r < 0) {
        sbx_fs_writer_abort(w);
        return r;
    }
    *ret = w;
    return 0;
}

int sbx_fs_writer_write(struct sbx_fs_writer *w, const void *buf, size_t len, struct sbx_error *err)
{
    const char *p = buf;

    while (len) {
        ssize_t n = write(w->fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sbx_error_set(err, errno, "failed to write file contents: %s", strerror(errno));
        sbx_hasher_update(w->hash, p, (size_t)n);
        p += n;
        len -= (size_t)n;
        w->size += (uint64_t)n;
    }
    if (w->size - w->flushed >= WRITEBACK_EVERY) {
        (void)sync_file_range(w->fd, (off_t)w->flushed, (off_t)(w->size - w->flushed),
                              SYNC_FILE_RANGE_WRITE);
        w->flushed = w->size;
    }
    return 0;
}

uint64_t sbx_fs_writer_size(const struct sbx_fs_writer *w)
{
    return w->size;
}

int sbx_fs_writer_commit(struct sbx_fs_writer *w, uint64_t *size, uint8_t sha256[SBX_SHA256_LEN],
                         struct sbx_error *err)
{
    int r = 0;

    /* The hasher catches up while the data goes to disk. */
    if (fsync(w->fd) < 0)
        r = sbx_error_set(err, errno, "failed to sync file: %s", strerror(errno));
    else
        r = sbx_hasher_final(w->hash, sha256, err);
    if (r == 0 && close(TAKE_FD(w->fd)) < 0)
        r = sbx_error_set(err, errno, "failed to close file: %s", strerror(errno));
    else if (r == 0 && renameat(w->dirfd, w->tmp, w->dirfd, w->name) < 0)
        r = sbx_error_set(err, errno, "failed to move file into place: %s", strerror(errno));
    if (r < 0) {
        sbx_fs_writer_abort(w);
        return r;
    }
    (void)fsync(w->dirfd); /* the rename itself durable */
    *size = w->size;
    writer_free(w);
    return 0;
}

void sbx_fs_writer_abort(struct sbx_fs_writer *w)
{
    if (!w)
        return;
    if (w->dirfd >= 0 && w->tmp[0])
        (void)unlinkat(w->dirfd, w->tmp, 0);
    writer_free(w);
}

static int remove_tree(int dirfd, const char *name, int depth, struct sbx_error *err);

/* Removes everything in directory fd (not following symlinks). */
static int remove_children(int fd, int depth, struct sbx_error *err)
{
    _cleanup_(dir_closep) DIR *d = NULL;
    int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    struct dirent *de;

    if (dfd < 0 || !(d = fdopendir(dfd))) {
        int r = sbx_error_set(err, errno, "read directory: %s", strerror(errno));
        if (dfd >= 0)
            close(dfd);
        return r;
    }
    while ((de = readdir(d))) {
        struct stat st;
        int r;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISDIR(st.st_mode))
            r = remove_tree(fd, de->d_name, depth + 1, err);
        else if (unlinkat(fd, de->d_name, 0) < 0 && errno != ENOENT)
            r = sbx_error_set(err, errno, "remove \"%s\": %s", de->d_name, strerror(errno));
        else
            r = 0;
        if (r < 0)
            return r;
    }
    return 0;
}

static int remove_tree(int dirfd, const char *name, int depth, struct sbx_error *err)
{
    _cleanup_close_ int fd = -1;
    int r;

    if (depth > MAX_DEPTH)
        return sbx_error_set(err, ELOOP, "tree deeper than %d levels", MAX_DEPTH);
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_set(err, errno, "open \"%s\": %s", name, strerror(errno));
    r = remove_children(fd, depth, err);
    if (r < 0)
        return r;
    if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        return sbx_error_set(err, errno, "remove \"%s\": %s", name, strerror(errno));
    return 0;
}

int sbx_fs_delete(const struct sbx_root *root, const char *path, bool recursive,
                  struct sbx_error *err)
{
    _cleanup_close_ int dirfd = -1;
    _cleanup_free_ char *name = NULL;
    struct stat st;
    int r = open_parent(root, path, false, &dirfd, &name, err);

    if (r == -EBUSY) {
        _cleanup_close_ int fd = -1;
        if (!recursive)
            return sbx_error_set(err, EBUSY,
                                 "cannot delete the sandbox root; pass "
                                 "recursive=true to clear its contents");
        fd = openat(root->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
            return sbx_error_set(err, errno, "open root: %s", strerror(errno));
        return remove_children(fd, 0, err);
    }
    if (r == -ENOENT || (r == 0 && fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0))
        return sbx_error_set(err, ENOENT, "path does not exist within the sandbox");
    if (r < 0)
        return r;
    if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(dirfd, name, 0) < 0)
            return sbx_error_set(err, errno, "remove: %s", strerror(errno));
        return 0;
    }
    if (recursive)
        return remove_tree(dirfd, name, 0, err);
    if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0) {
        if (errno == ENOTEMPTY || errno == EEXIST)
            return sbx_error_set(err, ENOTEMPTY,
                                 "directory is not empty; pass recursive=true to remove it");
        return sbx_error_set(err, errno, "remove: %s", strerror(errno));
    }
    return 0;
}

int sbx_fs_mkdir(const struct sbx_root *root, const char *path, mode_t mode, bool parents,
                 struct sbx_error *err)
{
    _cleanup_close_ int dirfd = -1;
    _cleanup_free_ char *name = NULL, *rel = NULL;
    int r;

    if (parents) {
        r = sbx_path_clean(root, path, &rel, err);
        if (r < 0)
            return r;
        r = mkdir_beneath(root, rel, mode, err);
        if (r >= 0)
            close(r);
        return r < 0 ? r : 0;
    }
    r = open_parent(root, path, false, &dirfd, &name, err);
    if (r == -EBUSY)
        return sbx_error_set(err, EEXIST, "directory exists");
    if (r < 0)
        return r;
    if (mkdirat(dirfd, name, mode) < 0)
        return sbx_error_set(err, errno, "create directory \"%s\": %s", path, strerror(errno));
    return 0;
}

int sbx_fs_move(const struct sbx_root *root, const char *from, const char *to, bool overwrite,
                struct sbx_error *err)
{
    _cleanup_close_ int fdir = -1, tdir = -1;
    _cleanup_free_ char *fname = NULL, *tname = NULL;
    int r;

    r = open_parent(root, from, false, &fdir, &fname, err);
    if (r == 0)
        r = open_parent(root, to, true, &tdir, &tname, err);
    if (r < 0)
        return r;
    if (renameat2(fdir, fname, tdir, tname, overwrite ? 0 : RENAME_NOREPLACE) < 0) {
        if (errno == EEXIST)
            return sbx_error_set(err, EEXIST, "destination \"%s\" exists", to);
        return sbx_error_set(err, errno, "move \"%s\" to \"%s\": %s", from, to, strerror(errno));
    }
    return 0;
}

int sbx_fs_lstat(const struct sbx_root *root, const char *path, struct stat *st, char **target,
                 struct sbx_error *err)
{
    _cleanup_close_ int dirfd = -1;
    _cleanup_free_ char *name = NULL;
    int r = open_parent(root, path, false, &dirfd, &name, err);

    *target = NULL;
    if (r == -EBUSY) {
        if (fstat(root->fd, st) < 0)
            return sbx_error_set(err, errno, "stat root: %s", strerror(errno));
        return 0;
    }
    if (r < 0)
        return r;
    if (fstatat(dirfd, name, st, AT_SYMLINK_NOFOLLOW) < 0)
        return sbx_error_set(
            err, errno, errno == ENOENT ? "path does not exist within the sandbox" : "stat: %s",
            strerror(errno));
    if (S_ISLNK(st->st_mode)) {
        char buf[4096];
        ssize_t n = readlinkat(dirfd, name, buf, sizeof(buf) - 1);
        if (n >= 0) {
            buf[n] = '\0';
            *target = strdup(buf);
        }
    }
    return 0;
}

int sbx_fs_open_dir(const struct sbx_root *root, const char *path, bool create,
                    struct sbx_error *err)
{
    _cleanup_free_ char *rel = NULL;
    _cleanup_close_ int made = -1;
    int fd = sbx_path_open(root, path, O_RDONLY | O_DIRECTORY, err);
    int r;

    if (fd != -ENOENT || !create)
        return fd;
    r = sbx_path_clean(root, path, &rel, err);
    if (r < 0)
        return r;
    made = mkdir_beneath(root, rel, 0755, err);
    if (made < 0)
        return made;
    fd = openat(made, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return fd < 0 ? sbx_error_set(err, errno, "open \"%s\": %s", path, strerror(errno)) : fd;
}
