#define _GNU_SOURCE
#include "path.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cleanup.h"

/* Creates path and its missing parents (mode 0755). */
static int mkdir_parents(const char *path)
{
    _cleanup_free_ char *p = strdup(path);

    if (!p)
        return -ENOMEM;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
            return -errno;
        *s = c;
        if (c == '\0')
            return 0;
    }
}

int sbx_root_open(struct sbx_root *root, const char *path, struct sbx_error *err)
{
    int r = mkdir_parents(path);

    if (r < 0)
        return sbx_error_set(err, r, "create root dir '%s'", path);
    root->path = realpath(path, NULL);
    if (!root->path)
        return sbx_error_set(err, errno, "root dir '%s'", path);
    root->fd = open(root->path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root->fd < 0) {
        r = sbx_error_set(err, errno, "open root dir '%s'", root->path);
        free(root->path);
        root->path = NULL;
        return r;
    }
    return 0;
}

void sbx_root_release(struct sbx_root *root)
{
    sbx_closep(&root->fd);
    root->fd = -1;
    free(root->path);
    root->path = NULL;
}

int sbx_path_lexical(const char *p, bool absolute, char *out, size_t *len)
{
    size_t o = 0;

    while (*p) {
        const char *end = strchrnul(p, '/');
        size_t n = (size_t)(end - p);

        if (n == 0 || (n == 1 && p[0] == '.')) {
            /* empty or "." component */
        } else if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (o == 0 && !absolute)
                return -EXDEV;
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--; /* the separator */
        } else {
            if (o > 0)
                out[o++] = '/';
            memcpy(out + o, p, n);
            o += n;
        }
        p = *end ? end + 1 : end;
    }
    out[o] = '\0';
    *len = o;
    return 0;
}

int sbx_path_clean(const struct sbx_root *root, const char *user_path, char **ret,
                   struct sbx_error *err)
{
    size_t len = strlen(user_path), n;
    _cleanup_free_ char *out = malloc(len + 2);
    bool absolute = user_path[0] == '/';
    const char *rel;

    if (!out)
        return sbx_error_set(err, ENOMEM, "allocate path");
    if (sbx_path_lexical(user_path, absolute, out, &n) < 0)
        return sbx_error_set(err, EXDEV, "access denied: path \"%s\": path escapes sandbox root",
                             user_path);
    rel = out;
    if (absolute && strcmp(root->path, "/") != 0) {
        /* An absolute path under the root loses that prefix; any other is taken as relative to
         * the root, like the reference daemon does. */
        size_t rn = strlen(root->path + 1);
        if (strncmp(out, root->path + 1, rn) == 0 && (out[rn] == '/' || out[rn] == '\0'))
            rel = out[rn] ? out + rn + 1 : out + rn;
    }
    if (!*rel)
        rel = ".";
    *ret = strdup(rel);
    return *ret ? 0 : sbx_error_set(err, ENOMEM, "allocate path");
}

int sbx_path_rel_of_fd(const struct sbx_root *root, int fd, char **ret, struct sbx_error *err)
{
    char link[64], target[PATH_MAX];
    size_t n = strlen(root->path);
    const char *rel;
    ssize_t len;

    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    len = readlink(link, target, sizeof(target) - 1);
    if (len < 0)
        return sbx_error_set(err, EXDEV, "cannot tell where fd %d is", fd);
    target[len] = '\0';
    if (strcmp(root->path, "/") == 0)
        rel = target + 1;
    else if (strncmp(target, root->path, n) == 0 && (target[n] == '/' || target[n] == '\0'))
        rel = target[n] ? target + n + 1 : target + n;
    else
        return sbx_error_set(err, EXDEV, "path escapes sandbox root");
    *ret = strdup(*rel ? rel : ".");
    return *ret ? 0 : sbx_error_set(err, ENOMEM, "allocate path");
}

/* After following an absolute symlink, checks where the fd really is: race-free, since the fd
 * no longer depends on the path. Needs /proc; without it the escape check fails closed. */
static int verify_under_root(const struct sbx_root *root, int fd)
{
    _cleanup_free_ char *rel = NULL;

    return sbx_path_rel_of_fd(root, fd, &rel, NULL);
}

int sbx_path_open(const struct sbx_root *root, const char *user_path, int flags,
                  struct sbx_error *err)
{
    _cleanup_free_ char *rel = NULL;
    struct open_how how = {
        .flags = (unsigned long long)(flags | O_CLOEXEC),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };
    int fd, r;

    /* A root of "/" confines nothing (the E2B port's paths): absolute symlinks are followed as
     * they are, not refused and retried. */
    if (strcmp(root->path, "/") == 0)
        how.resolve = RESOLVE_NO_MAGICLINKS;
    r = sbx_path_clean(root, user_path, &rel, err);
    if (r < 0)
        return r;
    /* EAGAIN: a concurrent rename made the kernel unsure ".." stayed beneath; try again. */
    for (int tries = 0; tries < 16; tries++) {
        fd = (int)syscall(SYS_openat2, root->fd, rel, &how, sizeof(how));
        if (fd >= 0)
            return fd;
        if (errno != EAGAIN)
            break;
    }
    if (errno == EXDEV || errno == ENOSYS) {
        /* An absolute symlink, which RESOLVE_BENEATH refuses even when it points inside; or a
         * kernel without openat2. After a refusal, any failure of the plain open stays a
         * refusal: ENOENT or ENOTDIR would tell which paths exist outside the root. */
        int refused = errno == EXDEV;
        fd = openat(root->fd, rel, flags | O_CLOEXEC);
        if (fd >= 0) {
            r = verify_under_root(root, fd);
            if (r == 0)
                return fd;
            close(fd);
            errno = EXDEV;
        } else if (refused) {
            errno = EXDEV;
        }
    }
    if (errno == EXDEV)
        return sbx_error_set(err, EXDEV, "access denied: path \"%s\": path escapes sandbox root",
                             user_path);
    return sbx_error_set(err, errno, "open \"%s\": %s", user_path, strerror(errno));
}
