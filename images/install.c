/* sandboxd-install: the copy step of the injector image's init container. The image holds only
 * /sandboxd and this program (no shell, no cp), so the init container runs
 *
 *     sandboxd-install /sandboxd-bin
 *
 * which copies /sandboxd into the shared volume as /sandboxd-bin/sandboxd, mode 0755: written
 * to a temporary name, fsynced, then renamed into place, so the main container never sees a
 * partial binary, and a second run (an init container restarted) replaces it atomically. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "error.h"

#define INSTALL_NAME "sandboxd"
#define MAX_BYTES    (256LL << 20) /* far above the binary's size; bounds a wrong --from */

static int copy_fd(int in, int out, long long size, struct sbx_error *err)
{
    char buf[64 * 1024];
    long long done = 0;

    while (done < size) {
        ssize_t n = read(in, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sbx_error_set(err, errno, "read");
        if (n == 0)
            return sbx_error_set(err, EIO, "source shrank while copying");
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0)
                return sbx_error_set(err, errno, "write");
            off += w;
        }
        done += n;
    }
    return 0;
}

/* Copies from (a regular file) into dir/INSTALL_NAME, atomically; sets *size. */
static int install(const char *from, const char *dir, long long *size, struct sbx_error *err)
{
    _cleanup_close_ int in = -1, dfd = -1, out = -1;
    char tmp[64];
    struct stat st;
    int r;

    in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0 || fstat(in, &st) < 0)
        return sbx_error_set(err, errno, "open '%s'", from);
    if (!S_ISREG(st.st_mode) || st.st_size > MAX_BYTES)
        return sbx_error_set(err, EINVAL, "'%s' is not a regular file of at most %lld bytes", from,
                             MAX_BYTES);
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return sbx_error_set(err, errno, "open directory '%s'", dir);
    snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", INSTALL_NAME, (int)getpid());
    out = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0700);
    if (out < 0)
        return sbx_error_set(err, errno, "create '%s/%s'", dir, tmp);
    r = copy_fd(in, out, st.st_size, err);
    if (r >= 0 && fchmod(out, 0755) < 0)
        r = sbx_error_set(err, errno, "chmod");
    if (r >= 0 && fsync(out) < 0)
        r = sbx_error_set(err, errno, "fsync");
    if (r >= 0 && renameat(dfd, tmp, dfd, INSTALL_NAME) < 0)
        r = sbx_error_set(err, errno, "rename to '%s/%s'", dir, INSTALL_NAME);
    if (r < 0) {
        unlinkat(dfd, tmp, 0);
        return sbx_error_wrap(err, "install into '%s'", dir);
    }
    fsync(dfd); /* the rename; a failure here loses nothing that was not already durable */
    *size = st.st_size;
    return 0;
}

static int usage(FILE *f, int status)
{
    fputs("usage: sandboxd-install [--from FILE] DIR\n"
          "copies FILE (default /sandboxd) to DIR/sandboxd, mode 0755, atomically\n",
          f);
    return status;
}

int main(int argc, char **argv)
{
    const char *from = "/sandboxd", *dir = NULL;
    struct sbx_error err = {0};
    long long size = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return usage(stdout, 0);
        if (strcmp(argv[i], "--from") == 0 && i + 1 < argc)
            from = argv[++i];
        else if (!dir && argv[i][0] != '-')
            dir = argv[i];
        else
            return usage(stderr, 2);
    }
    if (!dir)
        return usage(stderr, 2);
    if (install(from, dir, &size, &err) < 0) {
        fprintf(stderr, "sandboxd-install: %s: %s\n", err.msg, strerror(err.code));
        return 1;
    }
    printf("sandboxd-install: installed '%s/%s' (%lld bytes)\n", dir, INSTALL_NAME, size);
    return 0;
}
