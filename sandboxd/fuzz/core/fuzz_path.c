/* libFuzzer target for the REST API's paths (the URL remainder after /v1/files/, /v1/stat/,
 * /v1/dirs/, the cwd of gRPC requests): path.c's lexical cleaning and confinement and the
 * files.c operations the routes call, in a fresh box (fuzz_box.h) per input.
 *
 * Input: one byte choosing the operation (its low 6 bits modulo 7: open, open and list, lstat,
 * open_dir, mkdir, delete, write) and its flags (0x80, and 0x40 for mkdir's parents), then the path
 * (cut at a NUL, as the HTTP adapter refuses those); a path starting with "{root}" has that
 * replaced by the root's absolute path. Checked, whatever the operation:
 *   - sbx_path_lexical agrees with a plain stack-based cleaner written here, its output has no
 *     empty, "." or ".." component and cleaning it again changes nothing;
 *   - sbx_path_clean gives "." or a relative path without "..", the lexical result with the
 *     root's prefix dropped;
 *   - every fd handed back is the root or beneath it (by /proc/self/fd), none leaks;
 *   - an error carries its -errno and a message;
 *   - nothing outside the root changed (fuzz_box_check). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "files.h"
#include "fuzz_box.h"
#include "path.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PATH_MAX_FUZZ 4096
#define ROOT_TOKEN    "{root}"

/* The reference cleaner: components pushed and popped on a stack. */
static int ref_lexical(const char *p, bool absolute, char *out)
{
    const char *comp[PATH_MAX_FUZZ];
    size_t len[PATH_MAX_FUZZ], n = 0, o = 0;

    while (*p) {
        size_t l = strcspn(p, "/");

        if (l == 0 || (l == 1 && p[0] == '.')) {
        } else if (l == 2 && p[0] == '.' && p[1] == '.') {
            if (n == 0 && !absolute)
                return -EXDEV;
            if (n > 0)
                n--;
        } else {
            comp[n] = p;
            len[n++] = l;
        }
        p += l;
        if (*p == '/')
            p++;
    }
    for (size_t i = 0; i < n; i++) {
        if (i)
            out[o++] = '/';
        memcpy(out + o, comp[i], len[i]);
        o += len[i];
    }
    out[o] = '\0';
    return 0;
}

static void check_lexical(const char *p)
{
    size_t n = strlen(p), len = 0, len2 = 0;
    char *out = malloc(n + 2), *ref = malloc(n + 2), *again = malloc(n + 2);
    bool absolute = p[0] == '/';
    int r, rr;

    CHECK(out && ref && again, "out of memory");
    r = sbx_path_lexical(p, absolute, out, &len);
    rr = ref_lexical(p, absolute, ref);
    CHECK(r == rr, "'%s': %d, the reference %d", p, r, rr);
    if (r == 0) {
        CHECK(strcmp(out, ref) == 0, "'%s' cleaned to '%s', the reference '%s'", p, out, ref);
        CHECK(len == strlen(out) && len <= n, "length %zu of '%s'", len, out);
        CHECK(out[0] != '/' && !strstr(out, "//") && (len == 0 || out[len - 1] != '/'),
              "'%s' has an empty component", out);
        CHECK(sbx_path_lexical(out, false, again, &len2) == 0 && strcmp(again, out) == 0,
              "cleaning '%s' again gave '%s'", out, again);
    }
    free(out);
    free(ref);
    free(again);
}

static bool has_dotdot(const char *s)
{
    for (const char *p = s; (p = strstr(p, "..")); p += 2)
        if ((p == s || p[-1] == '/') && (p[2] == '/' || p[2] == '\0'))
            return true;
    return false;
}

static void check_clean(const struct fuzz_box *b, const char *p)
{
    struct sbx_error err = {0};
    char *rel = NULL;
    int r = sbx_path_clean(&b->root, p, &rel, &err);

    if (r < 0) {
        CHECK(r == -EXDEV && err.code == EXDEV && err.msg[0] && p[0] != '/', "'%s': %d '%s'", p, r,
              err.msg);
        return;
    }
    CHECK(rel[0] && rel[0] != '/' && !has_dotdot(rel) &&
              (strcmp(rel, ".") == 0 || !strstr(rel, "//")),
          "'%s' cleaned to '%s'", p, rel);
    free(rel);
}

static void check_error(int r, const struct sbx_error *err, const char *what)
{
    CHECK(r >= 0 || (err->code == -r && err->msg[0]), "%s: %d with code %d and message '%s'", what,
          r, err->code, err->msg);
}

static void run_op(struct fuzz_box *b, uint8_t op, const char *p)
{
    struct sbx_error err = {0};
    bool flag = op & 0x80;
    struct stat st;
    int r;

    switch ((op & 0x3f) % 7) {
    case 0:
        r = sbx_path_open(&b->root, p, (flag ? O_PATH : O_RDONLY) | O_NONBLOCK, &err);
        break;
    case 1:
        r = sbx_fs_open(&b->root, p, &st, &err);
        if (r >= 0 && S_ISDIR(st.st_mode)) {
            struct sbx_fs_entry *e = NULL;
            size_t n = 0;
            int l = sbx_fs_list(&b->root, p, r, &e, &n, &err);

            check_error(l, &err, "list");
            for (size_t i = 0; l == 0 && i < n; i++)
                CHECK(e[i].name[0] && !strchr(e[i].name, '/'), "listed '%s'", e[i].name);
            sbx_fs_entries_free(e, n);
        }
        break;
    case 2: {
        char *target = NULL;

        r = sbx_fs_lstat(&b->root, p, &st, &target, &err);
        free(target);
        check_error(r, &err, "lstat");
        return;
    }
    case 3:
        r = sbx_fs_open_dir(&b->root, p, flag, &err);
        break;
    case 4:
        r = sbx_fs_mkdir(&b->root, p, flag ? 0700 : 0755, op & 0x40, &err);
        check_error(r, &err, "mkdir");
        return;
    case 5:
        r = sbx_fs_delete(&b->root, p, flag, &err);
        check_error(r, &err, "delete");
        return;
    default: {
        struct sbx_fs_writer *w = NULL;
        uint8_t sha[SBX_SHA256_LEN];
        uint64_t size = 0;

        r = sbx_fs_writer_begin(&b->root, p, 0644, &w, &err);
        check_error(r, &err, "writer_begin");
        if (r < 0)
            return;
        r = sbx_fs_writer_write(w, "data", 4, &err);
        check_error(r, &err, "writer_write");
        if (flag || r < 0) {
            sbx_fs_writer_abort(w);
            return;
        }
        r = sbx_fs_writer_commit(w, &size, sha, &err);
        check_error(r, &err, "writer_commit");
        CHECK(r < 0 || size == 4, "committed %ju bytes", (uintmax_t)size);
        return;
    }
    }
    check_error(r, &err, "open");
    if (r >= 0) {
        fuzz_fd_under_root(b, r);
        close(r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fds = -1;
    struct fuzz_box b;
    char *p;
    size_t n;

    if (size < 1 || size > PATH_MAX_FUZZ)
        return 0;
    if (fds < 0) {
        umask(022);
        fds = fuzz_count_fds();
    }
    fuzz_box_make(&b);
    n = strnlen((const char *)data + 1, size - 1);
    if (n >= strlen(ROOT_TOKEN) && memcmp(data + 1, ROOT_TOKEN, strlen(ROOT_TOKEN)) == 0) {
        size_t rn = strlen(b.root.path), tn = strlen(ROOT_TOKEN);

        p = malloc(rn + n - tn + 1);
        CHECK(p, "out of memory");
        memcpy(p, b.root.path, rn);
        memcpy(p + rn, data + 1 + tn, n - tn);
        p[rn + n - tn] = '\0';
    } else {
        p = strndup((const char *)data + 1, n);
        CHECK(p, "out of memory");
    }
    check_lexical(p);
    check_clean(&b, p);
    run_op(&b, data[0], p);
    free(p);
    CHECK(fuzz_count_fds() == fds + 1, "fd leak: %d open, %d before (and the root's)",
          fuzz_count_fds(), fds);
    fuzz_box_remove(&b, NULL);
    return 0;
}
