/* libFuzzer target for the tar unpacker, which reads untrusted bytes (REST uploads). Each input
 * is extracted into a fresh box under /tmp:
 *
 *   box/t        the target, holding "up" -> ".." and "abs" -> "<box>/outside" in advance
 *   box/outside  an empty directory
 *   box/secret   a file
 *
 * and afterwards nothing in the box but beneath t may have changed: no new entry, nothing in
 * outside, secret's content, mode, mtime and link count the same. Also checked: no fd leaks,
 * no temp file left behind, and a failed archive repeats its error on every later call.
 *
 * The input's last 4 bytes (when it has more than 4) choose the chunk sizes, cycled over the
 * rest: byte b gives b bytes, 0 the whole rest, and b >= 0x80 (b - 0x7f) * 509 + 1 bytes, so
 * calls cut headers, data and padding anywhere. A plain tar file, ending in zeros, is thus fed
 * whole, less its last 4 zero bytes. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tar.h"

#define SPEC_LEN   4
#define TMP_PREFIX ".sbx-tar-" /* tar_extract.c's temp names */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Not assert(): this must hold in release builds too (NDEBUG). abort() is what libFuzzer
 * reports as a crash, with the input saved. */
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_tar_unpack: check failed: %s: ", #cond);                         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;

    CHECK(d, "opendir /proc/self/fd: %s", strerror(errno));
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* Removes everything in directory fd (taken), then returns it reopened; *temps counts the names
 * that start with TMP_PREFIX. Directories are made searchable first (an archive may leave them
 * mode 0), symlinks never followed, and at most two fds are open whatever the depth (an archive
 * may nest 2000 levels): a child is entered with the parent closed and left through "..". */
static int empty_dir(int fd, unsigned *temps)
{
    DIR *d = fdopendir(dup(fd));
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;

    CHECK(d, "fdopendir: %s", strerror(errno));
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            names = reallocarray(names, cap, sizeof(*names));
            CHECK(names, "out of memory");
        }
        names[n] = strdup(de->d_name);
        CHECK(names[n++], "out of memory");
    }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        int cfd;

        *temps += strncmp(names[i], TMP_PREFIX, strlen(TMP_PREFIX)) == 0;
        if (unlinkat(fd, names[i], 0) == 0 || errno != EISDIR)
            continue;
        fchmodat(fd, names[i], 0700, 0);
        cfd = openat(fd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        CHECK(cfd >= 0, "open '%s' to remove it: %s", names[i], strerror(errno));
        close(fd);
        cfd = empty_dir(cfd, temps);
        fd = openat(cfd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        CHECK(fd >= 0, "open '..' while removing: %s", strerror(errno));
        close(cfd);
        CHECK(unlinkat(fd, names[i], AT_REMOVEDIR) == 0, "rmdir '%s': %s", names[i],
              strerror(errno));
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return fd;
}

/* Removes the tree at path; returns how many temp names were in it. */
static unsigned remove_tree(const char *path)
{
    unsigned temps = 0;
    int fd;

    chmod(path, 0700);
    fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    CHECK(fd >= 0, "open '%s' to remove it: %s", path, strerror(errno));
    close(empty_dir(fd, &temps));
    CHECK(rmdir(path) == 0, "rmdir '%s': %s", path, strerror(errno));
    return temps;
}

struct box {
    char path[64];
    char t[80], outside[80], secret[80];
    struct stat secret_st;
};

static void box_make(struct box *b)
{
    int fd;

    snprintf(b->path, sizeof(b->path), "/tmp/sbx-fuzz-tar-XXXXXX");
    CHECK(mkdtemp(b->path), "mkdtemp: %s", strerror(errno));
    snprintf(b->t, sizeof(b->t), "%s/t", b->path);
    snprintf(b->outside, sizeof(b->outside), "%s/outside", b->path);
    snprintf(b->secret, sizeof(b->secret), "%s/secret", b->path);
    CHECK(mkdir(b->t, 0755) == 0 && mkdir(b->outside, 0755) == 0, "mkdir: %s", strerror(errno));
    fd = open(b->secret, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
    CHECK(fd >= 0 && write(fd, "canary", 6) == 6, "secret: %s", strerror(errno));
    close(fd);
    CHECK(stat(b->secret, &b->secret_st) == 0, "stat secret: %s", strerror(errno));
    fd = open(b->t, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(fd >= 0 && symlinkat("..", fd, "up") == 0 && symlinkat(b->outside, fd, "abs") == 0,
          "symlinks: %s", strerror(errno));
    close(fd);
}

/* Nothing in the box but beneath t changed. */
static void box_check(const struct box *b)
{
    DIR *d = opendir(b->path);
    struct dirent *de;
    struct stat st;
    int n = 0;
    int fd;

    CHECK(d, "opendir box: %s", strerror(errno));
    while ((de = readdir(d))) {
        const char *s = de->d_name;

        CHECK(!strcmp(s, ".") || !strcmp(s, "..") || !strcmp(s, "t") || !strcmp(s, "outside") ||
                  !strcmp(s, "secret"),
              "'%s' appeared next to the target", s);
        n++;
    }
    closedir(d);
    CHECK(n == 5, "%d entries in the box", n);
    CHECK(lstat(b->t, &st) == 0 && S_ISDIR(st.st_mode), "the target is no longer a directory");
    d = opendir(b->outside);
    CHECK(d, "opendir outside: %s", strerror(errno));
    while ((de = readdir(d)))
        CHECK(!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."), "'outside/%s' appeared",
              de->d_name);
    closedir(d);
    CHECK(lstat(b->outside, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0755,
          "outside changed");
    CHECK(lstat(b->secret, &st) == 0 && S_ISREG(st.st_mode) && st.st_ino == b->secret_st.st_ino &&
              st.st_nlink == 1 && st.st_size == 6 && st.st_mode == b->secret_st.st_mode &&
              st.st_mtim.tv_sec == b->secret_st.st_mtim.tv_sec &&
              st.st_mtim.tv_nsec == b->secret_st.st_mtim.tv_nsec,
          "secret changed (links %ju, size %jd, mode %o)", (uintmax_t)st.st_nlink,
          (intmax_t)st.st_size, (unsigned)st.st_mode);
    fd = open(b->secret, O_RDONLY | O_CLOEXEC);
    {
        char buf[8] = {0};

        CHECK(fd >= 0 && read(fd, buf, sizeof(buf)) == 6 && memcmp(buf, "canary", 6) == 0,
              "secret's content changed");
    }
    close(fd);
}

static size_t chunk_len(uint8_t b, size_t rest)
{
    size_t n = b == 0 ? rest : b < 0x80 ? b : (size_t)(b - 0x7f) * 509 + 1;

    return n < rest ? n : rest;
}

/* Feeds data in chunks; returns what finish returned, or the first error. */
static int unpack(int dirfd, const uint8_t *data, size_t size, const uint8_t *spec)
{
    struct sbx_tar_unpack *u = NULL;
    struct sbx_error err = {0}, again = {0};
    int r = sbx_tar_unpack_new(dirfd, &u, &err);
    size_t off = 0;

    CHECK(r == 0, "sbx_tar_unpack_new: %s", err.msg);
    for (unsigned i = 0; r == 0 && off < size; i++) {
        size_t n = chunk_len(spec ? spec[i % SPEC_LEN] : 0, size - off);

        r = sbx_tar_unpack_write(u, data + off, n, &err);
        off += n;
    }
    if (r < 0) {
        CHECK(err.code == -r && err.msg[0], "error %d with code %d and message '%s'", r, err.code,
              err.msg);
        CHECK(sbx_tar_unpack_write(u, data, size, &again) == r && again.code == err.code &&
                  strcmp(again.msg, err.msg) == 0,
              "a write after a failure did not repeat it: '%s', then '%s'", err.msg, again.msg);
    }
    {
        int f = sbx_tar_unpack_finish(u, &again);

        CHECK(r == 0 || (f == r && strcmp(again.msg, err.msg) == 0),
              "finish after a failure did not repeat it: '%s', then %d '%s'", err.msg, f,
              again.msg);
        CHECK(f >= 0 || (again.code == -f && again.msg[0]), "finish: %d without a message", f);
        r = f;
    }
    sbx_tar_unpack_free(u);
    return r;
}

static bool contains(const uint8_t *data, size_t size, const char *s)
{
    return memmem(data, size, s, strlen(s)) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fds = -1;
    const uint8_t *spec = NULL;
    struct box b;
    int tfd;

    if (fds < 0) {
        umask(022);
        fds = count_fds();
    }
    if (size > SPEC_LEN) {
        size -= SPEC_LEN;
        spec = data + size;
    }
    box_make(&b);
    tfd = open(b.t, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(tfd >= 0, "open target: %s", strerror(errno));
    unpack(tfd, data, size, spec);
    close(tfd);
    CHECK(count_fds() == fds, "fd leak: %d open, %d before", count_fds(), fds);
    box_check(&b);
    /* An archive may give its own entries such names. */
    CHECK(remove_tree(b.path) == 0 || contains(data, size, TMP_PREFIX),
          "a temp file was left in the target");
    return 0;
}
