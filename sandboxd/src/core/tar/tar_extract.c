/* Extraction's filesystem side: every path resolved beneath the target with openat2, missing
 * parents created, entries made under a temp name and renamed over what was there, file data
 * gathered into large writes, and directories' mode and mtime set once the archive leaves
 * them. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cleanup.h"
#include "path.h"
#include "tar_internal.h"

int sbx_tar_open_beneath(int dirfd, const char *path, int flags)
{
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };

    /* EAGAIN: a concurrent rename made the kernel unsure ".." stayed beneath; try again. */
    for (int tries = 0;; tries++) {
        int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));

        if (fd >= 0)
            return fd;
        if (errno != EAGAIN || tries == 16)
            return -errno;
    }
}

/* Cleans an archived name into a path relative to the target ("" for the target itself):
 * "." and empty components go, ".." takes one off; -EXDEV if absolute or climbing out. */
int sbx_tar_clean_name(const char *name, char **ret)
{
    size_t len = strlen(name), n = 0;
    char *out;
    int r;

    if (name[0] == '/')
        return -EXDEV;
    if (len >= PATH_MAX)
        return -ENAMETOOLONG;
    out = malloc(len + 2);
    if (!out)
        return -ENOMEM;
    r = sbx_path_lexical(name, false, out, &n);
    if (r < 0) {
        free(out);
        return r;
    }
    *ret = out;
    return 0;
}

/* Creates the missing directories of path (0755 less umask), each step resolved beneath
 * dirfd; returns an O_PATH fd of the last. */
static int make_dirs(int dirfd, char *path)
{
    _cleanup_close_ int cur = sbx_tar_open_beneath(dirfd, ".", O_PATH | O_DIRECTORY);
    char *s = path;

    if (cur < 0)
        return cur;
    for (;;) {
        char *e = strchrnul(s, '/');
        char c = *e;
        int fd;

        *e = '\0';
        fd = sbx_tar_open_beneath(dirfd, path, O_PATH | O_DIRECTORY);
        if (fd == -ENOENT) {
            if (mkdirat(cur, s, 0755) < 0 && errno != EEXIST)
                fd = -errno;
            else
                fd = sbx_tar_open_beneath(dirfd, path, O_PATH | O_DIRECTORY);
        }
        *e = c;
        if (fd < 0)
            return fd;
        close(cur);
        cur = fd;
        if (!c)
            return TAKE_FD(cur);
        s = e + 1;
    }
}

/* Opens (O_PATH) the directory holding path beneath the target, creating it when asked;
 * *leaf points at path's last component. */
static int open_parent(struct sbx_tar_unpack *u, char *path, bool create, const char **leaf)
{
    char *slash = strrchr(path, '/');
    int fd;

    if (!slash) {
        *leaf = path;
        return sbx_tar_open_beneath(u->dirfd, ".", O_PATH | O_DIRECTORY);
    }
    *slash = '\0';
    fd = sbx_tar_open_beneath(u->dirfd, path, O_PATH | O_DIRECTORY);
    if (fd == -ENOENT && create)
        fd = make_dirs(u->dirfd, path);
    *slash = '/';
    *leaf = slash + 1;
    return fd;
}

int sbx_tar_entry_error(struct sbx_tar_unpack *u, int r, const char *what)
{
    if (r == -EXDEV)
        return sbx_error_set(&u->fail, EXDEV, "entry '%s': path escapes the target directory",
                             u->name);
    return sbx_error_set(&u->fail, r, "entry '%s': %s: %s", u->name, what, strerror(-r));
}

struct tmp_op {
    enum entry_kind kind;
    const char *target; /* KIND_SYMLINK */
    int spfd;           /* KIND_LINK: the source */
    const char *sleaf;
};

/* Creates a new entry under a fresh temp name (u->tmp) in pfd: returns an fd for KIND_FILE,
 * 0 for the others, or -errno. */
static int make_tmp(struct sbx_tar_unpack *u, int pfd, const struct tmp_op *op)
{
    for (int i = 0; i < 16; i++) {
        int r;

        snprintf(u->tmp, sizeof(u->tmp), ".sbx-tar-%016" PRIx64,
                 u->tmp_seed + u->tmp_seq++ * UINT64_C(0x9e3779b97f4a7c15));
        if (op->kind == KIND_FILE)
            r = openat(pfd, u->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        else if (op->kind == KIND_SYMLINK)
            r = symlinkat(op->target, pfd, u->tmp);
        else
            r = linkat(op->spfd, op->sleaf, pfd, u->tmp, 0);
        if (r >= 0)
            return r;
        if (errno != EEXIST)
            break;
    }
    u->tmp[0] = '\0';
    return -errno;
}

/* Renames the temp entry over leaf (an empty directory in the way is removed); on failure
 * the temp entry is removed. */
static int rename_tmp(struct sbx_tar_unpack *u, int pfd, const char *leaf)
{
    int r = 0;

    if (renameat(pfd, u->tmp, pfd, leaf) < 0 &&
        (errno != EISDIR || unlinkat(pfd, leaf, AT_REMOVEDIR) < 0 ||
         renameat(pfd, u->tmp, pfd, leaf) < 0)) {
        r = -errno;
        unlinkat(pfd, u->tmp, 0);
    }
    u->tmp[0] = '\0';
    return r;
}

void sbx_tar_abort_file(struct sbx_tar_unpack *u)
{
    sbx_closep(&u->fd);
    u->fd = -1;
    if (u->pfd >= 0 && u->tmp[0])
        unlinkat(u->pfd, u->tmp, 0);
    u->tmp[0] = '\0';
    sbx_closep(&u->pfd);
    u->pfd = -1;
}

static int apply_dir(struct sbx_tar_unpack *u, const struct dir_attr *d)
{
    const struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, d->mtime};
    _cleanup_close_ int fd = -1;
    char saved = u->dir_path[d->len];
    int r = 0;

    u->dir_path[d->len] = '\0';
    fd = sbx_tar_open_beneath(u->dirfd, u->dir_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (fd >= 0 && (fchmod(fd, d->mode) < 0 || futimens(fd, ts) < 0))
        r = -errno;
    else if (fd < 0 && fd != -ENOENT)
        r = fd;
    if (r < 0)
        sbx_error_set(&u->fail, r, "directory '%s': set mode and mtime: %s", u->dir_path,
                      strerror(-r));
    u->dir_path[d->len] = saved;
    return r;
}

/* Applies the pending directories that are not ancestors of path (all when NULL). */
int sbx_tar_pop_dirs(struct sbx_tar_unpack *u, const char *path)
{
    while (u->ndirs > 0) {
        const struct dir_attr *d = &u->dirs[u->ndirs - 1];
        int r;

        if (path && strncmp(u->dir_path, path, d->len) == 0 && path[d->len] == '/')
            return 0;
        u->ndirs--;
        r = apply_dir(u, d);
        if (r < 0)
            return r;
    }
    return 0;
}

static int push_dir(struct sbx_tar_unpack *u, const char *path, mode_t mode, struct timespec mtime)
{
    size_t len = strlen(path);

    if (u->ndirs == u->dirs_cap) {
        size_t cap = u->dirs_cap ? 2 * u->dirs_cap : 16;
        struct dir_attr *grown = reallocarray(u->dirs, cap, sizeof(*grown));

        if (!grown)
            return sbx_error_set(&u->fail, ENOMEM, "allocate directory list");
        u->dirs = grown;
        u->dirs_cap = cap;
    }
    memcpy(u->dir_path, path, len + 1);
    u->dirs[u->ndirs++] = (struct dir_attr){.len = len, .mode = mode, .mtime = mtime};
    return 0;
}

int sbx_tar_extract_dir(struct sbx_tar_unpack *u, char *path, mode_t mode, struct timespec mtime)
{
    _cleanup_close_ int pfd = -1;
    const char *leaf;
    struct stat st;
    int r = 0;

    pfd = open_parent(u, path, true, &leaf);
    if (pfd < 0)
        return sbx_tar_entry_error(u, pfd, "open parent");
    if (mkdirat(pfd, leaf, 0700) < 0) {
        if (errno != EEXIST || fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
            r = -errno;
        else if (!S_ISDIR(st.st_mode) &&
                 (unlinkat(pfd, leaf, 0) < 0 || mkdirat(pfd, leaf, 0700) < 0))
            r = -errno;
    }
    if (r < 0)
        return sbx_tar_entry_error(u, r, "create directory");
    r = push_dir(u, path, mode, mtime);
    if (r < 0)
        return r;
    u->count++;
    return 0;
}

int sbx_tar_extract_symlink(struct sbx_tar_unpack *u, char *path, const char *target,
                            struct timespec mtime)
{
    const struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, mtime};
    _cleanup_close_ int pfd = -1;
    const char *leaf;
    int r;

    if (!*target)
        return sbx_error_set(&u->fail, EINVAL, "entry '%s': empty symlink target", u->name);
    pfd = open_parent(u, path, true, &leaf);
    if (pfd < 0)
        return sbx_tar_entry_error(u, pfd, "open parent");
    r = make_tmp(u, pfd, &(struct tmp_op){.kind = KIND_SYMLINK, .target = target});
    if (r == 0)
        r = rename_tmp(u, pfd, leaf);
    if (r == 0 && utimensat(pfd, leaf, ts, AT_SYMLINK_NOFOLLOW) < 0)
        r = -errno;
    if (r < 0)
        return sbx_tar_entry_error(u, r, "create symlink");
    u->count++;
    return 0;
}

int sbx_tar_extract_hardlink(struct sbx_tar_unpack *u, char *path, const char *target)
{
    _cleanup_close_ int spfd = -1, pfd = -1;
    _cleanup_free_ char *src = NULL;
    const char *sleaf, *leaf;
    int r = sbx_tar_clean_name(target, &src);

    if (r == 0 && !*src)
        r = -EINVAL;
    if (r == 0)
        spfd = r = open_parent(u, src, false, &sleaf);
    if (r == -EXDEV)
        return sbx_error_set(&u->fail, EXDEV,
                             "entry '%s': hard link target '%s' is outside the target directory",
                             u->name, target);
    if (r < 0)
        return sbx_error_set(&u->fail, -r, "entry '%s': hard link target '%s': %s", u->name, target,
                             strerror(-r));
    pfd = open_parent(u, path, true, &leaf);
    if (pfd < 0)
        return sbx_tar_entry_error(u, pfd, "open parent");
    r = make_tmp(u, pfd, &(struct tmp_op){.kind = KIND_LINK, .spfd = spfd, .sleaf = sleaf});
    if (r == 0) {
        char tmp[sizeof(u->tmp)];

        memcpy(tmp, u->tmp, sizeof(tmp));
        r = rename_tmp(u, pfd, leaf);
        /* Renaming a link over another link to the same file does nothing: drop ours. */
        if (r == 0)
            unlinkat(pfd, tmp, 0);
    }
    if (r < 0)
        return sbx_tar_entry_error(u, r, "create hard link");
    u->count++;
    return 0;
}

int sbx_tar_create_file(struct sbx_tar_unpack *u)
{
    int fd;

    u->pfd = open_parent(u, u->path, true, &u->leaf);
    if (u->pfd < 0) {
        fd = u->pfd;
        u->pfd = -1;
        return sbx_tar_entry_error(u, fd, "open parent");
    }
    fd = make_tmp(u, u->pfd, &(struct tmp_op){.kind = KIND_FILE});
    if (fd < 0)
        return sbx_tar_entry_error(u, fd, "create");
    u->fd = fd;
    u->wlen = 0;
    return 0;
}

static int flush_wbuf(struct sbx_tar_unpack *u, const uint8_t *p, size_t n)
{
    if (!p) {
        p = u->wbuf;
        n = u->wlen;
        u->wlen = 0;
    }
    while (n > 0) {
        ssize_t w = write(u->fd, p, n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return sbx_tar_entry_error(u, -errno, "write");
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int sbx_tar_file_write(struct sbx_tar_unpack *u, const uint8_t *p, size_t n)
{
    int r;

    if (u->wlen + n <= WBUF_SIZE) {
        memcpy(u->wbuf + u->wlen, p, n);
        u->wlen += n;
        return 0;
    }
    r = flush_wbuf(u, NULL, 0);
    if (r < 0 || n >= WBUF_SIZE)
        return r < 0 ? r : flush_wbuf(u, p, n);
    memcpy(u->wbuf, p, n);
    u->wlen = n;
    return 0;
}

int sbx_tar_finish_file(struct sbx_tar_unpack *u)
{
    const struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, u->mtime};
    int r = flush_wbuf(u, NULL, 0);

    if (r < 0)
        return r;
    if (fchmod(u->fd, u->mode) < 0 || futimens(u->fd, ts) < 0)
        return sbx_tar_entry_error(u, -errno, "set mode and mtime");
    sbx_closep(&u->fd);
    u->fd = -1;
    r = rename_tmp(u, u->pfd, u->leaf);
    if (r < 0)
        return sbx_tar_entry_error(u, r, "replace");
    sbx_closep(&u->pfd);
    u->pfd = -1;
    u->count++;
    return 0;
}
