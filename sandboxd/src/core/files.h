/* Files beneath the root dir: open, list, atomic write, delete, mkdir, move, stat. Every path
 * is a user path resolved by path.c (escapes are -EXDEV); knows nothing of HTTP. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "error.h"
#include "hasher.h"
#include "path.h"

/* Opens path for reading, following symlinks beneath the root; a directory too. FIFOs and
 * devices do not block the open. Returns an fd (O_CLOEXEC) and fills *st, or -errno. */
int sbx_fs_open(const struct sbx_root *root, const char *path, struct stat *st,
                struct sbx_error *err);

struct sbx_fs_entry {
    char *name;
    struct stat st; /* of the symlink's target for a symlink inside the root */
};

/* Lists directory dirfd (opened by sbx_fs_open for path), sorted by name. Symlinks are
 * described by their target; those escaping the root or dangling are left out. */
int sbx_fs_list(const struct sbx_root *root, const char *path, int dirfd, struct sbx_fs_entry **ret,
                size_t *ret_n, struct sbx_error *err);
void sbx_fs_entries_free(struct sbx_fs_entry *e, size_t n);

/* An upload in progress: a temp file next to the target, renamed over it on commit. */
struct sbx_fs_writer;

/* Creates missing parents (0755) and the temp file with mode. -EISDIR when the target is a
 * directory. A final symlink inside the root is written through (its target is replaced). */
int sbx_fs_writer_begin(const struct sbx_root *root, const char *path, mode_t mode,
                        struct sbx_fs_writer **ret, struct sbx_error *err);
int sbx_fs_writer_write(struct sbx_fs_writer *w, const void *buf, size_t len,
                        struct sbx_error *err);
/* Bytes written so far. */
uint64_t sbx_fs_writer_size(const struct sbx_fs_writer *w);
/* fsyncs, renames into place, fsyncs the directory; frees w whatever happens. */
int sbx_fs_writer_commit(struct sbx_fs_writer *w, uint64_t *size, uint8_t sha256[SBX_SHA256_LEN],
                         struct sbx_error *err);
/* Removes the temp file; frees w. Accepts NULL. */
void sbx_fs_writer_abort(struct sbx_fs_writer *w);

/* Removes a file, a symlink (not its target) or an empty directory; with recursive, a whole
 * tree (the root itself is emptied, not removed). -ENOTEMPTY for a non-empty directory, -EBUSY
 * for the root without recursive. */
int sbx_fs_delete(const struct sbx_root *root, const char *path, bool recursive,
                  struct sbx_error *err);

/* Creates a directory; with parents, missing parents too and no error if it exists. */
int sbx_fs_mkdir(const struct sbx_root *root, const char *path, mode_t mode, bool parents,
                 struct sbx_error *err);

/* Renames from to to (both beneath the root); -EEXIST if to exists and !overwrite. */
int sbx_fs_move(const struct sbx_root *root, const char *from, const char *to, bool overwrite,
                struct sbx_error *err);

/* lstat of path (its parents resolved beneath the root); *target gets a symlink's target. */
int sbx_fs_lstat(const struct sbx_root *root, const char *path, struct stat *st, char **target,
                 struct sbx_error *err);

/* Opens (creating when asked, with parents) the directory path for writing into, e.g. tar. */
int sbx_fs_open_dir(const struct sbx_root *root, const char *path, bool create,
                    struct sbx_error *err);
