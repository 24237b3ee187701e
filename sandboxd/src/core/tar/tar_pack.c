/* Packing: a lazy walk of a directory tree, bytewise sorted per directory and never following
 * symlinks, turned into a pax/ustar archive read out chunk by chunk. Small reads are served from
 * a stage of queued headers and file data read ahead; large ones go straight to the caller. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "tar.h"
#include "tar_internal.h"

#define STAGE_SIZE (64 * 1024) /* queued headers and file data read ahead for small reads */
#define DIRECT_MIN (16 * 1024) /* reads at least this large go straight to the caller */
#define PACK_DEPTH 256         /* directory levels beneath the top */

struct pack_dir {
    int fd;
    char **names; /* sorted; each freed once archived */
    size_t n, next;
    size_t path_len; /* of this directory's path in sbx_tar_pack.path, with its '/' */
};

struct sbx_tar_pack {
    struct pack_dir dirs[PACK_DEPTH + 1];
    size_t depth;
    char path[PATH_MAX]; /* of the entry whose header was queued last */
    char link[PATH_MAX];
    uint8_t stage[STAGE_SIZE];
    size_t stage_off, stage_len;
    int fd;             /* the file whose data comes next */
    uint64_t data_left; /* of that file */
    uint64_t zeros;     /* then: padding, plus the missing tail of a file that shrank */
    bool trailer;       /* the end-of-archive blocks are queued */
    unsigned shrunk;
    struct sbx_error fail; /* once set, every read repeats it */
};

SBX_DEFINE_CLEANUP(struct sbx_tar_pack *, sbx_tar_pack_free)

static void names_free(char **names, size_t n)
{
    for (size_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

static void dir_closep(DIR **d)
{
    if (*d)
        closedir(*d);
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads the names in directory fd but "." and "..", sorted bytewise. The directory is read
 * through a new open file description, so fd's offset does not matter. */
static int list_names(int fd, char ***ret, size_t *ret_n)
{
    _cleanup_(dir_closep) DIR *d = NULL;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (dfd < 0)
        return -errno;
    d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return -errno;
    }
    for (;;) {
        struct dirent *de;
        char **grown;

        errno = 0;
        de = readdir(d);
        if (!de)
            break;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            grown = reallocarray(names, cap, sizeof(*names));
            if (!grown)
                break;
            names = grown;
        }
        names[n] = strdup(de->d_name);
        if (!names[n])
            break;
        n++;
    }
    if (errno) {
        int r = -errno;
        names_free(names, n);
        return r;
    }
    if (n)
        qsort(names, n, sizeof(*names), cmp_names);
    *ret = names;
    *ret_n = n;
    return 0;
}

/* Queues the header of the entry at p->path (with a pax header before it when needed). */
static int queue_header(struct sbx_tar_pack *p, char type, const struct stat *st, const char *link,
                        struct sbx_error *err)
{
    struct tar_pax x = {.buf = (char *)p->stage + BLOCK, .cap = STAGE_SIZE - 3 * BLOCK};
    struct tar_header h, xh;
    size_t len = strlen(p->path), llen = link ? strlen(link) : 0, at;
    bool fits = true;

    sbx_tar_init_header(&h, type, st->st_mode & 07777);
    if (!sbx_tar_split_name(&h, p->path, len)) {
        memcpy(h.name, p->path, sizeof(h.name));
        fits &= sbx_tar_pax_add(&x, "path", p->path, len);
    }
    memcpy(h.linkname, link ? link : "", MIN(llen, sizeof(h.linkname)));
    if (llen > sizeof(h.linkname))
        fits &= sbx_tar_pax_add(&x, "linkpath", link, llen);
    if (!sbx_tar_put_num(h.uid, sizeof(h.uid), st->st_uid))
        fits &= sbx_tar_pax_add_num(&x, "uid", st->st_uid);
    if (!sbx_tar_put_num(h.gid, sizeof(h.gid), st->st_gid))
        fits &= sbx_tar_pax_add_num(&x, "gid", st->st_gid);
    if (!sbx_tar_put_num(h.size, sizeof(h.size), type == '0' ? st->st_size : 0))
        fits &= sbx_tar_pax_add_num(&x, "size", st->st_size);
    if (!sbx_tar_put_num(h.mtime, sizeof(h.mtime), st->st_mtim.tv_sec))
        fits &= sbx_tar_pax_add_num(&x, "mtime", st->st_mtim.tv_sec);
    sbx_tar_seal_header(&h);
    if (!fits)
        return sbx_error_set(err, ENAMETOOLONG, "archive '%s': names too long", p->path);
    p->stage_off = 0;
    if (x.len == 0) {
        memcpy(p->stage, &h, BLOCK);
        p->stage_len = BLOCK;
        return 0;
    }
    sbx_tar_init_header(&xh, 'x', 0644);
    strcpy(xh.name, "././@PaxHeader");
    sbx_tar_put_octal(xh.uid, sizeof(xh.uid), 0);
    sbx_tar_put_octal(xh.gid, sizeof(xh.gid), 0);
    sbx_tar_put_octal(xh.size, sizeof(xh.size), (int64_t)x.len);
    sbx_tar_put_octal(xh.mtime, sizeof(xh.mtime), 0);
    sbx_tar_seal_header(&xh);
    memcpy(p->stage, &xh, BLOCK);
    at = BLOCK + x.len;
    memset(p->stage + at, 0, pad_of(x.len));
    at += pad_of(x.len);
    memcpy(p->stage + at, &h, BLOCK);
    p->stage_len = at + BLOCK;
    return 0;
}

/* An entry removed or replaced by another type since it was listed is skipped. */
static bool vanished(int errnum)
{
    return errnum == ENOENT || errnum == ELOOP || errnum == ENOTDIR || errnum == EINVAL;
}

static int pack_file(struct sbx_tar_pack *p, int dirfd, const char *name, struct sbx_error *err)
{
    _cleanup_close_ int fd =
        openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    int r;

    if (fd < 0 && vanished(errno))
        return 0;
    if (fd < 0 || fstat(fd, &st) < 0)
        return sbx_error_set(err, errno, "open '%s': %s", p->path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return 0;
    r = queue_header(p, '0', &st, NULL, err);
    if (r < 0)
        return r;
    /* An empty file has no data to read: its fd would never be closed by pack_data. */
    if (st.st_size > 0)
        p->fd = TAKE_FD(fd);
    p->data_left = (uint64_t)st.st_size;
    p->zeros = pad_of(p->data_left);
    return 1;
}

static int pack_subdir(struct sbx_tar_pack *p, int dirfd, const char *name, struct sbx_error *err)
{
    _cleanup_close_ int fd = -1;
    size_t len = strlen(p->path);
    struct pack_dir *d;
    struct stat st;
    int r;

    if (p->depth == PACK_DEPTH + 1)
        return sbx_error_set(err, ELOOP, "archive '%s': more than %d directory levels", p->path,
                             PACK_DEPTH);
    d = &p->dirs[p->depth];
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && vanished(errno))
        return 0;
    if (fd < 0 || fstat(fd, &st) < 0)
        return sbx_error_set(err, errno, "open '%s': %s", p->path, strerror(errno));
    r = list_names(fd, &d->names, &d->n);
    if (r < 0)
        return sbx_error_set(err, r, "list '%s': %s", p->path, strerror(-r));
    p->path[len] = '/';
    p->path[len + 1] = '\0';
    d->fd = TAKE_FD(fd);
    d->next = 0;
    d->path_len = len + 1;
    p->depth++;
    r = queue_header(p, '5', &st, NULL, err);
    return r < 0 ? r : 1;
}

static int pack_symlink(struct sbx_tar_pack *p, int dirfd, const char *name, const struct stat *st,
                        struct sbx_error *err)
{
    ssize_t n = readlinkat(dirfd, name, p->link, sizeof(p->link));
    int r;

    if (n < 0 && vanished(errno))
        return 0;
    if (n < 0)
        return sbx_error_set(err, errno, "read link '%s': %s", p->path, strerror(errno));
    if ((size_t)n == sizeof(p->link))
        return sbx_error_set(err, ENAMETOOLONG, "read link '%s': target too long", p->path);
    p->link[n] = '\0';
    r = queue_header(p, '2', st, p->link, err);
    return r < 0 ? r : 1;
}

/* Queues the header of name in the top directory: 1, or 0 when it is gone or skipped. */
static int pack_entry(struct sbx_tar_pack *p, const struct pack_dir *top, const char *name,
                      struct sbx_error *err)
{
    size_t nlen = strlen(name);
    struct stat st;

    if (top->path_len + nlen + 2 > sizeof(p->path))
        return sbx_error_set(err, ENAMETOOLONG, "archive '%.*s%s': path too long",
                             (int)MIN(top->path_len, 100), p->path, name);
    memcpy(p->path + top->path_len, name, nlen + 1);
    if (fstatat(top->fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT
                   ? 0
                   : sbx_error_set(err, errno, "stat '%s': %s", p->path, strerror(errno));
    if (S_ISREG(st.st_mode))
        return pack_file(p, top->fd, name, err);
    if (S_ISDIR(st.st_mode))
        return pack_subdir(p, top->fd, name, err);
    if (S_ISLNK(st.st_mode))
        return pack_symlink(p, top->fd, name, &st, err);
    return 0;
}

static void pop_dir(struct sbx_tar_pack *p)
{
    struct pack_dir *d = &p->dirs[--p->depth];

    sbx_closep(&d->fd);
    names_free(d->names, d->n);
    d->names = NULL;
}

/* Queues the next header, or the end-of-archive blocks once the walk is over. */
static int next_entry(struct sbx_tar_pack *p, struct sbx_error *err)
{
    while (p->depth > 0) {
        struct pack_dir *top = &p->dirs[p->depth - 1];
        _cleanup_free_ char *name = NULL;
        int r;

        if (top->next == top->n) {
            pop_dir(p);
            continue;
        }
        name = TAKE_PTR(top->names[top->next]);
        top->next++;
        r = pack_entry(p, top, name, err);
        if (r != 0)
            return r < 0 ? r : 0;
    }
    p->zeros = 2 * BLOCK;
    p->trailer = true;
    return 0;
}

static ssize_t read_full(int fd, void *buf, size_t len)
{
    size_t done = 0;

    while (done < len) {
        ssize_t n = read(fd, (char *)buf + done, len - done);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        done += (size_t)n;
    }
    return (ssize_t)done;
}

/* Reads the current file's next bytes: into dst when asked for many, else ahead into the
 * stage. A file that ended early leaves zeros to make up its header's size. */
static int pack_data(struct sbx_tar_pack *p, uint8_t *dst, size_t len, size_t *produced,
                     struct sbx_error *err)
{
    size_t want = MIN(len, p->data_left);
    uint8_t *to = dst;
    ssize_t n;

    *produced = 0;
    if (want < DIRECT_MIN) {
        want = MIN(STAGE_SIZE, p->data_left);
        to = p->stage;
    }
    n = read_full(p->fd, to, want);
    if (n < 0)
        return sbx_error_set(err, (int)-n, "read '%s': %s", p->path, strerror((int)-n));
    p->data_left -= (uint64_t)n;
    if (to == p->stage) {
        p->stage_off = 0;
        p->stage_len = (size_t)n;
    } else {
        *produced = (size_t)n;
    }
    if ((size_t)n < want) {
        p->shrunk++;
        p->zeros += p->data_left;
        p->data_left = 0;
    }
    if (p->data_left == 0) {
        sbx_closep(&p->fd);
        p->fd = -1;
    }
    return 0;
}

int sbx_tar_pack_new(int dirfd, struct sbx_tar_pack **ret, struct sbx_error *err)
{
    _cleanup_(sbx_tar_pack_freep) struct sbx_tar_pack *p = calloc(1, sizeof(*p));
    int r;

    if (!p)
        return sbx_error_set(err, ENOMEM, "allocate tar archive");
    p->fd = -1;
    p->dirs[0].fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (p->dirs[0].fd < 0)
        return sbx_error_set(err, errno, "open directory to archive: %s", strerror(errno));
    p->depth = 1;
    r = list_names(p->dirs[0].fd, &p->dirs[0].names, &p->dirs[0].n);
    if (r < 0)
        return sbx_error_set(err, r, "list directory to archive: %s", strerror(-r));
    *ret = TAKE_PTR(p);
    return 0;
}

ssize_t sbx_tar_pack_read(struct sbx_tar_pack *p, void *buf, size_t len, struct sbx_error *err)
{
    uint8_t *out = buf;
    size_t done = 0;

    if (p->fail.code)
        return replay(&p->fail, err);
    if (len == 0)
        return sbx_error_set(err, EINVAL, "read of 0 bytes from a tar archive");
    len = MIN(len, (size_t)SSIZE_MAX);
    while (done < len) {
        size_t n = 0;
        int r = 0;

        if (p->stage_off < p->stage_len) {
            n = MIN(len - done, p->stage_len - p->stage_off);
            memcpy(out + done, p->stage + p->stage_off, n);
            p->stage_off += n;
        } else if (p->data_left > 0) {
            r = pack_data(p, out + done, len - done, &n, &p->fail);
        } else if (p->zeros > 0) {
            n = MIN(len - done, p->zeros);
            memset(out + done, 0, n);
            p->zeros -= n;
        } else if (p->trailer) {
            break;
        } else {
            r = next_entry(p, &p->fail);
        }
        if (r < 0)
            return replay(&p->fail, err);
        done += n;
    }
    return (ssize_t)done;
}

unsigned sbx_tar_pack_shrunk(const struct sbx_tar_pack *p)
{
    return p->shrunk;
}

void sbx_tar_pack_free(struct sbx_tar_pack *p)
{
    if (!p)
        return;
    while (p->depth > 0)
        pop_dir(p);
    sbx_closep(&p->fd);
    free(p);
}
