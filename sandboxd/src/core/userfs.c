/* File operations on absolute paths as a user (userfs.h). Each operation switches the calling
 * thread to the user for its system calls only (cred.h), so every lookup and permission check
 * is the kernel's, for that user. The writer, the tree removal and the creation of parents are
 * files.c's, run beneath a root of "/" (which confines nothing). */
#define _GNU_SOURCE
#include "userfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "cleanup.h"
#include "utf8.h"

/* The calling thread acts as c until the end of the enclosing block. */
#define AS_USER(c, err)                                                                            \
    _cleanup_(sbx_cred_leave) struct sbx_cred_saved saved_cred_ = {0};                             \
    do {                                                                                           \
        int r_ = sbx_cred_enter((c), &saved_cred_, (err));                                         \
        if (r_ < 0)                                                                                \
            return r_;                                                                             \
    } while (0)

/* The largest attribute list and value read back (the kernel's own bound is 64 KiB). */
#define XATTR_READ_MAX (64 * 1024)

void sbx_ufs_meta_free(struct sbx_ufs_meta *m, size_t n)
{
    for (size_t i = 0; m && i < n; i++) {
        free(m[i].key);
        free(m[i].value);
    }
    free(m);
}

static int meta_cmp(const void *a, const void *b)
{
    return strcmp(((const struct sbx_ufs_meta *)a)->key, ((const struct sbx_ufs_meta *)b)->key);
}

static bool printable(const char *s)
{
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e)
            return false;
    return true;
}

int sbx_ufs_meta_check(const struct sbx_ufs_meta *m, size_t n, struct sbx_error *err)
{
    size_t total = 0;

    for (size_t i = 0; i < n; i++) {
        if (!m[i].key[0])
            return sbx_error_set(err, EINVAL, "metadata key must not be empty");
        if (strlen(m[i].key) > SBX_UFS_META_KEY_MAX)
            return sbx_error_set(err, EINVAL, "metadata key \"%.32s...\" exceeds %d bytes",
                                 m[i].key, SBX_UFS_META_KEY_MAX);
        if (!printable(m[i].key) || !printable(m[i].value))
            return sbx_error_set(
                err, EINVAL, "metadata key or value \"%.64s\" is not printable ASCII", m[i].key);
        total += strlen(SBX_UFS_META_PREFIX) + strlen(m[i].key) + strlen(m[i].value);
    }
    if (total > SBX_UFS_META_TOTAL)
        return sbx_error_set(err, EINVAL, "total metadata size %zu exceeds %d bytes", total,
                             SBX_UFS_META_TOTAL);
    return 0;
}

static bool xattr_unsupported(int e)
{
    return e == ENOTSUP || e == EOPNOTSUPP;
}

/* The metadata of at; the caller acts as the user already. None on a file system without
 * extended attributes, or when at cannot be asked (a dangling link). */
static int read_meta(const char *at, struct sbx_ufs_meta **ret, size_t *ret_n,
                     struct sbx_error *err)
{
    _cleanup_free_ char *names = malloc(XATTR_READ_MAX), *value = malloc(XATTR_READ_MAX + 1);
    const size_t plen = strlen(SBX_UFS_META_PREFIX);
    struct sbx_ufs_meta *m = NULL;
    size_t n = 0;
    ssize_t len;

    *ret = NULL;
    *ret_n = 0;
    if (!names || !value)
        return sbx_error_set(err, ENOMEM, "allocate metadata");
    len = listxattr(at, names, XATTR_READ_MAX);
    if (len <= 0)
        return 0;
    for (char *p = names; p < names + len; p += strlen(p) + 1) {
        ssize_t vlen;
        struct sbx_ufs_meta *nm;
        if (strncmp(p, SBX_UFS_META_PREFIX, plen) != 0 || !sbx_utf8_valid(p + plen))
            continue;
        vlen = getxattr(at, p, value, XATTR_READ_MAX);
        if (vlen < 0)
            continue; /* gone meanwhile */
        value[vlen] = '\0';
        if (memchr(value, '\0', (size_t)vlen) || !sbx_utf8_valid(value))
            continue;
        nm = realloc(m, (n + 1) * sizeof(*m));
        if (!nm)
            break;
        m = nm;
        m[n].key = strdup(p + plen);
        m[n].value = strdup(value);
        if (!m[n].key || !m[n].value) {
            free(m[n].key);
            free(m[n].value);
            break;
        }
        n++;
    }
    if (n > 1)
        qsort(m, n, sizeof(*m), meta_cmp);
    *ret = m;
    *ret_n = n;
    return 0;
}

int sbx_ufs_meta_get(const struct sbx_cred *c, const char *path, struct sbx_ufs_meta **ret,
                     size_t *ret_n, struct sbx_error *err)
{
    AS_USER(c, err);
    return read_meta(path, ret, ret_n, err);
}

int sbx_ufs_meta_set(const struct sbx_cred *c, const char *path, const struct sbx_ufs_meta *m,
                     size_t n, struct sbx_error *err)
{
    AS_USER(c, err);
    for (size_t i = 0; i < n; i++) {
        char name[sizeof(SBX_UFS_META_PREFIX) + SBX_UFS_META_KEY_MAX];
        snprintf(name, sizeof(name), "%s%s", SBX_UFS_META_PREFIX, m[i].key);
        if (setxattr(path, name, m[i].value, strlen(m[i].value), 0) == 0)
            continue;
        if (xattr_unsupported(errno))
            return 0;
        return sbx_error_set(err, errno, "error writing file metadata: %s", strerror(errno));
    }
    return 0;
}

void sbx_ufs_entry_release(struct sbx_ufs_entry *e)
{
    free(e->name);
    free(e->path);
    free(e->target);
    sbx_ufs_meta_free(e->meta, e->n_meta);
    *e = (struct sbx_ufs_entry){0};
}

void sbx_ufs_entries_free(struct sbx_ufs_entry *e, size_t n)
{
    for (size_t i = 0; e && i < n; i++)
        sbx_ufs_entry_release(&e[i]);
    free(e);
}

int sbx_ufs_resolve(const char *path, const char *home, char **ret, struct sbx_error *err)
{
    _cleanup_free_ char *joined = NULL, *out = NULL;
    size_t len;

    if (path[0] == '~' && path[1] != '\0' && path[1] != '/')
        return sbx_error_set(err, EINVAL, "cannot expand user-specific home dir in '%s'", path);
    if (path[0] == '~')
        path++;
    else if (path[0] == '/')
        home = "";
    if (asprintf(&joined, "%s/%s", home, path) < 0)
        return sbx_error_set(err, ENOMEM, "allocate path");
    out = malloc(strlen(joined) + 3);
    if (!out)
        return sbx_error_set(err, ENOMEM, "allocate path");
    out[0] = '/';
    /* absolute: ".." above "/" stays at "/", as Go's filepath.Clean does */
    (void)sbx_path_lexical(joined, true, out + 1, &len);
    if (len == 0)
        out[1] = '\0';
    *ret = TAKE_PTR(out);
    return 0;
}

void sbx_ufs_mode_string(mode_t m, char out[16])
{
    /* Go's FileMode letters in its order: d a l T L D p S u g c t ? (a, l, T never occur). */
    const struct {
        bool on;
        char c;
    } kinds[] = {
        {S_ISDIR(m), 'd'},         {S_ISLNK(m), 'L'},  {S_ISBLK(m) || S_ISCHR(m), 'D'},
        {S_ISFIFO(m), 'p'},        {S_ISSOCK(m), 'S'}, {(m & S_ISUID) != 0, 'u'},
        {(m & S_ISGID) != 0, 'g'}, {S_ISCHR(m), 'c'},  {(m & S_ISVTX) != 0, 't'},
    };
    size_t w = 0;

    for (size_t i = 0; i < SBX_ARRAY_SIZE(kinds); i++)
        if (kinds[i].on)
            out[w++] = kinds[i].c;
    if (w == 0)
        out[w++] = '-';
    for (int i = 0; i < 9; i++)
        out[w++] = (m & (1u << (8 - i))) ? "rwxrwxrwx"[i] : '-';
    out[w] = '\0';
}

static enum sbx_ufs_type type_of(mode_t m)
{
    if (S_ISREG(m))
        return SBX_UFS_FILE;
    if (S_ISDIR(m))
        return SBX_UFS_DIR;
    if (S_ISLNK(m))
        return SBX_UFS_SYMLINK;
    return SBX_UFS_UNKNOWN;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');

    return slash && slash[1] ? slash + 1 : path;
}

/* The entry of at (what to stat) shown as path; the caller acts as the user already. */
static int fill_entry(const char *at, const char *path, struct sbx_ufs_entry *e,
                      struct sbx_error *err)
{
    struct stat st, target;

    *e = (struct sbx_ufs_entry){0};
    if (lstat(at, &st) < 0) {
        if (errno == ENOENT)
            return sbx_error_set(err, ENOENT, "file not found: '%s'", path);
        return sbx_error_set(err, errno, "stat '%s': %s", path, strerror(errno));
    }
    e->type = type_of(st.st_mode);
    e->mode = st.st_mode & 0777;
    if (S_ISLNK(st.st_mode)) {
        e->target = realpath(at, NULL);
        if (!e->target)
            e->target = strdup(at);
        e->type = SBX_UFS_UNKNOWN;
        e->mode = 0;
        if (stat(at, &target) == 0) {
            e->type = type_of(target.st_mode);
            e->mode = target.st_mode & 0777;
        }
    }
    e->name = strdup(base_name(path));
    e->path = strdup(path);
    if (!e->name || !e->path || (S_ISLNK(st.st_mode) && !e->target)) {
        sbx_ufs_entry_release(e);
        return sbx_error_set(err, ENOMEM, "allocate entry");
    }
    e->size = (int64_t)st.st_size;
    sbx_ufs_mode_string(st.st_mode, e->permissions);
    sbx_cred_user_name(st.st_uid, e->owner, sizeof(e->owner));
    sbx_cred_group_name(st.st_gid, e->group, sizeof(e->group));
    e->mtime = st.st_mtim;
    (void)read_meta(at, &e->meta, &e->n_meta, NULL);
    return 0;
}

int sbx_ufs_stat(const struct sbx_cred *c, const char *path, struct sbx_ufs_entry *ret,
                 struct sbx_error *err)
{
    AS_USER(c, err);
    return fill_entry(path, path, ret, err);
}

/* ------------------------------------------------------------------------------------------ */
/* Listing */

struct walk {
    struct sbx_ufs_entry *e;
    size_t n, cap;
    unsigned depth;
    struct sbx_error *err;
};

static char *join(const char *dir, const char *name)
{
    char *p;

    return asprintf(&p, "%s%s%s", dir, strcmp(dir, "/") == 0 ? "" : "/", name) < 0 ? NULL : p;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void names_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* The names in directory at, sorted; -errno (err set only for the first level's failures). */
static int read_names(struct walk *w, const char *at, const char *shown, char ***ret, size_t *ret_n)
{
    DIR *d = opendir(at);
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;

    if (!d)
        return sbx_error_set(w->err, errno, "read directory '%s': %s", shown, strerror(errno));
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (w->n + n >= SBX_UFS_MAX_ENTRIES) {
            closedir(d);
            names_free(names, n);
            return sbx_error_set(w->err, EFBIG, "more than %d entries beneath '%s'",
                                 SBX_UFS_MAX_ENTRIES, shown);
        }
        if (n == cap) {
            char **nn = realloc(names, (cap ? cap * 2 : 32) * sizeof(*names));
            if (!nn)
                break;
            names = nn;
            cap = cap ? cap * 2 : 32;
        }
        if (!(names[n] = strdup(de->d_name)))
            break;
        n++;
    }
    closedir(d);
    if (de) {
        names_free(names, n);
        return sbx_error_set(w->err, ENOMEM, "allocate listing");
    }
    if (n)
        qsort(names, n, sizeof(*names), name_cmp);
    *ret = names;
    *ret_n = n;
    return 0;
}

static int push(struct walk *w, struct sbx_ufs_entry *e)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 32;
        struct sbx_ufs_entry *ne = realloc(w->e, cap * sizeof(*ne));
        if (!ne) {
            sbx_ufs_entry_release(e);
            return sbx_error_set(w->err, ENOMEM, "allocate listing");
        }
        w->e = ne;
        w->cap = cap;
    }
    w->e[w->n++] = *e;
    return 0;
}

/* Lists at (shown as shown) at level (1: the directory asked for), then each subdirectory. */
static int walk_dir(struct walk *w, const char *at, const char *shown, unsigned level)
{
    char **names = NULL;
    size_t n = 0;
    int r = read_names(w, at, shown, &names, &n);

    if (r < 0)
        return level == 1 || r == -EFBIG || r == -ENOMEM ? r : 0;
    for (size_t i = 0; r >= 0 && i < n; i++) {
        _cleanup_free_ char *child_at = join(at, names[i]), *child = join(shown, names[i]);
        struct sbx_ufs_entry e;
        bool is_dir;

        if (!child_at || !child) {
            r = sbx_error_set(w->err, ENOMEM, "allocate path");
            break;
        }
        /* Gone meanwhile, or not ours to stat: left out, as the walk goes on. */
        if (fill_entry(child_at, child, &e, NULL) < 0)
            continue;
        is_dir = e.type == SBX_UFS_DIR && !e.target;
        r = push(w, &e);
        if (r == 0 && is_dir && level < w->depth)
            r = walk_dir(w, child_at, child, level + 1);
    }
    names_free(names, n);
    return r;
}

int sbx_ufs_list(const struct sbx_cred *c, const char *path, unsigned depth,
                 struct sbx_ufs_entry **ret, size_t *ret_n, struct sbx_error *err)
{
    _cleanup_free_ char *real = NULL;
    struct walk w = {.depth = depth ? depth : 1, .err = err};
    struct stat st;
    int r;

    AS_USER(c, err);
    if (w.depth > SBX_UFS_MAX_DEPTH)
        w.depth = SBX_UFS_MAX_DEPTH;
    real = realpath(path, NULL);
    if (!real) {
        if (errno == ENOENT)
            return sbx_error_set(err, ENOENT, "path not found: '%s'", path);
        if (errno == ELOOP)
            return sbx_error_set(err, ELOOP, "cyclic symlink or chain >255 links at '%s'", path);
        return sbx_error_set(err, errno, "resolve '%s': %s", path, strerror(errno));
    }
    if (stat(real, &st) < 0)
        return sbx_error_set(err, errno, "stat '%s': %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return sbx_error_set(err, ENOTDIR, "path is not a directory: '%s'", path);
    r = walk_dir(&w, real, path, 1);
    if (r < 0) {
        sbx_ufs_entries_free(w.e, w.n);
        return r;
    }
    *ret = w.e;
    *ret_n = w.n;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Changes */

int sbx_ufs_mkdir(const struct sbx_root *slash, const struct sbx_cred *c, const char *path,
                  struct sbx_ufs_entry *ret, struct sbx_error *err)
{
    struct stat st;
    int r;

    AS_USER(c, err);
    if (stat(path, &st) == 0)
        return S_ISDIR(st.st_mode)
                   ? sbx_error_set(err, EEXIST, "directory already exists: '%s'", path)
                   : sbx_error_set(err, ENOTDIR,
                                   "path already exists but it is not a directory: '%s'", path);
    if (errno != ENOENT)
        return sbx_error_set(err, errno, "stat '%s': %s", path, strerror(errno));
    r = sbx_fs_mkdir(slash, path, 0755, true, err);
    if (r < 0)
        return r;
    return fill_entry(path, path, ret, err);
}

int sbx_ufs_move(const struct sbx_root *slash, const struct sbx_cred *c, const char *from,
                 const char *to, struct sbx_ufs_entry *ret, struct sbx_error *err)
{
    struct stat st;
    int r;

    AS_USER(c, err);
    if (lstat(from, &st) < 0 && errno == ENOENT)
        return sbx_error_set(err, ENOENT, "source file not found: '%s'", from);
    r = sbx_fs_move(slash, from, to, true, err);
    if (r < 0)
        return r;
    return fill_entry(to, to, ret, err);
}

int sbx_ufs_remove(const struct sbx_root *slash, const struct sbx_cred *c, const char *path,
                   struct sbx_error *err)
{
    struct stat st;

    if (strcmp(path, "/") == 0)
        return sbx_error_set(err, EBUSY, "refusing to remove '/'");
    AS_USER(c, err);
    if (lstat(path, &st) < 0)
        return errno == ENOENT
                   ? 0
                   : sbx_error_set(err, errno, "error removing '%s': %s", path, strerror(errno));
    return sbx_fs_delete(slash, path, true, err);
}

int sbx_ufs_open_read(const struct sbx_cred *c, const char *path, struct stat *st,
                      struct sbx_error *err)
{
    _cleanup_close_ int fd = -1;

    AS_USER(c, err);
    /* O_NONBLOCK: a FIFO does not hold the open; refused below anyway. */
    fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        if (errno == ENOENT)
            return sbx_error_set(err, ENOENT, "path '%s' does not exist", path);
        return sbx_error_set(err, errno, "error opening file '%s': %s", path, strerror(errno));
    }
    if (fstat(fd, st) < 0)
        return sbx_error_set(err, errno, "stat '%s': %s", path, strerror(errno));
    if (S_ISDIR(st->st_mode))
        return sbx_error_set(err, EISDIR, "path '%s' is a directory", path);
    if (!S_ISREG(st->st_mode))
        return sbx_error_set(err, EINVAL, "path '%s' is not a regular file", path);
    if (fcntl(fd, F_SETFL, 0) < 0)
        return sbx_error_set(err, errno, "fcntl: %s", strerror(errno));
    return TAKE_FD(fd);
}

/* Network and FUSE file systems, whose changes inotify may not see (envd's list). */
static bool network_fs(long type)
{
    static const long magics[] = {0x6969, (long)0xFF534D42, 0x517B, (long)0xFE534D42, 0x65735546};

    for (size_t i = 0; i < SBX_ARRAY_SIZE(magics); i++)
        if ((type & 0xFFFFFFFFL) == (magics[i] & 0xFFFFFFFFL))
            return true;
    return false;
}

int sbx_ufs_check_dir(const struct sbx_cred *c, const char *path, bool network_ok,
                      struct sbx_error *err)
{
    _cleanup_close_ int fd = -1;
    struct statfs sf;

    AS_USER(c, err);
    fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return sbx_error_set(err, ENOENT, "path '%s' not found", path);
        if (errno == ENOTDIR)
            return sbx_error_set(err, ENOTDIR, "path '%s' not a directory", path);
        return sbx_error_set(err, errno, "open '%s': %s", path, strerror(errno));
    }
    if (!network_ok && fstatfs(fd, &sf) == 0 && network_fs((long)sf.f_type))
        return sbx_error_set(err, EREMOTE, "cannot watch path on network filesystem: '%s'", path);
    return 0;
}

int sbx_ufs_may_list_parent(const struct sbx_cred *c, const char *path, struct sbx_error *err)
{
    _cleanup_free_ char *parent = strdup(path);
    char *slash = parent ? strrchr(parent, '/') : NULL;

    if (!parent)
        return sbx_error_set(err, ENOMEM, "allocate path");
    if (!slash)
        return sbx_error_set(err, EINVAL, "'%s' is not absolute", path);
    slash[slash == parent] = '\0'; /* "/x" has "/" */
    AS_USER(c, err);
    /* AT_EACCESS: checked with the thread's credentials (its fsuid), not the real uid. */
    if (faccessat(AT_FDCWD, parent, R_OK | X_OK, AT_EACCESS) < 0)
        return sbx_error_set(err, errno, "list '%s': %s", parent, strerror(errno));
    return 0;
}

int sbx_ufs_writer_begin(const struct sbx_root *slash, const struct sbx_cred *c, const char *path,
                         struct sbx_fs_writer **ret, struct sbx_error *err)
{
    struct stat st;
    mode_t mode = 0644;
    int r;

    AS_USER(c, err);
    /* A file written over keeps its permission bits, as envd's truncating write does. */
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
        mode = st.st_mode & 0777;
    r = sbx_fs_writer_begin(slash, path, mode, ret, err);
    if (r < 0 && err)
        sbx_error_wrap(err, "error opening file '%s'", path);
    return r;
}

int sbx_ufs_writer_commit(const struct sbx_cred *c, struct sbx_fs_writer *w, uint64_t *size,
                          struct sbx_error *err)
{
    uint8_t sha[SBX_SHA256_LEN];
    struct sbx_cred_saved saved = {0};
    int r = sbx_cred_enter(c, &saved, err);

    if (r < 0) {
        sbx_fs_writer_abort(w);
        return r;
    }
    r = sbx_fs_writer_commit(w, size, sha, err);
    sbx_cred_leave(&saved);
    return r;
}
