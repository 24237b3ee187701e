/* Tar archives streamed with bounded memory: a directory tree packed into a POSIX pax/ustar
 * archive chunk by chunk, and an archive fed chunk by chunk unpacked beneath a directory that
 * none of its entries can leave. Knows nothing of HTTP. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include "error.h"

/* A directory being archived. */
struct sbx_tar_pack;

/* Starts archiving the tree beneath dirfd (a directory fd, O_RDONLY or O_PATH; borrowed: it is
 * reopened, so its file offset is left alone). The walk is lazy and never follows symlinks
 * (they are stored as symlinks); regular files, directories and symlinks are archived, other
 * types skipped. Names are relative ("dir/", "dir/file") and sorted bytewise per directory, so
 * the same tree gives the same archive. One fd per directory level stays open; deeper than
 * 256 levels is -ELOOP, a relative path longer than PATH_MAX - 1 -ENAMETOOLONG (from read). */
int sbx_tar_pack_new(int dirfd, struct sbx_tar_pack **ret, struct sbx_error *err);

/* Produces up to len (> 0) next bytes of the archive into buf. Returns the count (len unless
 * the archive ends), 0 once the archive is over (after its two zero blocks), or -errno; after
 * an error every call fails the same way. A file that shrinks while it is read is padded with
 * zeros to the size in its header (see sbx_tar_pack_shrunk); one that grows is cut. */
ssize_t sbx_tar_pack_read(struct sbx_tar_pack *p, void *buf, size_t len, struct sbx_error *err);

/* How many files shrank while being read (their tail in the archive is zeros). */
unsigned sbx_tar_pack_shrunk(const struct sbx_tar_pack *p);

/* Accepts NULL. */
void sbx_tar_pack_free(struct sbx_tar_pack *p);

/* An archive being extracted. */
struct sbx_tar_unpack;

/* Starts extracting beneath dirfd (the target directory; borrowed: it is reopened O_PATH). */
int sbx_tar_unpack_new(int dirfd, struct sbx_tar_unpack **ret, struct sbx_error *err);

/* Feeds the next len bytes of the archive (any chunking works, down to 1 byte). Returns 0 or
 * -errno. Every path is resolved with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) from
 * dirfd, so no symlink, extracted earlier or already there, leads outside (absolute symlinks
 * on the way are refused even when they point inside). Absolute names, ".." climbing out,
 * and hard links to outside are -EXDEV with a message naming the entry. After any error the
 * archive is abandoned: the partial file is removed and every later call fails the same way.
 * Reads ustar, pax ('x' path, linkpath, size, mtime; 'g' ignored) and GNU ('L', 'K', base-256
 * numbers); extracts regular files, directories, symlinks and hard links to entries inside,
 * and skips other types and pax sparse files. The permission bits (not setuid, setgid or
 * sticky) and mtime are restored, not the owner. Files are written to a temp name and renamed
 * over what was there (an empty directory in the way is removed); existing directories are
 * merged, non-directories in their way replaced. A directory's mode and mtime are set once
 * the archive leaves it (or at finish), so extracting into it does not change them. A bad
 * header checksum is -EINVAL. Memory stays bounded (extended headers over 64 KiB are -EINVAL);
 * at most three fds are open. */
int sbx_tar_unpack_write(struct sbx_tar_unpack *u, const void *buf, size_t len,
                         struct sbx_error *err);

/* The input ended: -EINVAL if it ended inside a header or an entry; sets the pending
 * directories' mode and mtime. Returns the number of entries extracted (skipped types and the
 * "./" entry not counted) or -errno. An archive ending without its zero blocks, at an entry
 * boundary, is accepted. */
int sbx_tar_unpack_finish(struct sbx_tar_unpack *u, struct sbx_error *err);

/* Removes a partial file; accepts NULL. */
void sbx_tar_unpack_free(struct sbx_tar_unpack *u);
