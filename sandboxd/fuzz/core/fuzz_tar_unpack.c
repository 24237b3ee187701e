/* libFuzzer target for the tar unpacker, which reads untrusted bytes (REST uploads). Each input
 * is extracted into the root of a fresh box (fuzz_box.h), which holds symlinks leading out of it
 * ("up" -> "..", "abs" -> the box's outside dir) and back in, and afterwards nothing in the box
 * but beneath the root may have changed: no new entry, nothing in outside, secret's content,
 * mode, mtime and link count the same. Also checked: no fd leaks, no temp file left behind, and
 * a failed archive repeats its error on every later call.
 *
 * The input's last 4 bytes (when it has more than 4) choose the chunk sizes, cycled over the
 * rest: byte b gives b bytes, 0 the whole rest, and b >= 0x80 (b - 0x7f) * 509 + 1 bytes, so
 * calls cut headers, data and padding anywhere. A plain tar file, ending in zeros, is thus fed
 * whole, less its last 4 zero bytes. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_box.h"
#include "tar.h"

#define SPEC_LEN   4
#define TMP_PREFIX ".sbx-tar-" /* tar_extract.c's temp names */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
    struct fuzz_box b;
    int tfd;

    if (fds < 0) {
        umask(022);
        fds = fuzz_count_fds();
    }
    if (size > SPEC_LEN) {
        size -= SPEC_LEN;
        spec = data + size;
    }
    fuzz_box_make(&b);
    tfd = open(b.root_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(tfd >= 0, "open target: %s", strerror(errno));
    unpack(tfd, data, size, spec);
    close(tfd);
    CHECK(fuzz_count_fds() == fds + 1, "fd leak: %d open, %d before (and the root's)",
          fuzz_count_fds(), fds);
    /* An archive may give its own entries such names. */
    CHECK(fuzz_box_remove(&b, TMP_PREFIX) == 0 || contains(data, size, TMP_PREFIX),
          "a temp file was left in the target");
    return 0;
}
