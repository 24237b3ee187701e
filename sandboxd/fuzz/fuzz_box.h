/* What the fuzz targets share: CHECK (fuzz_check.h), an fd count, and a box for code that touches
 * files beneath a root:
 *
 *   box/root/     the sbx_root: dir/, dir/file, dir/sub/, file, and symlinks
 *                 up -> "..", abs -> "<box>/outside", absin -> "<box>/root/dir",
 *                 dotdot -> "dir/../../secret", loop -> "loop"
 *   box/outside/  an empty directory
 *   box/secret    a file
 *
 * fuzz_box_check() asserts that nothing in the box but beneath root changed, and
 * fuzz_fd_under_root() that an fd the code returned is beneath the root. */
#pragma once

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "fuzz_check.h"
#include "path.h"

int fuzz_count_fds(void);

/* Where boxes go: /dev/shm when there is one (a tmpfs: the fsyncs of uploads cost nothing),
 * else /tmp. */
const char *fuzz_tmp_dir(void);

struct fuzz_box {
    char path[64];
    char root_path[80], outside[80], secret[80];
    struct stat root_st, secret_st;
    struct sbx_root root;
};

/* Makes a fresh box and opens its root. */
void fuzz_box_make(struct fuzz_box *b);
/* Nothing in the box but beneath root changed: no new entry next to root, nothing in outside,
 * secret's content and metadata the same, root the same directory. */
void fuzz_box_check(const struct fuzz_box *b);
/* Checks, then removes the box; returns how many names in it started with prefix (when not
 * NULL). */
unsigned fuzz_box_remove(struct fuzz_box *b, const char *prefix);

/* fd (returned by the code under test) is the root or beneath it. */
void fuzz_fd_under_root(const struct fuzz_box *b, int fd);
