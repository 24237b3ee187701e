#define _GNU_SOURCE
#include "tar.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "path.h"

#define BLOCK      512
#define STAGE_SIZE (64 * 1024) /* pack: queued headers and file data read ahead for small reads */
#define DIRECT_MIN (16 * 1024) /* pack: reads at least this large go straight to the caller */
#define WBUF_SIZE  (64 * 1024) /* unpack: small writes are gathered up to this */
#define META_MAX   (64 * 1024) /* unpack: largest pax or GNU long-name header accepted */
#define PACK_DEPTH 256         /* directory levels beneath the top */

#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* The ustar header (POSIX.1-2001); GNU keeps atime and ctime where prefix is. */
struct tar_header {
    char name[100];
    char mode[8];
    char uid[8];
    char gid[8];
    char size[12];
    char mtime[12];
    char chksum[8];
    char typeflag;
    char linkname[100];
    char magic[6];
    char version[2];
    char uname[32];
    char gname[32];
    char devmajor[8];
    char devminor[8];
    char prefix[155];
    char pad[12];
};
_Static_assert(sizeof(struct tar_header) == BLOCK, "a tar header is one block");

static uint64_t pad_of(uint64_t size)
{
    return (BLOCK - size % BLOCK) % BLOCK;
}

static int replay(const struct sbx_error *fail, struct sbx_error *err)
{
    if (err)
        *err = *fail;
    return -fail->code;
}

/* Writes v as n - 1 octal digits and a NUL; false if it does not fit. */
static bool put_octal(char *f, size_t n, int64_t v)
{
    uint64_t u = (uint64_t)v;

    f[n - 1] = '\0';
    for (size_t i = n - 1; i-- > 0; u >>= 3)
        f[i] = (char)('0' + (u & 7));
    return v >= 0 && u == 0;
}

/* GNU base-256: a 0x80 marker (0xff when negative), then big-endian two's complement. */
static void put_base256(char *f, size_t n, int64_t v)
{
    uint64_t u = (uint64_t)v;

    for (size_t i = n - 1, k = 0; i > 0; i--, k++)
        f[i] = (char)(k < 8 ? (u >> (8 * k)) & 0xff : (v < 0 ? 0xff : 0));
    f[0] = (char)(v < 0 ? 0xff : 0x80);
}

/* Octal when it fits, else base-256; false when a pax record should carry the value too. */
static bool put_num(char *f, size_t n, int64_t v)
{
    if (put_octal(f, n, v))
        return true;
    put_base256(f, n, v);
    return false;
}

/* Reads an octal (space or NUL terminated, possibly empty) or base-256 field. */
static int get_num(const char *f, size_t n, int64_t *ret)
{
    const unsigned char *b = (const unsigned char *)f;
    uint64_t v = 0;
    size_t i = 0;

    if (b[0] == 0x80 || b[0] == 0xff) {
        v = b[0] == 0xff ? UINT64_MAX : 0;
        for (i = 1; i < n; i++) {
            if (v >> 55 != 0 && v >> 55 != 0x1ff)
                return -EINVAL;
            v = v << 8 | b[i];
        }
        if ((b[0] == 0xff) != ((int64_t)v < 0))
            return -EINVAL;
        *ret = (int64_t)v;
        return 0;
    }
    while (i < n && b[i] == ' ')
        i++;
    for (; i < n && b[i] >= '0' && b[i] <= '7'; i++) {
        if (v >> 60)
            return -EINVAL;
        v = v << 3 | (uint64_t)(b[i] - '0');
    }
    if (i < n && b[i] != ' ' && b[i] != '\0')
        return -EINVAL;
    *ret = (int64_t)v;
    return 0;
}

/* The header's byte sum with the checksum field counted as spaces (unsigned, and the signed
 * variant some old tars wrote). */
static void header_sums(const uint8_t *b, int64_t *usum, int64_t *ssum)
{
    const size_t at = offsetof(struct tar_header, chksum);

    *usum = *ssum = 0;
    for (size_t i = 0; i < BLOCK; i++) {
        bool in = i >= at && i < at + sizeof(((struct tar_header *)0)->chksum);
        *usum += in ? ' ' : b[i];
        *ssum += in ? ' ' : (signed char)b[i];
    }
}

static void seal_header(struct tar_header *h)
{
    int64_t usum, ssum;

    header_sums((const uint8_t *)h, &usum, &ssum);
    put_octal(h->chksum, 7, usum);
    h->chksum[7] = ' ';
}

static bool checksum_ok(const uint8_t *b)
{
    const struct tar_header *h = (const struct tar_header *)b;
    int64_t want, usum, ssum;

    if (get_num(h->chksum, sizeof(h->chksum), &want) < 0)
        return false;
    header_sums(b, &usum, &ssum);
    return want == usum || want == ssum;
}

static void init_header(struct tar_header *h, char type, int64_t mode)
{
    memset(h, 0, sizeof(*h));
    h->typeflag = type;
    put_octal(h->mode, sizeof(h->mode), mode);
    memcpy(h->magic, "ustar", 6);
    memcpy(h->version, "00", 2);
    put_octal(h->devmajor, sizeof(h->devmajor), 0);
    put_octal(h->devminor, sizeof(h->devminor), 0);
}

/* ---- packing ---- */

/* Pax extended header records being built ("<len> <key>=<value>\n"). */
struct pax {
    char *buf;
    size_t len, cap;
};

static bool pax_add(struct pax *x, const char *key, const char *val, size_t vlen)
{
    size_t base = strlen(key) + vlen + 3, total = base + 1;
    char num[24];
    int d;

    for (;;) {
        d = snprintf(num, sizeof(num), "%zu", total);
        if (base + (size_t)d == total)
            break;
        total = base + (size_t)d;
    }
    if (x->len + total > x->cap)
        return false;
    x->len += (size_t)sprintf(x->buf + x->len, "%s %s=", num, key);
    memcpy(x->buf + x->len, val, vlen);
    x->len += vlen;
    x->buf[x->len++] = '\n';
    return true;
}

static bool pax_add_num(struct pax *x, const char *key, int64_t v)
{
    char s[24];

    return pax_add(x, key, s, (size_t)snprintf(s, sizeof(s), "%" PRId64, v));
}

/* Fills name and prefix the ustar way; false when path does not fit them. */
static bool split_name(struct tar_header *h, const char *path, size_t len)
{
    if (len <= sizeof(h->name)) {
        memcpy(h->name, path, len);
        return true;
    }
    /* The prefix is path[0, i), the name path[i + 1, len), at a '/'. */
    for (size_t i = len - sizeof(h->name) - 1; i <= sizeof(h->prefix) && i + 1 < len; i++) {
        if (path[i] != '/')
            continue;
        memcpy(h->prefix, path, i);
        memcpy(h->name, path + i + 1, len - i - 1);
        return true;
    }
    return false;
}

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
    struct pax x = {.buf = (char *)p->stage + BLOCK, .cap = STAGE_SIZE - 3 * BLOCK};
    struct tar_header h, xh;
    size_t len = strlen(p->path), llen = link ? strlen(link) : 0, at;
    bool fits = true;

    init_header(&h, type, st->st_mode & 07777);
    if (!split_name(&h, p->path, len)) {
        memcpy(h.name, p->path, sizeof(h.name));
        fits &= pax_add(&x, "path", p->path, len);
    }
    memcpy(h.linkname, link ? link : "", MIN(llen, sizeof(h.linkname)));
    if (llen > sizeof(h.linkname))
        fits &= pax_add(&x, "linkpath", link, llen);
    if (!put_num(h.uid, sizeof(h.uid), st->st_uid))
        fits &= pax_add_num(&x, "uid", st->st_uid);
    if (!put_num(h.gid, sizeof(h.gid), st->st_gid))
        fits &= pax_add_num(&x, "gid", st->st_gid);
    if (!put_num(h.size, sizeof(h.size), type == '0' ? st->st_size : 0))
        fits &= pax_add_num(&x, "size", st->st_size);
    if (!put_num(h.mtime, sizeof(h.mtime), st->st_mtim.tv_sec))
        fits &= pax_add_num(&x, "mtime", st->st_mtim.tv_sec);
    seal_header(&h);
    if (!fits)
        return sbx_error_set(err, ENAMETOOLONG, "archive '%s': names too long", p->path);
    p->stage_off = 0;
    if (x.len == 0) {
        memcpy(p->stage, &h, BLOCK);
        p->stage_len = BLOCK;
        return 0;
    }
    init_header(&xh, 'x', 0644);
    strcpy(xh.name, "././@PaxHeader");
    put_octal(xh.uid, sizeof(xh.uid), 0);
    put_octal(xh.gid, sizeof(xh.gid), 0);
    put_octal(xh.size, sizeof(xh.size), (int64_t)x.len);
    put_octal(xh.mtime, sizeof(xh.mtime), 0);
    seal_header(&xh);
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

/* ---- unpacking ---- */

enum unpack_state { UNPACK_HEADER, UNPACK_DATA, UNPACK_PAD, UNPACK_END };
enum unpack_sink { SINK_SKIP, SINK_FILE, SINK_PAX, SINK_LONGNAME, SINK_LONGLINK };
enum entry_kind { KIND_FILE, KIND_DIR, KIND_SYMLINK, KIND_LINK, KIND_NODATA, KIND_OTHER };

/* What pax and GNU headers say about the next entry. */
struct pending {
    char *path, *linkpath, *longname, *longlink;
    bool has_size, has_mtime, sparse;
    uint64_t size;
    struct timespec mtime;
};

/* A directory whose mode and mtime are set once the archive leaves it. The pending ones always
 * form a chain of ancestors, so their paths are all prefixes of dir_path. */
struct dir_attr {
    size_t len;
    mode_t mode;
    struct timespec mtime;
};

struct sbx_tar_unpack {
    int dirfd; /* O_PATH */
    enum unpack_state state;
    enum unpack_sink sink;
    uint8_t block[BLOCK];
    size_t block_len;
    uint64_t offset;    /* bytes fed so far */
    uint64_t remaining; /* of the entry's data */
    size_t pad;
    char *meta; /* an extended header's data */
    size_t meta_len;
    struct pending pend;
    char *name; /* of the current entry as archived, for messages */
    /* The regular file being written: temp name tmp in pfd, renamed to leaf (in path). */
    int pfd, fd;
    char *path;
    const char *leaf;
    char tmp[32];
    mode_t mode;
    struct timespec mtime;
    size_t wlen;
    struct dir_attr *dirs;
    size_t ndirs, dirs_cap;
    char dir_path[PATH_MAX];
    uint64_t tmp_seed, tmp_seq;
    unsigned long count;
    struct sbx_error fail; /* once set, every call repeats it */
    uint8_t wbuf[WBUF_SIZE];
};

SBX_DEFINE_CLEANUP(struct sbx_tar_unpack *, sbx_tar_unpack_free)

static void pending_clear(struct pending *pd)
{
    free(pd->path);
    free(pd->linkpath);
    free(pd->longname);
    free(pd->longlink);
    memset(pd, 0, sizeof(*pd));
}

static bool pending_any(const struct pending *pd)
{
    return pd->path || pd->linkpath || pd->longname || pd->longlink || pd->has_size ||
           pd->has_mtime || pd->sparse;
}

static int open_beneath(int dirfd, const char *path, int flags)
{
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC),
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
    };

    /* EAGAIN: a concurrent rename made the kernel unsure ".." stayed beneath; try again. */
    for (int tries = 0;; tries++) {
        int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));

        if (fd >= 0)
            return fd;
        if (errno != EAGAIN || tries == 16)
            return -errno;
    }
}

/* Cleans an archived name into a path relative to the target ("" for the target itself):
 * "." and empty components go, ".." takes one off; -EXDEV if absolute or climbing out. */
static int clean_name(const char *name, char **ret)
{
    size_t len = strlen(name), n = 0;
    char *out;
    int r;

    if (name[0] == '/')
        return -EXDEV;
    if (len >= PATH_MAX)
        return -ENAMETOOLONG;
    out = malloc(len + 2);
    if (!out)
        return -ENOMEM;
    r = sbx_path_lexical(name, false, out, &n);
    if (r < 0) {
        free(out);
        return r;
    }
    *ret = out;
    return 0;
}

/* Creates the missing directories of path (0755 less umask), each step resolved beneath
 * dirfd; returns an O_PATH fd of the last. */
static int make_dirs(int dirfd, char *path)
{
    _cleanup_close_ int cur = open_beneath(dirfd, ".", O_PATH | O_DIRECTORY);
    char *s = path;

    if (cur < 0)
        return cur;
    for (;;) {
        char *e = strchrnul(s, '/');
        char c = *e;
        int fd;

        *e = '\0';
        fd = open_beneath(dirfd, path, O_PATH | O_DIRECTORY);
        if (fd == -ENOENT) {
            if (mkdirat(cur, s, 0755) < 0 && errno != EEXIST)
                fd = -errno;
            else
                fd = open_beneath(dirfd, path, O_PATH | O_DIRECTORY);
        }
        *e = c;
        if (fd < 0)
            return fd;
        close(cur);
        cur = fd;
        if (!c)
            return TAKE_FD(cur);
        s = e + 1;
    }
}

/* Opens (O_PATH) the directory holding path beneath the target, creating it when asked;
 * *leaf points at path's last component. */
static int open_parent(struct sbx_tar_unpack *u, char *path, bool create, const char **leaf)
{
    char *slash = strrchr(path, '/');
    int fd;

    if (!slash) {
        *leaf = path;
        return open_beneath(u->dirfd, ".", O_PATH | O_DIRECTORY);
    }
    *slash = '\0';
    fd = open_beneath(u->dirfd, path, O_PATH | O_DIRECTORY);
    if (fd == -ENOENT && create)
        fd = make_dirs(u->dirfd, path);
    *slash = '/';
    *leaf = slash + 1;
    return fd;
}

static int entry_error(struct sbx_tar_unpack *u, int r, const char *what)
{
    if (r == -EXDEV)
        return sbx_error_set(&u->fail, EXDEV, "entry '%s': path escapes the target directory",
                             u->name);
    return sbx_error_set(&u->fail, r, "entry '%s': %s: %s", u->name, what, strerror(-r));
}

struct tmp_op {
    enum entry_kind kind;
    const char *target; /* KIND_SYMLINK */
    int spfd;           /* KIND_LINK: the source */
    const char *sleaf;
};

/* Creates a new entry under a fresh temp name (u->tmp) in pfd: returns an fd for KIND_FILE,
 * 0 for the others, or -errno. */
static int make_tmp(struct sbx_tar_unpack *u, int pfd, const struct tmp_op *op)
{
    for (int i = 0; i < 16; i++) {
        int r;

        snprintf(u->tmp, sizeof(u->tmp), ".sbx-tar-%016" PRIx64,
                 u->tmp_seed + u->tmp_seq++ * UINT64_C(0x9e3779b97f4a7c15));
        if (op->kind == KIND_FILE)
            r = openat(pfd, u->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        else if (op->kind == KIND_SYMLINK)
            r = symlinkat(op->target, pfd, u->tmp);
        else
            r = linkat(op->spfd, op->sleaf, pfd, u->tmp, 0);
        if (r >= 0)
            return r;
        if (errno != EEXIST)
            break;
    }
    u->tmp[0] = '\0';
    return -errno;
}

/* Renames the temp entry over leaf (an empty directory in the way is removed); on failure
 * the temp entry is removed. */
static int rename_tmp(struct sbx_tar_unpack *u, int pfd, const char *leaf)
{
    int r = 0;

    if (renameat(pfd, u->tmp, pfd, leaf) < 0 &&
        (errno != EISDIR || unlinkat(pfd, leaf, AT_REMOVEDIR) < 0 ||
         renameat(pfd, u->tmp, pfd, leaf) < 0)) {
        r = -errno;
        unlinkat(pfd, u->tmp, 0);
    }
    u->tmp[0] = '\0';
    return r;
}

static void abort_file(struct sbx_tar_unpack *u)
{
    sbx_closep(&u->fd);
    u->fd = -1;
    if (u->pfd >= 0 && u->tmp[0])
        unlinkat(u->pfd, u->tmp, 0);
    u->tmp[0] = '\0';
    sbx_closep(&u->pfd);
    u->pfd = -1;
}

static int apply_dir(struct sbx_tar_unpack *u, const struct dir_attr *d)
{
    const struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, d->mtime};
    _cleanup_close_ int fd = -1;
    char saved = u->dir_path[d->len];
    int r = 0;

    u->dir_path[d->len] = '\0';
    fd = open_beneath(u->dirfd, u->dir_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (fd >= 0 && (fchmod(fd, d->mode) < 0 || futimens(fd, ts) < 0))
        r = -errno;
    else if (fd < 0 && fd != -ENOENT)
        r = fd;
    if (r < 0)
        sbx_error_set(&u->fail, r, "directory '%s': set mode and mtime: %s", u->dir_path,
                      strerror(-r));
    u->dir_path[d->len] = saved;
    return r;
}

/* Applies the pending directories that are not ancestors of path (all when NULL). */
static int pop_dirs(struct sbx_tar_unpack *u, const char *path)
{
    while (u->ndirs > 0) {
        const struct dir_attr *d = &u->dirs[u->ndirs - 1];
        int r;

        if (path && strncmp(u->dir_path, path, d->len) == 0 && path[d->len] == '/')
            return 0;
        u->ndirs--;
        r = apply_dir(u, d);
        if (r < 0)
            return r;
    }
    return 0;
}

static int push_dir(struct sbx_tar_unpack *u, const char *path, mode_t mode, struct timespec mtime)
{
    size_t len = strlen(path);

    if (u->ndirs == u->dirs_cap) {
        size_t cap = u->dirs_cap ? 2 * u->dirs_cap : 16;
        struct dir_attr *grown = reallocarray(u->dirs, cap, sizeof(*grown));

        if (!grown)
            return sbx_error_set(&u->fail, ENOMEM, "allocate directory list");
        u->dirs = grown;
        u->dirs_cap = cap;
    }
    memcpy(u->dir_path, path, len + 1);
    u->dirs[u->ndirs++] = (struct dir_attr){.len = len, .mode = mode, .mtime = mtime};
    return 0;
}

static int extract_dir(struct sbx_tar_unpack *u, char *path, mode_t mode, struct timespec mtime)
{
    _cleanup_close_ int pfd = -1;
    const char *leaf;
    struct stat st;
    int r = 0;

    pfd = open_parent(u, path, true, &leaf);
    if (pfd < 0)
        return entry_error(u, pfd, "open parent");
    if (mkdirat(pfd, leaf, 0700) < 0) {
        if (errno != EEXIST || fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
            r = -errno;
        else if (!S_ISDIR(st.st_mode) &&
                 (unlinkat(pfd, leaf, 0) < 0 || mkdirat(pfd, leaf, 0700) < 0))
            r = -errno;
    }
    if (r < 0)
        return entry_error(u, r, "create directory");
    r = push_dir(u, path, mode, mtime);
    if (r < 0)
        return r;
    u->count++;
    return 0;
}

static int extract_symlink(struct sbx_tar_unpack *u, char *path, const char *target,
                           struct timespec mtime)
{
    const struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, mtime};
    _cleanup_close_ int pfd = -1;
    const char *leaf;
    int r;

    if (!*target)
        return sbx_error_set(&u->fail, EINVAL, "entry '%s': empty symlink target", u->name);
    pfd = open_parent(u, path, true, &leaf);
    if (pfd < 0)
        return entry_error(u, pfd, "open parent");
    r = make_tmp(u, pfd, &(struct tmp_op){.kind = KIND_SYMLINK, .target = target});
    if (r == 0)
        r = rename_tmp(u, pfd, leaf);
    if (r == 0 && utimensat(pfd, leaf, ts, AT_SYMLINK_NOFOLLOW) < 0)
        r = -errno;
    if (r < 0)
        return entry_error(u, r, "create symlink");
    u->count++;
    return 0;
}

static int extract_hardlink(struct sbx_tar_unpack *u, char *path, const char *target)
{
    _cleanup_close_ int spfd = -1, pfd = -1;
    _cleanup_free_ char *src = NULL;
    const char *sleaf, *leaf;
    int r = clean_name(target, &src);

    if (r == 0 && !*src)
        r = -EINVAL;
    if (r == 0)
        spfd = r = open_parent(u, src, false, &sleaf);
    if (r == -EXDEV)
        return sbx_error_set(&u->fail, EXDEV,
                             "entry '%s': hard link target '%s' is outside the target directory",
                             u->name, target);
    if (r < 0)
        return sbx_error_set(&u->fail, -r, "entry '%s': hard link target '%s': %s", u->name, target,
                             strerror(-r));
    pfd = open_parent(u, path, true, &leaf);
    if (pfd < 0)
        return entry_error(u, pfd, "open parent");
    r = make_tmp(u, pfd, &(struct tmp_op){.kind = KIND_LINK, .spfd = spfd, .sleaf = sleaf});
    if (r == 0) {
        char tmp[sizeof(u->tmp)];

        memcpy(tmp, u->tmp, sizeof(tmp));
        r = rename_tmp(u, pfd, leaf);
        /* Renaming a link over another link to the same file does nothing: drop ours. */
        if (r == 0)
            unlinkat(pfd, tmp, 0);
    }
    if (r < 0)
        return entry_error(u, r, "create hard link");
    u->count++;
    return 0;
}

static int flush_wbuf(struct sbx_tar_unpack *u, const uint8_t *p, size_t n)
{
    if (!p) {
        p = u->wbuf;
        n = u->wlen;
        u->wlen = 0;
    }
    while (n > 0) {
        ssize_t w = write(u->fd, p, n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return entry_error(u, -errno, "write");
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int file_write(struct sbx_tar_unpack *u, const uint8_t *p, size_t n)
{
    int r;

    if (u->wlen + n <= WBUF_SIZE) {
        memcpy(u->wbuf + u->wlen, p, n);
        u->wlen += n;
        return 0;
    }
    r = flush_wbuf(u, NULL, 0);
    if (r < 0 || n >= WBUF_SIZE)
        return r < 0 ? r : flush_wbuf(u, p, n);
    memcpy(u->wbuf, p, n);
    u->wlen = n;
    return 0;
}

static int finish_file(struct sbx_tar_unpack *u)
{
    const struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, u->mtime};
    int r = flush_wbuf(u, NULL, 0);

    if (r < 0)
        return r;
    if (fchmod(u->fd, u->mode) < 0 || futimens(u->fd, ts) < 0)
        return entry_error(u, -errno, "set mode and mtime");
    sbx_closep(&u->fd);
    u->fd = -1;
    r = rename_tmp(u, u->pfd, u->leaf);
    if (r < 0)
        return entry_error(u, r, "replace");
    sbx_closep(&u->pfd);
    u->pfd = -1;
    u->count++;
    return 0;
}

static int set_str(char **dst, const char *val, size_t len)
{
    free(*dst);
    *dst = NULL;
    if (len == 0)
        return 0;
    if (memchr(val, '\0', len))
        return -EINVAL;
    *dst = strndup(val, len);
    return *dst ? 0 : -ENOMEM;
}

/* A pax decimal: digits, with an optional '-' and fraction when ts is given. */
static int parse_decimal(const char *s, size_t len, uint64_t *ret, struct timespec *ts)
{
    size_t i = 0, digits = 0;
    bool neg = ts && len > 0 && s[0] == '-';
    uint64_t v = 0;
    long nsec = 0;

    for (i = neg; i < len && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -EINVAL;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (ts && i < len && s[i] == '.')
        for (long scale = 100000000; ++i < len && s[i] >= '0' && s[i] <= '9'; scale /= 10)
            nsec += (s[i] - '0') * scale;
    if (digits == 0 || i != len || (ts && v > INT64_MAX))
        return -EINVAL;
    *ret = v;
    if (ts) {
        ts->tv_sec = neg ? -(time_t)v - (nsec > 0) : (time_t)v;
        ts->tv_nsec = neg && nsec > 0 ? 1000000000 - nsec : nsec;
    }
    return 0;
}

static int pax_record(struct pending *pd, const char *key, size_t klen, const char *val,
                      size_t vlen)
{
#define KEY_IS(k) (klen == sizeof(k) - 1 && memcmp(key, k, klen) == 0)
    uint64_t v;

    if (KEY_IS("path"))
        return set_str(&pd->path, val, vlen);
    if (KEY_IS("linkpath"))
        return set_str(&pd->linkpath, val, vlen);
    if (KEY_IS("size")) {
        pd->has_size = vlen > 0;
        return vlen ? parse_decimal(val, vlen, &pd->size, NULL) : 0;
    }
    if (KEY_IS("mtime")) {
        pd->has_mtime = vlen > 0;
        return vlen ? parse_decimal(val, vlen, &v, &pd->mtime) : 0;
    }
    if (klen > 11 && memcmp(key, "GNU.sparse.", 11) == 0)
        pd->sparse = true;
    return 0;
#undef KEY_IS
}

/* Parses the records of a pax 'x' header ("<len> <key>=<value>\n") into u->pend. */
static int parse_pax(struct sbx_tar_unpack *u)
{
    const char *p = u->meta, *end = u->meta + u->meta_len;

    while (p < end) {
        const char *rec = p, *key, *eq, *last;
        size_t len = 0;
        int r;

        for (; p < end && *p >= '0' && *p <= '9' && len <= META_MAX; p++)
            len = len * 10 + (size_t)(*p - '0');
        if (p == end || *p != ' ' || len > (size_t)(end - rec) || rec + len <= p + 1 ||
            rec[len - 1] != '\n')
            return sbx_error_set(&u->fail, EINVAL, "bad pax header record before offset %" PRIu64,
                                 u->offset);
        key = p + 1;
        last = rec + len - 1;
        eq = memchr(key, '=', (size_t)(last - key));
        if (!eq)
            return sbx_error_set(&u->fail, EINVAL, "bad pax header record before offset %" PRIu64,
                                 u->offset);
        r = pax_record(&u->pend, key, (size_t)(eq - key), eq + 1, (size_t)(last - eq - 1));
        if (r < 0)
            return sbx_error_set(&u->fail, -r, "bad pax record '%.*s' before offset %" PRIu64,
                                 (int)(eq - key), key, u->offset);
        p = rec + len;
    }
    return 0;
}

static int begin_data(struct sbx_tar_unpack *u, enum unpack_sink sink, uint64_t size);

static int data_done(struct sbx_tar_unpack *u)
{
    int r = 0;

    if (u->sink == SINK_FILE)
        r = finish_file(u);
    else if (u->sink == SINK_PAX)
        r = parse_pax(u);
    else if (u->sink == SINK_LONGNAME || u->sink == SINK_LONGLINK)
        r = set_str(u->sink == SINK_LONGNAME ? &u->pend.longname : &u->pend.longlink, u->meta,
                    strnlen(u->meta, u->meta_len));
    if (r < 0 && !u->fail.code)
        sbx_error_set(&u->fail, -r, "bad GNU long name header before offset %" PRIu64, u->offset);
    free(u->meta);
    u->meta = NULL;
    u->state = u->pad ? UNPACK_PAD : UNPACK_HEADER;
    return r;
}

static int begin_data(struct sbx_tar_unpack *u, enum unpack_sink sink, uint64_t size)
{
    u->sink = sink;
    u->remaining = size;
    u->pad = (size_t)pad_of(size);
    u->state = UNPACK_DATA;
    return size == 0 ? data_done(u) : 0;
}

static int begin_meta(struct sbx_tar_unpack *u, enum unpack_sink sink, uint64_t size)
{
    if (size > META_MAX)
        return sbx_error_set(&u->fail, EINVAL,
                             "extended header at offset %" PRIu64 " too large (%" PRIu64 " bytes)",
                             u->offset - BLOCK, size);
    free(u->meta);
    u->meta = malloc(size + 1);
    if (!u->meta)
        return sbx_error_set(&u->fail, ENOMEM, "allocate extended header");
    u->meta_len = 0;
    return begin_data(u, sink, size);
}

static int begin_file(struct sbx_tar_unpack *u, uint64_t size)
{
    int fd;

    u->pfd = open_parent(u, u->path, true, &u->leaf);
    if (u->pfd < 0) {
        fd = u->pfd;
        u->pfd = -1;
        return entry_error(u, fd, "open parent");
    }
    fd = make_tmp(u, u->pfd, &(struct tmp_op){.kind = KIND_FILE});
    if (fd < 0)
        return entry_error(u, fd, "create");
    u->fd = fd;
    u->wlen = 0;
    return begin_data(u, SINK_FILE, size);
}

static enum entry_kind kind_of(char type)
{
    switch (type) {
    case '0':
    case '\0':
    case '7':
        return KIND_FILE;
    case '1':
        return KIND_LINK;
    case '2':
        return KIND_SYMLINK;
    case '5':
        return KIND_DIR;
    case '3':
    case '4':
    case '6':
        return KIND_NODATA;
    default:
        return KIND_OTHER;
    }
}

static char *header_name(const struct tar_header *h)
{
    size_t nlen = strnlen(h->name, sizeof(h->name)), plen = 0;
    char *s;

    if (memcmp(h->magic, "ustar", 6) == 0) /* POSIX; GNU's "ustar  " has no prefix */
        plen = strnlen(h->prefix, sizeof(h->prefix));
    s = malloc(plen + nlen + 2);
    if (!s)
        return NULL;
    memcpy(s, h->prefix, plen);
    if (plen)
        s[plen++] = '/';
    memcpy(s + plen, h->name, nlen);
    s[plen + nlen] = '\0';
    return s;
}

/* An entry as its headers describe it. */
struct entry {
    enum entry_kind kind;
    char *link;
    uint64_t size;
    int64_t mode;
    struct timespec mtime;
    bool sparse;
};

/* Takes the name (into u->name), link, size and mtime from the pending overrides or the
 * header; clears the overrides. */
static int read_entry(struct sbx_tar_unpack *u, const struct tar_header *h, uint64_t size,
                      struct entry *e)
{
    struct pending *pd = &u->pend;
    int64_t sec = 0;
    int r = 0;

    free(u->name);
    u->name = pd->path       ? TAKE_PTR(pd->path)
              : pd->longname ? TAKE_PTR(pd->longname)
                             : header_name(h);
    e->link = pd->linkpath   ? TAKE_PTR(pd->linkpath)
              : pd->longlink ? TAKE_PTR(pd->longlink)
                             : strndup(h->linkname, sizeof(h->linkname));
    e->size = pd->has_size ? pd->size : size;
    e->mtime = pd->has_mtime ? pd->mtime : (struct timespec){0};
    e->sparse = pd->sparse;
    e->kind = kind_of(h->typeflag);
    if (!pd->has_mtime && get_num(h->mtime, sizeof(h->mtime), &sec) < 0)
        r = -EINVAL;
    if (!pd->has_mtime)
        e->mtime.tv_sec = (time_t)sec;
    if (get_num(h->mode, sizeof(h->mode), &e->mode) < 0)
        r = -EINVAL;
    pending_clear(pd);
    if (!u->name || !e->link)
        return sbx_error_set(&u->fail, ENOMEM, "allocate entry name");
    if (r < 0)
        return sbx_error_set(&u->fail, EINVAL, "entry '%s': bad header field", u->name);
    if ((h->typeflag == '0' || h->typeflag == '\0') && *u->name &&
        u->name[strlen(u->name) - 1] == '/')
        e->kind = KIND_DIR; /* pre-POSIX directories */
    return 0;
}

static int on_entry(struct sbx_tar_unpack *u, const struct tar_header *h, uint64_t size)
{
    _cleanup_free_ char *path = NULL;
    struct entry e = {0};
    _cleanup_free_ char *link = NULL;
    int r = read_entry(u, h, size, &e);

    link = e.link;
    if (r < 0)
        return r;
    r = clean_name(u->name, &path);
    if (r < 0)
        return entry_error(u, r, "name");
    if (e.sparse || e.kind == KIND_NODATA || e.kind == KIND_OTHER)
        return begin_data(u, SINK_SKIP, e.kind == KIND_NODATA ? 0 : e.size);
    if (!*path) {
        if (e.kind == KIND_DIR)
            return 0; /* "./": the target itself, left alone */
        return sbx_error_set(&u->fail, EINVAL, "entry '%s': names the target directory", u->name);
    }
    r = pop_dirs(u, path);
    if (r < 0)
        return r;
    switch (e.kind) {
    case KIND_FILE:
        free(u->path);
        u->path = TAKE_PTR(path);
        u->mode = (mode_t)e.mode & 0777;
        u->mtime = e.mtime;
        return begin_file(u, e.size);
    case KIND_DIR:
        return extract_dir(u, path, (mode_t)e.mode & 0777, e.mtime);
    case KIND_SYMLINK:
        return extract_symlink(u, path, link, e.mtime);
    default:
        return extract_hardlink(u, path, link);
    }
}

static bool is_zero_block(const uint8_t *b)
{
    for (size_t i = 0; i < BLOCK; i++)
        if (b[i])
            return false;
    return true;
}

static int on_header(struct sbx_tar_unpack *u)
{
    const struct tar_header *h = (const struct tar_header *)u->block;
    int64_t size;

    if (is_zero_block(u->block)) {
        if (pending_any(&u->pend))
            return sbx_error_set(&u->fail, EINVAL, "archive ends after an extended header");
        u->state = UNPACK_END; /* what follows the end, e.g. record padding, is ignored */
        return 0;
    }
    if (!checksum_ok(u->block))
        return sbx_error_set(&u->fail, EINVAL, "bad header checksum at offset %" PRIu64,
                             u->offset - BLOCK);
    if (get_num(h->size, sizeof(h->size), &size) < 0 || size < 0)
        return sbx_error_set(&u->fail, EINVAL, "bad size in header at offset %" PRIu64,
                             u->offset - BLOCK);
    switch (h->typeflag) {
    case 'x':
        return begin_meta(u, SINK_PAX, (uint64_t)size);
    case 'L':
        return begin_meta(u, SINK_LONGNAME, (uint64_t)size);
    case 'K':
        return begin_meta(u, SINK_LONGLINK, (uint64_t)size);
    case 'g':
        return begin_data(u, SINK_SKIP, (uint64_t)size);
    default:
        return on_entry(u, h, (uint64_t)size);
    }
}

static int sink_data(struct sbx_tar_unpack *u, const uint8_t *p, size_t n)
{
    if (u->sink == SINK_FILE)
        return file_write(u, p, n);
    if (u->sink != SINK_SKIP) {
        memcpy(u->meta + u->meta_len, p, n);
        u->meta_len += n;
    }
    return 0;
}

static int feed(struct sbx_tar_unpack *u, const uint8_t *p, size_t len)
{
    while (len > 0 && u->state != UNPACK_END) {
        size_t n;
        int r = 0;

        if (u->state == UNPACK_HEADER) {
            n = MIN(len, BLOCK - u->block_len);
            memcpy(u->block + u->block_len, p, n);
            u->block_len += n;
            u->offset += n;
            if (u->block_len == BLOCK) {
                u->block_len = 0;
                r = on_header(u);
            }
        } else if (u->state == UNPACK_DATA) {
            n = (size_t)MIN((uint64_t)len, u->remaining);
            u->offset += n;
            u->remaining -= n;
            r = sink_data(u, p, n);
            if (r == 0 && u->remaining == 0)
                r = data_done(u);
        } else {
            n = MIN(len, u->pad);
            u->offset += n;
            u->pad -= n;
            if (u->pad == 0)
                u->state = UNPACK_HEADER;
        }
        if (r < 0)
            return r;
        p += n;
        len -= n;
    }
    return 0;
}

/* Abandons the archive: removes the partial file, keeps the error for every later call. */
static int failed(struct sbx_tar_unpack *u, int r, struct sbx_error *err)
{
    if (!u->fail.code)
        sbx_error_set(&u->fail, r, "extract: %s", strerror(-r));
    abort_file(u);
    return replay(&u->fail, err);
}

int sbx_tar_unpack_new(int dirfd, struct sbx_tar_unpack **ret, struct sbx_error *err)
{
    _cleanup_(sbx_tar_unpack_freep) struct sbx_tar_unpack *u = malloc(sizeof(*u));

    if (!u)
        return sbx_error_set(err, ENOMEM, "allocate tar extraction");
    memset(u, 0, offsetof(struct sbx_tar_unpack, wbuf));
    u->fd = u->pfd = -1;
    u->dirfd = open_beneath(dirfd, ".", O_PATH | O_DIRECTORY);
    if (u->dirfd < 0)
        return sbx_error_set(err, -u->dirfd, "open target directory: %s", strerror(-u->dirfd));
    if (getrandom(&u->tmp_seed, sizeof(u->tmp_seed), GRND_NONBLOCK) != sizeof(u->tmp_seed))
        u->tmp_seed = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
    *ret = TAKE_PTR(u);
    return 0;
}

int sbx_tar_unpack_write(struct sbx_tar_unpack *u, const void *buf, size_t len,
                         struct sbx_error *err)
{
    int r;

    if (u->fail.code)
        return replay(&u->fail, err);
    r = feed(u, buf, len);
    return r < 0 ? failed(u, r, err) : 0;
}

int sbx_tar_unpack_finish(struct sbx_tar_unpack *u, struct sbx_error *err)
{
    int r;

    if (u->fail.code)
        return replay(&u->fail, err);
    if (u->state == UNPACK_DATA || u->state == UNPACK_PAD || u->block_len > 0 ||
        pending_any(&u->pend)) {
        bool in_entry = u->state != UNPACK_HEADER && (u->sink == SINK_FILE || u->sink == SINK_SKIP);

        if (in_entry && u->name)
            r = sbx_error_set(&u->fail, EINVAL, "archive truncated inside entry '%s'", u->name);
        else
            r = sbx_error_set(&u->fail, EINVAL, "archive truncated inside a header");
        return failed(u, r, err);
    }
    r = pop_dirs(u, NULL);
    if (r < 0)
        return failed(u, r, err);
    u->state = UNPACK_END;
    return u->count > INT_MAX ? INT_MAX : (int)u->count;
}

void sbx_tar_unpack_free(struct sbx_tar_unpack *u)
{
    if (!u)
        return;
    abort_file(u);
    pending_clear(&u->pend);
    sbx_closep(&u->dirfd);
    free(u->meta);
    free(u->name);
    free(u->path);
    free(u->dirs);
    free(u);
}
