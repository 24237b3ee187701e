/* A main for fuzz targets built without libFuzzer (any compiler): replays each file named on the
 * command line, and every regular file of each directory named (in name order), through
 * LLVMFuzzerTestOneInput once. CTest runs it over the committed corpus, so a regression on a
 * saved input fails the ordinary test suite (systemd's fuzz-main.c does the same). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define INPUT_MAX (16 * 1024 * 1024)

/* Reads the whole file at path (at most INPUT_MAX bytes) into a malloc'ed buffer. */
static int slurp(const char *path, uint8_t **ret, size_t *ret_len)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    _cleanup_free_ uint8_t *buf = NULL;
    struct stat st;
    size_t len = 0;

    if (fd < 0 || fstat(fd, &st) < 0)
        return -errno;
    if (st.st_size > INPUT_MAX)
        return -EFBIG;
    /* Exactly the input's size, so that ASan sees a read past its end. */
    buf = malloc(st.st_size ? (size_t)st.st_size : 1);
    if (!buf)
        return -ENOMEM;
    while (len < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        len += (size_t)n;
    }
    *ret = TAKE_PTR(buf);
    *ret_len = len;
    return 0;
}

static int replay(const char *path)
{
    uint8_t *data = NULL;
    size_t len = 0;
    int r = slurp(path, &data, &len);

    if (r < 0) {
        fprintf(stderr, "fuzz-main: read '%s': %s\n", path, strerror(-r));
        return r;
    }
    printf("replay '%s' (%zu bytes)\n", path, len);
    fflush(stdout);
    LLVMFuzzerTestOneInput(data, len);
    free(data);
    return 0;
}

static int only_files(const struct dirent *de)
{
    return de->d_name[0] != '.';
}

/* Replays every regular file of dir; returns how many or -errno. */
static int replay_dir(const char *dir)
{
    struct dirent **list = NULL;
    int n = scandir(dir, &list, only_files, alphasort), done = 0, r = 0;

    if (n < 0) {
        fprintf(stderr, "fuzz-main: list '%s': %s\n", dir, strerror(errno));
        return -errno;
    }
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        struct stat st;

        snprintf(path, sizeof(path), "%s/%s", dir, list[i]->d_name);
        if (r == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            r = replay(path);
            done += r == 0;
        }
        free(list[i]);
    }
    free(list);
    return r < 0 ? r : done;
}

int main(int argc, char **argv)
{
    int total = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        struct stat st;
        int r;

        if (stat(argv[i], &st) < 0) {
            fprintf(stderr, "fuzz-main: '%s': %s\n", argv[i], strerror(errno));
            return 1;
        }
        r = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : replay(argv[i]) == 0 ? 1 : -EIO;
        if (r < 0)
            return 1;
        if (r == 0 && S_ISDIR(st.st_mode)) {
            fprintf(stderr, "fuzz-main: no input in '%s'\n", argv[i]);
            return 1;
        }
        total += r;
    }
    printf("%d inputs replayed, none crashed\n", total);
    return 0;
}
