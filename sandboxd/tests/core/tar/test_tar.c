/* The tar module (tar_*.c) against GNU tar and Python's tarfile, in a mkdtemp directory, and
 * its header codec (tar_internal.h) directly. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "tap.h"
#include "tar.h"
#include "tar_internal.h"

#define T_MTIME   1600000000
#define T_FUTURE  10000000000LL /* past the 11 octal digits of ustar's mtime field */
#define T_PAST    (-100000000LL)
#define BIG_SIZE  (3 * 1024 * 1024)
#define LONG_NAME "f_" /* + 148 chars: a 150-char name */
#define ENTRIES   24   /* in the tree, the FIFO left out */

static char T[64];
static const size_t chunks[] = {1, 7, 4096, 65536};

static char *pathf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *pathf(const char *fmt, ...)
{
    static char bufs[8][8192];
    static int next;
    char *b = bufs[next++ % 8];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(b, sizeof(bufs[0]), fmt, ap);
    va_end(ap);
    return b;
}

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char cmd[16384];
    va_list ap;
    int st;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    st = system(cmd);
    return st == -1 ? -1 : WEXITSTATUS(st);
}

static void put_file(const char *path, const void *data, size_t len, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    if (fd < 0 || write(fd, data, len) != (ssize_t)len || fchmod(fd, mode) < 0)
        printf("# put_file %s: %s\n", path, strerror(errno));
    if (fd >= 0)
        close(fd);
}

static char *slurp(const char *path, size_t *len)
{
    _cleanup_fclose_ FILE *f = fopen(path, "rbe");
    char *buf;
    long n;

    if (!f || fseek(f, 0, SEEK_END) < 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) < 0)
        return NULL;
    buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        return NULL;
    }
    *len = (size_t)n;
    return buf;
}

static void set_mtime(const char *path, long long sec)
{
    struct timespec ts[2] = {{.tv_sec = sec}, {.tv_sec = (time_t)sec}};

    if (utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW) < 0)
        printf("# utimensat %s: %s\n", path, strerror(errno));
}

/* Sets every mtime beneath dir (children first) to T_MTIME. */
static void set_mtimes(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;

    while (d && (de = readdir(d))) {
        char *p;

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        p = pathf("%s/%s", dir, de->d_name);
        if (de->d_type == DT_DIR)
            set_mtimes(p);
        set_mtime(p, T_MTIME);
    }
    if (d)
        closedir(d);
}

static const char *long_name(void)
{
    static char name[151];

    memset(name, 'n', 150);
    memcpy(name, LONG_NAME, strlen(LONG_NAME));
    return name;
}

static const char *long_target(void)
{
    static char t[160];

    memset(t, 'z', 140);
    memcpy(t, "nested/a/b/c/", 13);
    return t;
}

/* The tree every test packs: modes, an empty file, a 3 MiB file, an empty dir, nested dirs,
 * symlinks, a 150-char name deep down, a name split by ustar's prefix, extreme mtimes, a FIFO
 * (skipped) and a hard link. */
static void make_tree(const char *src)
{
    char *big = malloc(BIG_SIZE);

    for (size_t i = 0; i < BIG_SIZE; i++)
        big[i] = (char)(i * 2654435761u >> 13);
    run("mkdir -p %s/emptydir %s/nested/a/b/c %s/d1/d2/d3/d4/d5 %s/pfx_%s", src, src, src, src,
        "0123456789012345678901234567890123456789012345678901234");
    put_file(pathf("%s/a.txt", src), "hello\n", 6, 0644);
    put_file(pathf("%s/exec.sh", src), "#!/bin/sh\necho hi\n", 18, 0755);
    put_file(pathf("%s/secret", src), "s3cret", 6, 0600);
    put_file(pathf("%s/empty", src), "", 0, 0644);
    put_file(pathf("%s/big.bin", src), big, BIG_SIZE, 0644);
    put_file(pathf("%s/nested/a/b/c/file.txt", src), "deep\n", 5, 0640);
    put_file(pathf("%s/d1/d2/d3/d4/d5/%s", src, long_name()), "long\n", 5, 0644);
    put_file(pathf("%s/pfx_0123456789012345678901234567890123456789012345678901234/"
                   "name_0123456789012345678901234567890123456789012345678901234",
                   src),
             "split\n", 6, 0644);
    put_file(pathf("%s/future", src), "f", 1, 0644);
    put_file(pathf("%s/past", src), "p", 1, 0644);
    chmod(pathf("%s/emptydir", src), 0750);
    chmod(pathf("%s/nested/a/b", src), 0711);
    ok(symlink("nested/a", pathf("%s/link", src)) == 0, "symlink");
    ok(symlink(long_target(), pathf("%s/longlink", src)) == 0, "symlink with a long target");
    ok(mkfifo(pathf("%s/fifo", src), 0644) == 0, "fifo");
    ok(link(pathf("%s/a.txt", src), pathf("%s/hard", src)) == 0, "hard link");
    set_mtimes(src);
    set_mtime(pathf("%s/future", src), T_FUTURE);
    set_mtime(pathf("%s/past", src), T_PAST);
    free(big);
}

static int same_content(const char *a, const char *b)
{
    size_t la = 0, lb = 0;
    char *x = slurp(a, &la), *y = slurp(b, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;

    free(x);
    free(y);
    return same;
}

/* Counts the differences between the trees (regular files, dirs, symlinks of a; b may not
 * have more), printing them. */
static int compare(const char *a_, const char *b_, int check_link_mtime)
{
    _cleanup_free_ char *a = strdup(a_), *b = strdup(b_);
    DIR *d = opendir(a);
    struct dirent *de;
    int diffs = 0, na = 0, nb = 0;

    if (!d)
        return 1;
    while ((de = readdir(d))) {
        char *pa, *pb;
        struct stat sa, sb;
        char ta[4096], tb[4096];
        ssize_t la, lb;

        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        pa = strdup(pathf("%s/%s", a, de->d_name));
        pb = strdup(pathf("%s/%s", b, de->d_name));
        if (lstat(pa, &sa) < 0 ||
            !(S_ISREG(sa.st_mode) || S_ISDIR(sa.st_mode) || S_ISLNK(sa.st_mode))) {
            free(pa);
            free(pb);
            continue;
        }
        na++;
        if (lstat(pb, &sb) < 0 || (sa.st_mode & S_IFMT) != (sb.st_mode & S_IFMT)) {
            printf("# %s: missing or of another type\n", pb);
            diffs++;
        } else if (S_ISLNK(sa.st_mode)) {
            la = readlink(pa, ta, sizeof(ta));
            lb = readlink(pb, tb, sizeof(tb));
            if (la != lb || la < 0 || memcmp(ta, tb, (size_t)la) != 0 ||
                (check_link_mtime && sa.st_mtim.tv_sec != sb.st_mtim.tv_sec)) {
                printf("# %s: symlink differs\n", pb);
                diffs++;
            }
        } else if ((sa.st_mode & 07777) != (sb.st_mode & 07777) ||
                   sa.st_mtim.tv_sec != sb.st_mtim.tv_sec ||
                   (S_ISREG(sa.st_mode) && !same_content(pa, pb))) {
            printf("# %s: mode %o/%o mtime %lld/%lld or content differs\n", pb, sa.st_mode & 07777,
                   sb.st_mode & 07777, (long long)sa.st_mtim.tv_sec, (long long)sb.st_mtim.tv_sec);
            diffs++;
        }
        if (S_ISDIR(sa.st_mode) && S_ISDIR(sb.st_mode))
            diffs += compare(pa, pb, check_link_mtime);
        free(pa);
        free(pb);
    }
    closedir(d);
    d = opendir(b);
    while (d && (de = readdir(d)))
        nb += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    if (d)
        closedir(d);
    if (nb != na) {
        printf("# %s has %d entries, %s %d\n", b, nb, a, na);
        diffs++;
    }
    return diffs;
}

/* Packs src into out reading chunk bytes at a time; 0 or -errno. */
static int pack_to(const char *src, const char *out, size_t chunk, unsigned *shrunk)
{
    _cleanup_close_ int dfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    _cleanup_fclose_ FILE *f = fopen(out, "wbe");
    struct sbx_tar_pack *p = NULL;
    struct sbx_error e = {0};
    char *buf = malloc(chunk);
    ssize_t n;
    int r = sbx_tar_pack_new(dfd, &p, &e);

    while (r == 0 && (n = sbx_tar_pack_read(p, buf, chunk, &e)) != 0) {
        if (n < 0)
            r = (int)n;
        else if (fwrite(buf, 1, (size_t)n, f) != (size_t)n)
            r = -EIO;
    }
    if (r < 0)
        printf("# pack %s: %s\n", src, e.msg);
    if (shrunk && p)
        *shrunk = sbx_tar_pack_shrunk(p);
    sbx_tar_pack_free(p);
    free(buf);
    return r;
}

/* Feeds data in chunks into a new extraction beneath target: the finish result, or the first
 * error. */
static int unpack_buf(const char *data, size_t len, const char *target, size_t chunk,
                      struct sbx_error *e)
{
    _cleanup_close_ int dfd = open(target, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct sbx_tar_unpack *u = NULL;
    int r = sbx_tar_unpack_new(dfd, &u, e);

    for (size_t off = 0; r == 0 && off < len; off += chunk)
        r = sbx_tar_unpack_write(u, data + off, len - off < chunk ? len - off : chunk, e);
    if (r == 0)
        r = sbx_tar_unpack_finish(u, e);
    sbx_tar_unpack_free(u);
    return r;
}

static int unpack_file(const char *archive, const char *target, size_t chunk, struct sbx_error *e)
{
    size_t len = 0;
    char *data = slurp(archive, &len);
    int r;

    if (!data)
        return -EIO;
    r = unpack_buf(data, len, target, chunk, e);
    free(data);
    return r;
}

static int contains(const char *file, const char *needle)
{
    size_t len = 0;
    char *s = slurp(file, &len);
    int found;

    if (!s)
        return 0;
    s[len] = '\0';
    found = strstr(s, needle) != NULL;
    free(s);
    return found;
}

static void test_pack(const char *src)
{
    char *first = NULL;
    size_t first_len = 0;
    char *tv = strdup(pathf("%s/tv.txt", T));

    for (size_t i = 0; i < SBX_ARRAY_SIZE(chunks); i++) {
        char *out = pathf("%s/pack-%zu.tar", T, chunks[i]);
        size_t len = 0;
        char *data;

        ok(pack_to(src, out, chunks[i], NULL) == 0, "pack in chunks of %zu", chunks[i]);
        data = slurp(out, &len);
        ok(data && len % 512 == 0 && len > BIG_SIZE, "archive is whole blocks (%zu bytes)", len);
        if (!first) {
            first = data;
            first_len = len;
            continue;
        }
        ok(data && len == first_len && memcmp(data, first, len) == 0,
           "chunks of %zu give the same bytes", chunks[i]);
        free(data);
    }
    free(first);
    ok(run("tar -tvf %s/pack-1.tar > %s", T, tv) == 0, "GNU tar lists it");
    ok(contains(tv, "-rwxr-xr-x") && contains(tv, "exec.sh") && contains(tv, "-rw------- ") &&
           contains(tv, long_name()) && contains(tv, "link -> nested/a") &&
           contains(tv, long_target()) && contains(tv, "emptydir/") && !contains(tv, "fifo"),
       "listing shows modes, long names, symlinks, no fifo");
    ok(run("mkdir %s/x1 && tar --warning=no-timestamp -xf %s/pack-7.tar -C %s/x1", T, T, T) == 0,
       "GNU tar extracts it");
    ok(compare(src, pathf("%s/x1", T), 1) == 0, "GNU tar's extraction matches the tree");
    free(tv);
}

static void test_unpack_gnu(const char *src)
{
    static const char *const formats[] = {"pax", "gnu"};

    for (size_t f = 0; f < SBX_ARRAY_SIZE(formats); f++) {
        char *archive = strdup(pathf("%s/gnu-%s.tar", T, formats[f]));

        ok(run("tar --format=%s -cf %s -C %s .", formats[f], archive, src) == 0,
           "GNU tar --format=%s", formats[f]);
        for (size_t i = 0; i < SBX_ARRAY_SIZE(chunks); i++) {
            char *out = strdup(pathf("%s/u-%s-%zu", T, formats[f], chunks[i]));
            struct sbx_error e = {0};
            struct stat s1, s2;
            int r;

            mkdir(out, 0755);
            r = unpack_file(archive, out, chunks[i], &e);
            ok(r == ENTRIES, "unpack %s archive in chunks of %zu: %d %s", formats[f], chunks[i], r,
               r < 0 ? e.msg : "");
            ok(compare(src, out, 1) == 0, "%s/%zu matches the tree", formats[f], chunks[i]);
            ok(stat(pathf("%s/a.txt", out), &s1) == 0 && stat(pathf("%s/hard", out), &s2) == 0 &&
                   s1.st_ino == s2.st_ino,
               "hard link restored");
            free(out);
        }
        free(archive);
    }
}

/* Leftover temp files beneath dir. */
static int temps_in(const char *dir)
{
    return run("find %s -name '.sbx-tar-*' | grep -q .", dir) == 0;
}

static void test_round_trip(const char *src)
{
    char *rt = strdup(pathf("%s/rt", T));
    struct sbx_error e = {0};
    int r;

    mkdir(rt, 0755);
    r = unpack_file(pathf("%s/pack-4096.tar", T), rt, 7, &e);
    ok(r == ENTRIES, "round trip: %d entries %s", r, r < 0 ? e.msg : "");
    ok(compare(src, rt, 1) == 0, "round trip matches the tree");

    /* Again over what is there: files replaced, directories merged, types in the way. */
    put_file(pathf("%s/keep.txt", rt), "keep", 4, 0644);
    put_file(pathf("%s/secret", rt), "changed", 7, 0666);
    ok(unlink(pathf("%s/a.txt", rt)) == 0 && mkdir(pathf("%s/a.txt", rt), 0755) == 0,
       "an empty dir where a file goes");
    ok(rmdir(pathf("%s/emptydir", rt)) == 0, "rmdir emptydir");
    put_file(pathf("%s/emptydir", rt), "x", 1, 0644);
    ok(unlink(pathf("%s/link", rt)) == 0 && mkdir(pathf("%s/link", rt), 0755) == 0,
       "an empty dir where a symlink goes");
    r = unpack_file(pathf("%s/pack-4096.tar", T), rt, 65536, &e);
    ok(r == ENTRIES, "unpack over it: %d %s", r, r < 0 ? e.msg : "");
    unlink(pathf("%s/keep.txt", rt));
    ok(compare(src, rt, 1) == 0, "replaced and merged");
    ok(!temps_in(rt), "no temp files left");
    free(rt);
}

/* pack_read straight into unpack_write. */
static void test_stream(const char *src)
{
    _cleanup_close_ int sfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    _cleanup_close_ int dfd = -1;
    char *dst = strdup(pathf("%s/stream", T));
    struct sbx_tar_pack *p = NULL;
    struct sbx_tar_unpack *u = NULL;
    struct sbx_error e = {0};
    char buf[3000];
    ssize_t n = 0;
    int r;

    mkdir(dst, 0755);
    dfd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    r = sbx_tar_pack_new(sfd, &p, &e);
    if (r == 0)
        r = sbx_tar_unpack_new(dfd, &u, &e);
    while (r == 0 && (n = sbx_tar_pack_read(p, buf, sizeof(buf), &e)) > 0)
        r = sbx_tar_unpack_write(u, buf, (size_t)n, &e);
    if (r == 0 && n == 0)
        r = sbx_tar_unpack_finish(u, &e);
    ok(r == ENTRIES && n == 0, "pack streamed into unpack: %d %s", r, r < 0 ? e.msg : "");
    ok(compare(src, dst, 1) == 0, "streamed copy matches");
    sbx_tar_pack_free(p);
    sbx_tar_unpack_free(u);
    free(dst);
}

/* A file shrinking or growing after its header went out. */
static void test_changing_file(int shrink)
{
    char *dir = strdup(pathf("%s/chg%d", T, shrink));
    char *file = strdup(pathf("%s/f", dir));
    _cleanup_close_ int dfd = -1;
    struct sbx_tar_pack *p = NULL;
    struct sbx_error e = {0};
    char *data = calloc(1, 100000), buf[4096];
    size_t total = 0, len = 0;
    ssize_t n;
    char *out;
    int r;

    memset(data, 'A', 100000);
    mkdir(dir, 0755);
    put_file(file, data, 100000, 0644);
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    r = sbx_tar_pack_new(dfd, &p, &e);
    n = r == 0 ? sbx_tar_pack_read(p, buf, 512, &e) : -1;
    ok(n == 512, "header read");
    if (shrink)
        ok(truncate(file, 1000) == 0, "shrink the file");
    else
        ok(run("head -c 5000 /dev/zero >> %s", file) == 0, "grow the file");
    while ((n = sbx_tar_pack_read(p, buf, sizeof(buf), &e)) > 0)
        total += (size_t)n;
    ok(n == 0 && total + 512 == 512 + 100352 + 1024, "archive keeps the header's size (%zu)",
       total + 512);
    ok(sbx_tar_pack_shrunk(p) == (unsigned)shrink, "shrunk count %u", sbx_tar_pack_shrunk(p));
    sbx_tar_pack_free(p);
    ok(pack_to(dir, pathf("%s/chg.tar", T), 4096, NULL) == 0, "pack again");
    out = slurp(pathf("%s/chg.tar", T), &len);
    ok(out && len == 512 + (shrink ? 1024 : 105472) + 1024, "repack has the new size");
    free(out);
    free(data);
    free(file);
    free(dir);
}

/* levels nested directories beneath T/deep-<levels>: packing them gives want. */
static void test_depth(int levels, int want)
{
    char *dir = strdup(pathf("%s/deep-%d", T, levels));
    char *cmd = malloc(4096);
    size_t n = 0;

    n += (size_t)snprintf(cmd + n, 4096 - n, "mkdir -p %s", dir);
    for (int i = 0; i < levels; i++)
        n += (size_t)snprintf(cmd + n, 4096 - n, "/d");
    ok(run("%s", cmd) == 0, "%d nested dirs", levels);
    ok(pack_to(dir, pathf("%s/deep.tar", T), 65536, NULL) == want, "%d levels: %d", levels, want);
    free(cmd);
    free(dir);
}

/* Python writes the malicious archives: gen.py KIND OUT. */
static const char gen_py[] =
    "import io, sys, tarfile\n"
    "kind, out = sys.argv[1], sys.argv[2]\n"
    "fmt = tarfile.GNU_FORMAT if kind == 'gnutime' else tarfile.PAX_FORMAT\n"
    "t = tarfile.open(out, 'w', format=fmt)\n"
    "def f(name, data=b'evil', **kw):\n"
    "    i = tarfile.TarInfo(name); i.size = len(data); i.mode = 0o644\n"
    "    for k, v in kw.items(): setattr(i, k, v)\n"
    "    t.addfile(i, io.BytesIO(data))\n"
    "def l(name, target, type=tarfile.SYMTYPE):\n"
    "    i = tarfile.TarInfo(name); i.type = type; i.linkname = target; t.addfile(i)\n"
    "if kind == 'dotdot': f('../evil')\n"
    "if kind == 'abs': f('/abs')\n"
    "if kind == 'climb': f('a/../../evil')\n"
    "if kind == 'symlink': l('link', '/tmp'); f('link/evil')\n"
    "if kind == 'uplink': l('up', '..'); f('up/evil')\n"
    "if kind == 'hardlink': l('passwd', '/etc/passwd', tarfile.LNKTYPE)\n"
    "if kind == 'hardclimb': l('passwd', '../../../../../../etc/passwd', tarfile.LNKTYPE)\n"
    "if kind == 'hardvia': l('etc', '/etc'); l('passwd', 'etc/passwd', tarfile.LNKTYPE)\n"
    "if kind == 'sequence': f('good1'); f('../evil'); f('good2')\n"
    "if kind == 'victim': f('victim')\n"
    "if kind == 'etcevil': f('etc/evil')\n"
    "if kind == 'bigpax': f('x', pax_headers={'comment': 'c' * 100000})\n"
    "if kind == 'inside':\n"
    "    l('in', 'sub'); f('sub/', b'', type=tarfile.DIRTYPE, mode=0o755); f('in/f', b'ok')\n"
    "    f('./a/./b/../c', b'c'); l('hl', 'in/f', tarfile.LNKTYPE)\n"
    "    f('fifo', b'', type=tarfile.FIFOTYPE); f('chr', b'', type=tarfile.CHRTYPE)\n"
    "    f('odd', b'skipped data', type=b'Z'); f('suid', b'x', mode=0o6755)\n"
    "    f('sticky', b'', type=tarfile.DIRTYPE, mode=0o1777)\n"
    "if kind == 'gnutime':\n"
    "    f('neg', b'n', mtime=-1000000000); f('/'.join(['L' * 99] * 3), b'l', mtime=12000000000)\n"
    "if kind == 'paxtime':\n"
    "    f('frac', b'x', pax_headers={'mtime': '-12345.25'}); f('p' * 200 + '/q' * 60, b'q')\n"
    "t.close()\n";

/* Extracts the KIND archive into a fresh box/t (after running the shell command pre in it
 * when given); returns the result, with *box. */
static int gen_unpack_pre(const char *kind, const char *pre, size_t chunk, struct sbx_error *e,
                          char **box)
{
    char *archive = strdup(pathf("%s/%s.tar", T, kind));
    int r = -EIO;

    *box = strdup(pathf("%s/box-%s", T, kind));
    if (run("/usr/bin/python3 %s/gen.py %s %s", T, kind, archive) == 0 &&
        run("mkdir -p %s/t && cd %s/t && %s", *box, *box, pre ? pre : "true") == 0)
        r = unpack_file(archive, pathf("%s/t", *box), chunk, e);
    free(archive);
    return r;
}

static int gen_unpack(const char *kind, size_t chunk, struct sbx_error *e, char **box)
{
    return gen_unpack_pre(kind, NULL, chunk, e, box);
}

/* box holds t and nothing else. */
static int only_t(const char *box)
{
    return run("test \"$(ls -A %s)\" = t", box) == 0;
}

static void refused(const char *kind, const char *needle)
{
    struct sbx_error e = {0};
    char *box = NULL;
    int r = gen_unpack(kind, 7, &e, &box);

    ok(r == -EXDEV && strstr(e.msg, needle), "%s refused: %d '%s'", kind, r, e.msg);
    ok(only_t(box), "%s: nothing outside the target", kind);
    free(box);
}

static void test_refusals(void)
{
    struct sbx_error e = {0};
    char *box = NULL;
    struct stat st;
    int r, tmp_evil = lstat("/tmp/evil", &st) == 0;

    put_file(pathf("%s/gen.py", T), gen_py, strlen(gen_py), 0644);
    refused("dotdot", "'../evil'");
    refused("abs", "'/abs'");
    refused("climb", "'a/../../evil'");
    refused("symlink", "'link/evil'");
    ok(tmp_evil || lstat("/tmp/evil", &st) < 0, "no /tmp/evil");
    refused("uplink", "'up/evil'");
    refused("hardlink", "'passwd'");
    refused("hardclimb", "'passwd'");
    refused("hardvia", "'passwd'");

    /* Symlinks already in the target: replaced as a leaf, refused on the way. */
    put_file(pathf("%s/outside.txt", T), "canary", 6, 0644);
    r = gen_unpack_pre("victim", pathf("ln -s %s/outside.txt victim", T), 7, &e, &box);
    ok(r == 1 && contains(pathf("%s/outside.txt", T), "canary") &&
           lstat(pathf("%s/t/victim", box), &st) == 0 && S_ISREG(st.st_mode),
       "a symlink in the way is replaced, not written through: %d %s", r, e.msg);
    free(box);
    ok(mkdir(pathf("%s/outside", T), 0755) == 0, "mkdir outside");
    r = gen_unpack_pre("etcevil", pathf("ln -s %s/outside etc", T), 7, &e, &box);
    ok(r == -EXDEV && strstr(e.msg, "'etc/evil'") && run("test -z \"$(ls -A %s/outside)\"", T) == 0,
       "an existing symlink leading out is refused: %s", e.msg);
    free(box);

    r = gen_unpack("sequence", 1, &e, &box);
    ok(r == -EXDEV, "sequence refused at '../evil': %s", e.msg);
    ok(access(pathf("%s/t/good1", box), F_OK) == 0 && access(pathf("%s/t/good2", box), F_OK) < 0,
       "entries after a refusal are not extracted");
    ok(only_t(box), "sequence: nothing outside");
    free(box);

    r = gen_unpack("bigpax", 4096, &e, &box);
    ok(r == -EINVAL && strstr(e.msg, "too large"), "pax header over 64 KiB refused: %s", e.msg);
    free(box);
}

static void test_accepted(void)
{
    struct sbx_error e = {0};
    char *box = NULL;
    struct stat s1, s2;
    size_t len = 0;
    char *data;
    int r = gen_unpack("inside", 1, &e, &box);

    ok(r == 7, "symlinks and '..' that stay inside are followed: %d %s", r, e.msg);
    data = slurp(pathf("%s/t/sub/f", box), &len);
    ok(data && len == 2 && memcmp(data, "ok", 2) == 0, "in/f landed in sub/f");
    free(data);
    ok(access(pathf("%s/t/a/c", box), F_OK) == 0, "./a/./b/../c is a/c");
    ok(stat(pathf("%s/t/hl", box), &s1) == 0 && stat(pathf("%s/t/sub/f", box), &s2) == 0 &&
           s1.st_ino == s2.st_ino,
       "hard link through an inside symlink");
    ok(access(pathf("%s/t/fifo", box), F_OK) < 0 && access(pathf("%s/t/chr", box), F_OK) < 0 &&
           access(pathf("%s/t/odd", box), F_OK) < 0,
       "fifo, device and unknown types skipped");
    ok(lstat(pathf("%s/t/suid", box), &s1) == 0 && (s1.st_mode & 07777) == 0755 &&
           lstat(pathf("%s/t/sticky", box), &s2) == 0 && (s2.st_mode & 07777) == 0777,
       "setuid, setgid and sticky bits dropped");
    free(box);

    r = gen_unpack("gnutime", 3, &e, &box);
    ok(r == 2, "GNU base-256 mtimes and 'L' name: %d %s", r, e.msg);
    ok(lstat(pathf("%s/t/neg", box), &s1) == 0 && s1.st_mtim.tv_sec == -1000000000,
       "negative base-256 mtime");
    {
        char name[301];

        memset(name, 'L', 299);
        name[99] = name[199] = '/';
        name[299] = '\0';
        ok(lstat(pathf("%s/t/%s", box, name), &s1) == 0 && s1.st_mtim.tv_sec == 12000000000LL,
           "299-char GNU long name, large mtime");
    }
    free(box);

    r = gen_unpack("paxtime", 5, &e, &box);
    ok(r == 2, "pax mtime and long path: %d %s", r, e.msg);
    ok(lstat(pathf("%s/t/frac", box), &s1) == 0 && s1.st_mtim.tv_sec == -12346 &&
           s1.st_mtim.tv_nsec == 750000000,
       "pax fractional negative mtime (%lld.%09ld)", (long long)s1.st_mtim.tv_sec,
       s1.st_mtim.tv_nsec);
    free(box);
}

static void test_broken(void)
{
    size_t len = 0;
    char *data = slurp(pathf("%s/pack-4096.tar", T), &len);
    char *dir = strdup(pathf("%s/broken", T));
    struct sbx_error e = {0};
    int r;

    if (!data)
        return;
    mkdir(dir, 0755);
    r = unpack_buf(data, len / 2, dir, 4096, &e);
    ok(r == -EINVAL && strstr(e.msg, "truncated"), "truncated inside data: %d %s", r, e.msg);
    r = unpack_buf(data, 700, dir, 7, &e);
    ok(r == -EINVAL && strstr(e.msg, "truncated"), "truncated inside a header: %d %s", r, e.msg);
    ok(!temps_in(dir), "no temp files left");
    ok(unpack_buf(data, len - 1024, dir, 65536, &e) == ENTRIES, "missing end blocks accepted");

    data[0] ^= 1;
    r = unpack_buf(data, len, dir, 4096, &e);
    ok(r == -EINVAL && strstr(e.msg, "checksum"), "corrupt checksum: %d %s", r, e.msg);
    {
        _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct sbx_tar_unpack *u = NULL;

        r = sbx_tar_unpack_new(dfd, &u, &e);
        r = r ?: sbx_tar_unpack_write(u, data, 512, &e);
        ok(r == -EINVAL, "bad header refused");
        ok(sbx_tar_unpack_write(u, data + 512, 512, &e) == -EINVAL &&
               sbx_tar_unpack_finish(u, &e) == -EINVAL,
           "and so is everything after it");
        sbx_tar_unpack_free(u);
    }
    free(data);
    free(dir);
}

/* Numbers, names and pax records through the header codec directly. */
static void test_header(void)
{
    static const int64_t nums[] = {0, 1, 077777777777, 8589934592, -1, -1000000000, INT64_MAX};
    struct tar_header h;
    int64_t v = -7;
    char path[160], buf[512], *name;
    struct tar_pax x = {.buf = buf, .cap = sizeof(buf)};
    struct tar_pending pd = {0};
    struct sbx_error e = {0};
    bool octal;
    int r;

    for (size_t i = 0; i < SBX_ARRAY_SIZE(nums); i++) {
        octal = sbx_tar_put_num(h.mtime, sizeof(h.mtime), nums[i]);
        ok(octal == (nums[i] >= 0 && nums[i] < 8589934592) &&
               sbx_tar_get_num(h.mtime, sizeof(h.mtime), &v) == 0 && v == nums[i],
           "number %lld round-trips (%s)", (long long)nums[i], octal ? "octal" : "base-256");
    }
    r = sbx_tar_get_num("  17 \0\0\0", 8, &v);
    ok(r == 0 && v == 15, "octal with spaces: %lld", (long long)v);
    ok(sbx_tar_get_num("\0\0\0\0\0\0\0\0", 8, &v) == 0 && v == 0, "empty octal is 0");
    ok(sbx_tar_get_num("0012x\0", 6, &v) == -EINVAL, "octal with junk refused");
    ok(sbx_tar_get_num("\x80\xff\xff\xff\xff\xff\xff\xff\xff", 9, &v) == -EINVAL,
       "base-256 over 63 bits refused");

    sbx_tar_init_header(&h, '0', 0644);
    memset(path, 'p', 150);
    path[120] = '/';
    path[150] = '\0';
    ok(sbx_tar_split_name(&h, path, 150), "150-char path split over prefix and name");
    sbx_tar_seal_header(&h);
    name = sbx_tar_header_name(&h);
    ok(sbx_tar_checksum_ok((const uint8_t *)&h) && name && strcmp(name, path) == 0,
       "sealed header checks and gives the path back");
    free(name);
    ((char *)&h)[300] ^= 1;
    ok(!sbx_tar_checksum_ok((const uint8_t *)&h), "a flipped bit fails the checksum");
    memset(path, 'p', 150);
    ok(!sbx_tar_split_name(&h, path, 150), "no '/' to split at: does not fit");

    /* Records whose length crosses 99 -> 100 digits-wise: the prefix counts itself. */
    for (size_t vlen = 85; vlen < 100; vlen++) {
        x.len = 0;
        path[vlen] = '\0';
        r = sbx_tar_pax_add(&x, "path", path, vlen) ? sbx_tar_pax_parse(&pd, buf, x.len, 0, &e)
                                                    : -1;
        ok(r == 0 && (size_t)atoi(buf) == x.len && pd.path && strlen(pd.path) == vlen,
           "pax record of %zu bytes read back: %s", x.len, r ? e.msg : "");
        sbx_tar_pending_clear(&pd);
        path[vlen] = 'p';
    }
    ok(sbx_tar_pax_parse(&pd, "5 a=b\n", 6, 0, &e) == -EINVAL && strstr(e.msg, "pax"),
       "a record longer than its header refused: %s", e.msg);
    ok(sbx_tar_pax_parse(&pd, "19 mtime=-1.250000\n", 19, 0, &e) == 0 && pd.has_mtime &&
           pd.mtime.tv_sec == -2 && pd.mtime.tv_nsec == 750000000,
       "negative fractional mtime");
    sbx_tar_pending_clear(&pd);
}

int main(void)
{
    char *src;

    snprintf(T, sizeof(T), "/tmp/sbx-tar-XXXXXX");
    if (!mkdtemp(T))
        return 1;
    umask(022);
    test_header();
    src = strdup(pathf("%s/src", T));
    make_tree(src);

    test_pack(src);
    test_unpack_gnu(src);
    test_round_trip(src);
    test_stream(src);
    test_changing_file(1);
    test_changing_file(0);
    test_depth(256, 0);
    test_depth(257, -ELOOP);
    test_refusals();
    test_accepted();
    test_broken();

    if (!getenv("KEEP"))
        run("rm -rf %s", T);
    free(src);
    return done_testing();
}
