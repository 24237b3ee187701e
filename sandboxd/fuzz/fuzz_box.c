#define _GNU_SOURCE
#include "fuzz_box.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

const char *fuzz_tmp_dir(void)
{
    struct stat st;

    return stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0
               ? "/dev/shm"
               : "/tmp";
}

int fuzz_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;

    CHECK(d, "opendir /proc/self/fd: %s", strerror(errno));
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static void write_file(const char *path, const char *content)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
    size_t n = strlen(content);

    CHECK(fd >= 0 && write(fd, content, n) == (ssize_t)n, "write '%s': %s", path, strerror(errno));
    close(fd);
}

void fuzz_box_make(struct fuzz_box *b)
{
    struct sbx_error err = {0};
    char p[160];

    snprintf(b->path, sizeof(b->path), "%s/sbx-fuzz-box-XXXXXX", fuzz_tmp_dir());
    CHECK(mkdtemp(b->path), "mkdtemp: %s", strerror(errno));
    snprintf(b->root_path, sizeof(b->root_path), "%s/root", b->path);
    snprintf(b->outside, sizeof(b->outside), "%s/outside", b->path);
    snprintf(b->secret, sizeof(b->secret), "%s/secret", b->path);
    CHECK(mkdir(b->root_path, 0755) == 0 && mkdir(b->outside, 0755) == 0, "mkdir: %s",
          strerror(errno));
    write_file(b->secret, "canary");
    CHECK(stat(b->secret, &b->secret_st) == 0 && stat(b->root_path, &b->root_st) == 0, "stat: %s",
          strerror(errno));
#define IN(name) (snprintf(p, sizeof(p), "%s/%s", b->root_path, name), p)
    CHECK(mkdir(IN("dir"), 0755) == 0 && mkdir(IN("dir/sub"), 0755) == 0, "mkdir: %s",
          strerror(errno));
    write_file(IN("dir/file"), "inside\n");
    write_file(IN("file"), "hello\n");
    CHECK(symlink("..", IN("up")) == 0 && symlink(b->outside, IN("abs")) == 0 &&
              symlink("dir/../../secret", IN("dotdot")) == 0 && symlink("loop", IN("loop")) == 0,
          "symlink: %s", strerror(errno));
    {
        char target[160];

        snprintf(target, sizeof(target), "%s/dir", b->root_path);
        CHECK(symlink(target, IN("absin")) == 0, "symlink: %s", strerror(errno));
    }
#undef IN
    CHECK(sbx_root_open(&b->root, b->root_path, &err) == 0, "root: %s", err.msg);
}

void fuzz_box_check(const struct fuzz_box *b)
{
    DIR *d = opendir(b->path);
    struct dirent *de;
    struct stat st;
    char buf[8] = {0};
    int n = 0, fd;

    CHECK(d, "opendir box: %s", strerror(errno));
    while ((de = readdir(d))) {
        const char *s = de->d_name;

        CHECK(!strcmp(s, ".") || !strcmp(s, "..") || !strcmp(s, "root") || !strcmp(s, "outside") ||
                  !strcmp(s, "secret"),
              "'%s' appeared next to the root", s);
        n++;
    }
    closedir(d);
    CHECK(n == 5, "%d entries in the box", n);
    CHECK(lstat(b->root_path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_ino == b->root_st.st_ino,
          "the root is no longer the same directory");
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
    CHECK(fd >= 0 && read(fd, buf, sizeof(buf)) == 6 && memcmp(buf, "canary", 6) == 0,
          "secret's content changed");
    close(fd);
}

/* Removes everything in directory fd (taken) and returns it reopened; *counted counts the
 * names that start with prefix (when not NULL). Directories are made searchable first (the code
 * under test may leave them mode 0), symlinks never followed, and at most two fds are open
 * whatever the depth (an archive may nest 2000 levels): a child is entered with the parent
 * closed and left through "..". */
static int empty_dir(int fd, const char *prefix, unsigned *counted)
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

        *counted += prefix && strncmp(names[i], prefix, strlen(prefix)) == 0;
        if (unlinkat(fd, names[i], 0) == 0 || errno != EISDIR)
            continue;
        fchmodat(fd, names[i], 0700, 0);
        cfd = openat(fd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        CHECK(cfd >= 0, "open '%s' to remove it: %s", names[i], strerror(errno));
        close(fd);
        cfd = empty_dir(cfd, prefix, counted);
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

unsigned fuzz_box_remove(struct fuzz_box *b, const char *prefix)
{
    unsigned counted = 0;
    int fd;

    fuzz_box_check(b);
    sbx_root_release(&b->root);
    chmod(b->root_path, 0700);
    fd = open(b->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    CHECK(fd >= 0, "open '%s' to remove it: %s", b->path, strerror(errno));
    close(empty_dir(fd, prefix, &counted));
    CHECK(rmdir(b->path) == 0, "rmdir '%s': %s", b->path, strerror(errno));
    return counted;
}

void fuzz_fd_under_root(const struct fuzz_box *b, int fd)
{
    char link[64], target[PATH_MAX];
    size_t n = strlen(b->root.path);
    ssize_t len;

    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    len = readlink(link, target, sizeof(target) - 1);
    CHECK(len >= 0, "readlink fd %d: %s", fd, strerror(errno));
    target[len] = '\0';
    CHECK(strncmp(target, b->root.path, n) == 0 && (target[n] == '/' || target[n] == '\0'),
          "fd %d is at '%s', outside the root '%s'", fd, target, b->root.path);
}
