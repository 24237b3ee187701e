/* What the tar files share, not installed (the API is tar.h): the ustar header block and the
 * encoding of its fields (tar_header.c), and the extraction state that the archive parser
 * (tar_unpack.c) and the filesystem side of extraction (tar_extract.c) both work on. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "error.h"
#include "tar.h"

#define BLOCK     512
#define WBUF_SIZE (64 * 1024) /* unpack: small writes are gathered up to this */
#define META_MAX  (64 * 1024) /* unpack: largest pax or GNU long-name header accepted */

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

static inline uint64_t pad_of(uint64_t size)
{
    return (BLOCK - size % BLOCK) % BLOCK;
}

/* Repeats a stored failure: copies it into err (when not NULL) and returns -errno. */
static inline int replay(const struct sbx_error *fail, struct sbx_error *err)
{
    if (err)
        *err = *fail;
    return -fail->code;
}

/* ---- header fields (tar_header.c) ---- */

/* Writes v as n - 1 octal digits and a NUL; false if it does not fit. */
bool sbx_tar_put_octal(char *f, size_t n, int64_t v);
/* Octal when it fits, else GNU base-256; false when a pax record should carry the value too. */
bool sbx_tar_put_num(char *f, size_t n, int64_t v);
/* Reads an octal (space or NUL terminated, possibly empty) or base-256 field; -EINVAL. */
int sbx_tar_get_num(const char *f, size_t n, int64_t *ret);

/* A blank ustar header of the type, with mode and zero device numbers. */
void sbx_tar_init_header(struct tar_header *h, char type, int64_t mode);
/* Fills in the checksum: the last field to set. */
void sbx_tar_seal_header(struct tar_header *h);
/* Whether the block's checksum field matches its bytes (unsigned or signed sum). */
bool sbx_tar_checksum_ok(const uint8_t *b);

/* Fills name and prefix the ustar way; false when path (len bytes) does not fit them. */
bool sbx_tar_split_name(struct tar_header *h, const char *path, size_t len);
/* The name the header holds ("prefix/name" for POSIX ustar), malloc'ed; NULL without memory. */
char *sbx_tar_header_name(const struct tar_header *h);

/* Pax extended header records being built ("<len> <key>=<value>\n") in a fixed buffer. */
struct tar_pax {
    char *buf;
    size_t len, cap;
};

/* Appends a record; false (and nothing appended) when it does not fit. */
bool sbx_tar_pax_add(struct tar_pax *x, const char *key, const char *val, size_t vlen);
bool sbx_tar_pax_add_num(struct tar_pax *x, const char *key, int64_t v);

/* What pax and GNU headers say about the next entry. */
struct tar_pending {
    char *path, *linkpath, *longname, *longlink;
    bool has_size, has_mtime, sparse;
    uint64_t size;
    struct timespec mtime;
};

/* Frees the strings and forgets everything. */
void sbx_tar_pending_clear(struct tar_pending *pd);
bool sbx_tar_pending_any(const struct tar_pending *pd);

/* Parses the records of a pax 'x' header (len bytes at buf) into pd; offset (the bytes read so
 * far) is for messages. Returns 0 or -errno and fills err. */
int sbx_tar_pax_parse(struct tar_pending *pd, const char *buf, size_t len, uint64_t offset,
                      struct sbx_error *err);

/* Replaces *dst with a copy of len bytes of val (NULL when len is 0); -EINVAL if they hold a
 * NUL, -ENOMEM. */
int sbx_tar_set_str(char **dst, const char *val, size_t len);

/* ---- extraction (tar_unpack.c parses, tar_extract.c writes beneath the target) ---- */

enum unpack_state { UNPACK_HEADER, UNPACK_DATA, UNPACK_PAD, UNPACK_END };
enum unpack_sink { SINK_SKIP, SINK_FILE, SINK_PAX, SINK_LONGNAME, SINK_LONGLINK };
enum entry_kind { KIND_FILE, KIND_DIR, KIND_SYMLINK, KIND_LINK, KIND_NODATA, KIND_OTHER };

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
    struct tar_pending pend;
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

/* openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) from dirfd, O_CLOEXEC added: an fd or -errno. */
int sbx_tar_open_beneath(int dirfd, const char *path, int flags);

/* Cleans an archived name into a malloc'ed path relative to the target ("" for the target
 * itself): "." and empty components go, ".." takes one off; -EXDEV if absolute or climbing out,
 * -ENAMETOOLONG, -ENOMEM. */
int sbx_tar_clean_name(const char *name, char **ret);

/* Sets u->fail for a failure r (-errno) of what on the current entry; returns r. */
int sbx_tar_entry_error(struct sbx_tar_unpack *u, int r, const char *what);

/* Each of these extracts the entry at path (cleaned, not ""): 0, or -errno with u->fail set. */
int sbx_tar_extract_dir(struct sbx_tar_unpack *u, char *path, mode_t mode, struct timespec mtime);
int sbx_tar_extract_symlink(struct sbx_tar_unpack *u, char *path, const char *target,
                            struct timespec mtime);
int sbx_tar_extract_hardlink(struct sbx_tar_unpack *u, char *path, const char *target);

/* A regular file at u->path: created under a temp name (u->fd, in u->pfd), written, then given
 * u->mode and u->mtime and renamed into place. Each returns 0, or -errno with u->fail set. */
int sbx_tar_create_file(struct sbx_tar_unpack *u);
int sbx_tar_file_write(struct sbx_tar_unpack *u, const uint8_t *p, size_t n);
int sbx_tar_finish_file(struct sbx_tar_unpack *u);
/* Closes and removes the file being written, if any. */
void sbx_tar_abort_file(struct sbx_tar_unpack *u);

/* Sets the mode and mtime of the pending directories that are not ancestors of path (all when
 * NULL). */
int sbx_tar_pop_dirs(struct sbx_tar_unpack *u, const char *path);
