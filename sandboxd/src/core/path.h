/* Paths confined to the root dir. A user path is cleaned lexically like the reference daemon
 * does (an absolute path under the root loses that prefix, any other is taken relative to the
 * root, ".." may not climb above it), then opened beneath the root fd so that no symlink,
 * swapped in at any time, leads outside. Escapes are -EXDEV. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

struct sbx_root {
    int fd;     /* O_PATH directory */
    char *path; /* canonical absolute path */
};

/* Opens the root dir (resolving symlinks), creating it when missing. Returns 0 or -errno. */
int sbx_root_open(struct sbx_root *root, const char *path, struct sbx_error *err);
void sbx_root_release(struct sbx_root *root);

/* Cleans p lexically into out (room for strlen(p) + 2 bytes; "" when nothing is left): no
 * empty, "." or ".." components. ".." above the top is dropped when absolute (as for "/.."),
 * -EXDEV when not. */
int sbx_path_lexical(const char *p, bool absolute, char *out, size_t *len);

/* Cleans user_path into a path relative to the root ("." for the root itself); *ret is
 * malloc'ed. -EXDEV when ".." climbs above the root. */
int sbx_path_clean(const struct sbx_root *root, const char *user_path, char **ret,
                   struct sbx_error *err);

/* The path of an fd relative to the root ("." for the root itself); -EXDEV if it is not beneath
 * it. Needs /proc. *ret is malloc'ed. */
int sbx_path_rel_of_fd(const struct sbx_root *root, int fd, char **ret, struct sbx_error *err);

/* Opens user_path beneath the root with open flags (O_CLOEXEC is added). Symlinks are followed
 * as long as every step stays under the root. Returns an fd or -errno (-EXDEV: escape). */
int sbx_path_open(const struct sbx_root *root, const char *user_path, int flags,
                  struct sbx_error *err);
