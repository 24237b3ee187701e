/* Unpacking: the archive parser. Bytes fed in any chunking go through a small state machine
 * (header block, entry data, padding); pax and GNU extended headers are gathered and applied to
 * the entry that follows, and each entry is handed to tar_extract.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "tar.h"
#include "tar_internal.h"

SBX_DEFINE_CLEANUP(struct sbx_tar_unpack *, sbx_tar_unpack_free)

static int begin_data(struct sbx_tar_unpack *u, enum unpack_sink sink, uint64_t size);

static int data_done(struct sbx_tar_unpack *u)
{
    int r = 0;

    if (u->sink == SINK_FILE)
        r = sbx_tar_finish_file(u);
    else if (u->sink == SINK_PAX)
        r = sbx_tar_pax_parse(&u->pend, u->meta, u->meta_len, u->offset, &u->fail);
    else if (u->sink == SINK_LONGNAME || u->sink == SINK_LONGLINK)
        r = sbx_tar_set_str(u->sink == SINK_LONGNAME ? &u->pend.longname : &u->pend.longlink,
                            u->meta, strnlen(u->meta, u->meta_len));
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
    int r = sbx_tar_create_file(u);

    return r < 0 ? r : begin_data(u, SINK_FILE, size);
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
    struct tar_pending *pd = &u->pend;
    int64_t sec = 0;
    int r = 0;

    free(u->name);
    u->name = pd->path       ? TAKE_PTR(pd->path)
              : pd->longname ? TAKE_PTR(pd->longname)
                             : sbx_tar_header_name(h);
    e->link = pd->linkpath   ? TAKE_PTR(pd->linkpath)
              : pd->longlink ? TAKE_PTR(pd->longlink)
                             : strndup(h->linkname, sizeof(h->linkname));
    e->size = pd->has_size ? pd->size : size;
    e->mtime = pd->has_mtime ? pd->mtime : (struct timespec){0};
    e->sparse = pd->sparse;
    e->kind = kind_of(h->typeflag);
    if (!pd->has_mtime && sbx_tar_get_num(h->mtime, sizeof(h->mtime), &sec) < 0)
        r = -EINVAL;
    if (!pd->has_mtime)
        e->mtime.tv_sec = (time_t)sec;
    if (sbx_tar_get_num(h->mode, sizeof(h->mode), &e->mode) < 0)
        r = -EINVAL;
    sbx_tar_pending_clear(pd);
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
    r = sbx_tar_clean_name(u->name, &path);
    if (r < 0)
        return sbx_tar_entry_error(u, r, "name");
    if (e.sparse || e.kind == KIND_NODATA || e.kind == KIND_OTHER)
        return begin_data(u, SINK_SKIP, e.kind == KIND_NODATA ? 0 : e.size);
    if (!*path) {
        if (e.kind == KIND_DIR)
            return 0; /* "./": the target itself, left alone */
        return sbx_error_set(&u->fail, EINVAL, "entry '%s': names the target directory", u->name);
    }
    r = sbx_tar_pop_dirs(u, path);
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
        return sbx_tar_extract_dir(u, path, (mode_t)e.mode & 0777, e.mtime);
    case KIND_SYMLINK:
        return sbx_tar_extract_symlink(u, path, link, e.mtime);
    default:
        return sbx_tar_extract_hardlink(u, path, link);
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
        if (sbx_tar_pending_any(&u->pend))
            return sbx_error_set(&u->fail, EINVAL, "archive ends after an extended header");
        u->state = UNPACK_END; /* what follows the end, e.g. record padding, is ignored */
        return 0;
    }
    if (!sbx_tar_checksum_ok(u->block))
        return sbx_error_set(&u->fail, EINVAL, "bad header checksum at offset %" PRIu64,
                             u->offset - BLOCK);
    if (sbx_tar_get_num(h->size, sizeof(h->size), &size) < 0 || size < 0)
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
        return sbx_tar_file_write(u, p, n);
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
    sbx_tar_abort_file(u);
    return replay(&u->fail, err);
}

int sbx_tar_unpack_new(int dirfd, struct sbx_tar_unpack **ret, struct sbx_error *err)
{
    _cleanup_(sbx_tar_unpack_freep) struct sbx_tar_unpack *u = malloc(sizeof(*u));

    if (!u)
        return sbx_error_set(err, ENOMEM, "allocate tar extraction");
    memset(u, 0, offsetof(struct sbx_tar_unpack, wbuf));
    u->fd = u->pfd = -1;
    u->dirfd = sbx_tar_open_beneath(dirfd, ".", O_PATH | O_DIRECTORY);
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
        sbx_tar_pending_any(&u->pend)) {
        bool in_entry = u->state != UNPACK_HEADER && (u->sink == SINK_FILE || u->sink == SINK_SKIP);

        if (in_entry && u->name)
            r = sbx_error_set(&u->fail, EINVAL, "archive truncated inside entry '%s'", u->name);
        else
            r = sbx_error_set(&u->fail, EINVAL, "archive truncated inside a header");
        return failed(u, r, err);
    }
    r = sbx_tar_pop_dirs(u, NULL);
    if (r < 0)
        return failed(u, r, err);
    u->state = UNPACK_END;
    return u->count > INT_MAX ? INT_MAX : (int)u->count;
}

void sbx_tar_unpack_free(struct sbx_tar_unpack *u)
{
    if (!u)
        return;
    sbx_tar_abort_file(u);
    sbx_tar_pending_clear(&u->pend);
    sbx_closep(&u->dirfd);
    free(u->meta);
    free(u->name);
    free(u->path);
    free(u->dirs);
    free(u);
}
