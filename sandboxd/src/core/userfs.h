/* File operations on the sandbox's absolute paths, each done with the credentials of the user
 * who asks (cred.h), as E2B's envd offers them: paths are not confined to a root dir (a process
 * in the sandbox reaches them anyway), but the kernel checks every step against the user's
 * permissions, and what is created is the user's. The E2B adapter's file side (Filesystem
 * RPCs, /files) is built on it. Knows nothing of the wire. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "cred.h"
#include "error.h"
#include "files.h"
#include "path.h"

/* Entry types; the numbers are those of envd's FileType. */
enum sbx_ufs_type {
    SBX_UFS_UNKNOWN = 0,
    SBX_UFS_FILE = 1,
    SBX_UFS_DIR = 2,
    SBX_UFS_SYMLINK = 3,
};

#define SBX_UFS_NAME_MAX 64 /* an owner's or group's name */

/* envd's file metadata: extended attributes "user.e2b.<key>" (printable ASCII keys and
 * values, keys at most 246 bytes, all of a file's prefixes, keys and values at most 4096). */
#define SBX_UFS_META_PREFIX  "user.e2b."
#define SBX_UFS_META_KEY_MAX 246
#define SBX_UFS_META_TOTAL   4096

struct sbx_ufs_meta {
    char *key, *value;
};

/* What envd tells of a path. For a symlink: type and mode are its target's (unknown and 0
 * when it dangles), the rest the link's own, and target the path it resolves to. */
struct sbx_ufs_entry {
    char *name; /* the last component */
    char *path; /* as asked, or beneath the listed directory as asked */
    enum sbx_ufs_type type;
    int64_t size;
    uint32_t mode;        /* permission bits (0777) */
    char permissions[16]; /* as Go formats a FileMode: "-rw-r--r--", "drwxr-xr-x", "Lrwxrwxrwx" */
    char owner[SBX_UFS_NAME_MAX], group[SBX_UFS_NAME_MAX];
    struct timespec mtime;
    char *target; /* symlinks only: where it leads (the link's own path when it dangles) */
    struct sbx_ufs_meta *meta; /* its metadata (of its target for a symlink), by key */
    size_t n_meta;
};

void sbx_ufs_entry_release(struct sbx_ufs_entry *e);
void sbx_ufs_entries_free(struct sbx_ufs_entry *e, size_t n);

/* A request's path made absolute and clean, as envd resolves it: "" is home, "~" and "~/x"
 * are beneath home, a relative path is taken from home; "." and ".." components are resolved
 * lexically. -EINVAL for "~user". *ret is malloc'ed. */
int sbx_ufs_resolve(const char *path, const char *home, char **ret, struct sbx_error *err);

/* Go's FileMode string of a stat mode, into out (at least 16 bytes). */
void sbx_ufs_mode_string(mode_t m, char out[16]);

/* The entry of path (lstat: a final symlink is described, not followed). -ENOENT, -EACCES. */
int sbx_ufs_stat(const struct sbx_cred *c, const char *path, struct sbx_ufs_entry *ret,
                 struct sbx_error *err);

#define SBX_UFS_MAX_DEPTH   64     /* of a listing; deeper asks are cut to it */
#define SBX_UFS_MAX_ENTRIES 100000 /* of a listing; more is -EFBIG */

/* Lists the directory path (a symlink to one is followed) to depth levels (0 counts as 1), as
 * envd walks it: in lexical order, each directory followed by what it holds, symlinks inside
 * not followed, entry paths beneath path as given. Subdirectories the user may not read are
 * listed, not entered. -ENOENT, -ENOTDIR, -ELOOP (a symlink cycle), -EACCES, -EFBIG. */
int sbx_ufs_list(const struct sbx_cred *c, const char *path, unsigned depth,
                 struct sbx_ufs_entry **ret, size_t *ret_n, struct sbx_error *err);

/* Creates the directory path and its missing parents (0755, the user's). -EEXIST when it is
 * a directory already, -ENOTDIR when it exists as something else. Fills *ret with its entry. */
int sbx_ufs_mkdir(const struct sbx_root *slash, const struct sbx_cred *c, const char *path,
                  struct sbx_ufs_entry *ret, struct sbx_error *err);

/* Renames from to to, replacing it, creating its missing parents; fills *ret with to's entry.
 * -ENOENT when from does not exist. */
int sbx_ufs_move(const struct sbx_root *slash, const struct sbx_cred *c, const char *from,
                 const char *to, struct sbx_ufs_entry *ret, struct sbx_error *err);

/* Removes path, a whole tree for a directory; nothing to remove is no error (envd's RemoveAll).
 * -EBUSY for "/". */
int sbx_ufs_remove(const struct sbx_root *slash, const struct sbx_cred *c, const char *path,
                   struct sbx_error *err);

/* Checks metadata as envd does: -EINVAL with the reason. */
int sbx_ufs_meta_check(const struct sbx_ufs_meta *m, size_t n, struct sbx_error *err);
/* Sets path's metadata as the user (a file just written has none). A file system without
 * extended attributes keeps none, without error, as envd's; -ENOSPC, -EDQUOT. */
int sbx_ufs_meta_set(const struct sbx_cred *c, const char *path, const struct sbx_ufs_meta *m,
                     size_t n, struct sbx_error *err);
/* Reads path's metadata as the user (none when the file system has none). */
int sbx_ufs_meta_get(const struct sbx_cred *c, const char *path, struct sbx_ufs_meta **ret,
                     size_t *ret_n, struct sbx_error *err);
void sbx_ufs_meta_free(struct sbx_ufs_meta *m, size_t n);

/* Opens the regular file path for reading as the user; fills *st. -EISDIR for a directory,
 * -EINVAL for anything else that is not a regular file. Returns the fd (O_CLOEXEC). */
int sbx_ufs_open_read(const struct sbx_cred *c, const char *path, struct stat *st,
                      struct sbx_error *err);

/* Checks that the user may read the directory path (for a watch the daemon then keeps);
 * -ENOTDIR, -ENOENT, -EACCES; with !network_ok, -EREMOTE for a directory on a network or FUSE
 * file system (envd refuses those unless asked). */
int sbx_ufs_check_dir(const struct sbx_cred *c, const char *path, bool network_ok,
                      struct sbx_error *err);

/* Whether the user may list the directory holding path (read and search it): 0, -EACCES. */
int sbx_ufs_may_list_parent(const struct sbx_cred *c, const char *path, struct sbx_error *err);

/* An upload written as the user (files.h's writer: a temp file next to the target renamed over
 * it; missing parents created, the user's; 0644, or the permission bits of the file it
 * replaces). */
int sbx_ufs_writer_begin(const struct sbx_root *slash, const struct sbx_cred *c, const char *path,
                         struct sbx_fs_writer **ret, struct sbx_error *err);
int sbx_ufs_writer_commit(const struct sbx_cred *c, struct sbx_fs_writer *w, uint64_t *size,
                          struct sbx_error *err);
