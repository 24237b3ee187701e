/* libFuzzer target for multipart/form-data upload bodies (http_multipart.c), with the boundary
 * "b" (short, so that random bytes hit it).
 *
 * Input: byte 0 seeds the sizes of the pieces the body is fed in, and its top bit asks for
 * several "file" parts, announced with their filenames (E2B's uploads); the rest is the body.
 *
 * Checked: the verdict, its message and the bytes handed on are the same fed whole and fed in
 * pieces; a refusal says why ("invalid multipart body: ..." or the missing "file" part); an
 * accepted body holds the closing delimiter, and what was handed on holds no delimiter and
 * stands in the body as it is; with several parts, the same parts are announced and each
 * begun part of an accepted body has ended. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_box.h"
#include "http_multipart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct out {
    char *p;
    size_t len;
    char *marks; /* "<filename" and ">" of each part announced and ended */
    size_t marks_len;
    int open;
};

static void mark(struct out *o, const char *s, size_t len)
{
    o->marks = realloc(o->marks, o->marks_len + len + 1);
    CHECK(o->marks, "out of memory");
    memcpy(o->marks + o->marks_len, s, len);
    o->marks_len += len;
}

static int part_begin(void *cls, const char *filename, struct sbx_error *err)
{
    struct out *o = cls;

    (void)err;
    CHECK(strlen(filename) <= SBX_MULTIPART_FILENAME_MAX, "filename of %zu bytes",
          strlen(filename));
    CHECK(o->open == 0, "a part begun inside another");
    o->open = 1;
    mark(o, "<", 1);
    mark(o, filename, strlen(filename));
    return 0;
}

static int part_end(void *cls, struct sbx_error *err)
{
    struct out *o = cls;

    (void)err;
    CHECK(o->open == 1, "a part ended that had not begun");
    o->open = 0;
    mark(o, ">", 1);
    return 0;
}

static const struct sbx_multipart_parts parts = {part_begin, part_end};

static int collect(void *cls, const char *data, size_t len, struct sbx_error *err)
{
    struct out *o = cls;

    (void)err;
    o->p = realloc(o->p, o->len + len);
    CHECK(o->p, "out of memory");
    memcpy(o->p + o->len, data, len);
    o->len += len;
    return 0;
}

static int parse(const char *body, size_t n, unsigned seed, bool several, struct out *o,
                 struct sbx_error *e)
{
    struct sbx_multipart *m = NULL;
    size_t off = 0;
    int r;

    CHECK(sbx_multipart_new("b", collect, o, &m, e) == 0, "new: %s", e->msg);
    if (several)
        sbx_multipart_set_parts(m, &parts);
    for (r = 0; r == 0 && off < n;) {
        size_t step = seed ? 1 + (seed = seed * 1103515245u + 12345u) % 61 : n - off;
        if (step > n - off)
            step = n - off;
        r = sbx_multipart_feed(m, body + off, step, e);
        off += step;
    }
    if (r == 0)
        r = sbx_multipart_finish(m, e);
    sbx_multipart_free(m);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct out whole = {0}, pieces = {0};
    struct sbx_error ew = {0}, ep = {0};
    const char *body = (const char *)data + 1;
    bool several;
    size_t n;
    int rw, rp;

    if (size < 1 || size > 65536)
        return 0;
    n = size - 1;
    several = data[0] & 0x80;
    rw = parse(body, n, 0, several, &whole, &ew);
    rp = parse(body, n, (data[0] & 0x7f) | 1u, several, &pieces, &ep);
    CHECK(rw == rp && (rw == 0 || strcmp(ew.msg, ep.msg) == 0),
          "whole: %d '%s', in pieces: %d '%s'", rw, ew.msg, rp, ep.msg);
    CHECK(whole.len == pieces.len && (!whole.len || !memcmp(whole.p, pieces.p, whole.len)),
          "%zu bytes handed on whole, %zu in pieces", whole.len, pieces.len);
    CHECK(whole.marks_len == pieces.marks_len &&
              (!whole.marks_len || !memcmp(whole.marks, pieces.marks, whole.marks_len)),
          "parts announced differ whole and in pieces");
    CHECK(several || !whole.marks_len, "parts announced unasked");
    if (rw < 0) {
        CHECK(rw == -EINVAL, "%d", rw);
        CHECK(!strncmp(ew.msg, "invalid multipart body: ", 24) ||
                  !strcmp(ew.msg, "multipart body is missing the required \"file\" part"),
              "reason '%s'", ew.msg);
    } else {
        CHECK(memmem(body, n, "--b--", 5), "accepted without a closing delimiter");
        /* Several parts' contents joined may hold one across their seam. */
        CHECK(several || !whole.len || !memmem(whole.p, whole.len, "\r\n--b", 5),
              "a delimiter in the content handed on");
        CHECK(several || !whole.len || memmem(body, n, whole.p, whole.len),
              "content not in the body");
        CHECK(whole.open == 0, "an accepted body left a part open");
    }
    free(whole.p);
    free(pieces.p);
    free(whole.marks);
    free(pieces.marks);
    return 0;
}
