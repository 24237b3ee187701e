/* The multipart/form-data parser: whole forms give their "file" part's bytes, whatever pieces
 * the body comes in; a body that is not whole is refused with its reason. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "http_multipart.h"
#include "tap.h"

struct sink {
    char buf[4096];
    size_t len;
    int fail_at; /* fail the write that would pass this many bytes (0: never) */
};

static int collect(void *cls, const char *data, size_t len, struct sbx_error *err)
{
    struct sink *s = cls;

    if (s->fail_at && s->len + len > (size_t)s->fail_at)
        return sbx_error_set(err, ENOSPC, "disk full");
    if (s->len + len > sizeof(s->buf))
        return sbx_error_set(err, EFBIG, "too much");
    memcpy(s->buf + s->len, data, len);
    s->len += len;
    return 0;
}

/* Parses body in pieces of step bytes into fn (with parts, when not NULL); returns 0 or -errno
 * with the message in msg. */
static int parse_with(const char *boundary, const char *body, size_t len, size_t step,
                      sbx_multipart_data_fn fn, void *cls, const struct sbx_multipart_parts *parts,
                      char msg[256])
{
    struct sbx_multipart *m = NULL;
    struct sbx_error e = {0};
    int r = sbx_multipart_new(boundary, fn, cls, &m, &e);

    if (r == 0 && parts)
        sbx_multipart_set_parts(m, parts);
    for (size_t off = 0; r == 0 && off < len; off += step)
        r = sbx_multipart_feed(m, body + off, len - off < step ? len - off : step, &e);
    if (r == 0)
        r = sbx_multipart_finish(m, &e);
    snprintf(msg, 256, "%s", r < 0 ? e.msg : "");
    sbx_multipart_free(m);
    return r;
}

static int parse(const char *boundary, const char *body, size_t len, size_t step, struct sink *s,
                 char msg[256])
{
    return parse_with(boundary, body, len, step, collect, s, NULL, msg);
}

/* body must give exactly want, in pieces of every size. */
static void whole(const char *what, const char *body, const char *want)
{
    size_t len = strlen(body);
    bool all = true;
    char msg[256] = "";

    for (size_t step = 1; step <= len; step++) {
        struct sink s = {0};
        int r = parse("XX", body, len, step, &s, msg);
        if (r != 0 || s.len != strlen(want) || memcmp(s.buf, want, s.len) != 0) {
            ok(0, "%s: in pieces of %zu: %d '%s', %zu bytes", what, step, r, msg, s.len);
            all = false;
            break;
        }
    }
    ok(all, "%s: accepted in pieces of every size", what);
}

/* body must be refused with the reason want, in pieces of every size, and nothing more than
 * a prefix of the content may have been handed on. */
static void refused(const char *what, const char *body, const char *want)
{
    size_t len = strlen(body);
    bool all = true;
    char msg[256] = "";

    for (size_t step = 1; step <= len; step++) {
        struct sink s = {0};
        int r = parse("XX", body, len, step, &s, msg);
        if (r != -EINVAL || strcmp(msg, want) != 0) {
            ok(0, "%s: in pieces of %zu: %d '%s'", what, step, r, msg);
            all = false;
            break;
        }
    }
    ok(all, "%s: refused in pieces of every size: %s", what, want);
}

#define PART(name) "Content-Disposition: form-data; name=\"" name "\"\r\n\r\n"
#define FILEPART   "Content-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n"

static void forms(void)
{
    whole("one part", "--XX\r\n" FILEPART "hello\r\n--XX--\r\n", "hello");
    whole("no epilogue line end", "--XX\r\n" FILEPART "hello\r\n--XX--", "hello");
    whole("empty content", "--XX\r\n" FILEPART "\r\n--XX--\r\n", "");
    whole("preamble and epilogue",
          "preamble --XX \r\n-\r\n--XX\r\n" FILEPART "x\r\n--XX--\r\nepilogue\r\n--XX\r\n"
          "Content-Disposition: form-data\r\n\r\n",
          "x");
    whole("other parts around it",
          "--XX\r\n" PART("a") "1\r\n--XX\r\n" FILEPART "abc\r\n--XX\r\n" PART("b") "2\r\n--XX--",
          "abc");
    whole("content that looks like the delimiter's start",
          "--XX\r\n" FILEPART "\r\r\n\r\n-\r\n--\r\n--X\r\n-XX\r\n\r\n--XX--",
          "\r\r\n\r\n-\r\n--\r\n--X\r\n-XX\r\n");
    whole("transport padding after a delimiter", "--XX \t\r\n" FILEPART "p\r\n--XX--  ", "p");
    whole("header names in any case, other headers, quoted name",
          "--XX\r\nContent-Type: text/plain\r\ncontent-disposition:FORM-DATA;NAME=\"fi\\le\"\r\n"
          "\r\nq\r\n--XX--",
          "q");
    whole("a token name", "--XX\r\nContent-Disposition: form-data; name=file\r\n\r\nt\r\n--XX--",
          "t");
    whole("bare LF header lines",
          "--XX\r\nContent-Disposition: form-data; name=file\n\nl\r\n--XX--", "l");
}

static void not_whole(void)
{
    static const char *const cut = "invalid multipart body: a part does not end with its boundary";
    static const char *const early =
        "invalid multipart body: the body ends before the closing boundary";

    refused("no closing boundary (issue 16)", "--XX\r\n" FILEPART "0123456789abcdefghijklmnopqr",
            cut);
    refused("content ending in a partial delimiter", "--XX\r\n" FILEPART "abc\r\n--X", cut);
    refused("a delimiter, then nothing", "--XX\r\n" FILEPART "abc\r\n--XX", early);
    refused("a delimiter and a line end, then nothing", "--XX\r\n" FILEPART "abc\r\n--XX\r\n",
            early);
    refused("cut inside the next part's headers", "--XX\r\n" FILEPART "abc\r\n--XX\r\nContent-Disp",
            early);
    refused("cut inside the file part's headers", "--XX\r\nContent-Disposition: form", early);
    refused("a closing boundary cut after one dash", "--XX\r\n" FILEPART "abc\r\n--XX-", early);
    refused("no boundary at all", "just bytes", early);
    refused("empty body", "", early);
    refused("a second file part", "--XX\r\n" FILEPART "a\r\n--XX\r\n" FILEPART "b\r\n--XX--\r\n",
            "invalid multipart body: a second \"file\" part");
    refused("a part without a name", "--XX\r\n" FILEPART "a\r\n--XX\r\n\r\nb\r\n--XX--",
            "invalid multipart body: a part has no name");
    refused("a part with an empty name",
            "--XX\r\nContent-Disposition: form-data; name=\"\"\r\n\r\nb\r\n--XX--",
            "invalid multipart body: a part has no name");
    refused("a disposition other than form-data",
            "--XX\r\nContent-Disposition: attachment; name=\"file\"\r\n\r\nb\r\n--XX--",
            "invalid multipart body: a part has no name");
    refused("a boundary followed by junk", "--XX\r\n" FILEPART "a\r\n--XXY\r\n--XX--",
            "invalid multipart body: a boundary is followed by neither \"--\" nor a line end");
    refused("no file part", "--XX\r\n" PART("other") "a\r\n--XX--",
            "multipart body is missing the required \"file\" part");
}

static void limits(void)
{
    size_t n = 20000;
    char *big = malloc(n + 64), msg[256];
    struct sink s = {.fail_at = 3};
    int r;

    strcpy(big, "--XX\r\nX-Long: ");
    memset(big + strlen(big), 'a', n);
    big[14 + n] = '\0';
    strcat(big, "\r\n\r\n--XX--");
    r = parse("XX", big, strlen(big), 4096, &s, msg);
    ok(r == -EINVAL && strstr(msg, "part headers too large"), "long header line: %s", msg);
    free(big);

    memset(&s, 0, sizeof(s));
    s.fail_at = 3;
    r = parse("XX", "--XX\r\n" FILEPART "abcdef\r\n--XX--",
              strlen("--XX\r\n" FILEPART "abcdef\r\n--XX--"), 1, &s, msg);
    ok(r == -ENOSPC && strcmp(msg, "disk full") == 0, "a write's error stops it: %d %s", r, msg);
}

static void boundaries(void)
{
    char b[SBX_MULTIPART_BOUNDARY_MAX + 1];
    char long71[100];
    struct sbx_multipart *m = NULL;
    struct sbx_error e = {0};

    ok(sbx_multipart_boundary("multipart/form-data; boundary=XX", b) == 0 && !strcmp(b, "XX"),
       "token boundary");
    ok(sbx_multipart_boundary("Multipart/Form-Data;charset=utf-8; BOUNDARY=\"a b:c\"", b) == 0 &&
           !strcmp(b, "a b:c"),
       "quoted boundary after another parameter");
    ok(sbx_multipart_boundary("multipart/form-data", b) == -EINVAL, "no boundary");
    ok(sbx_multipart_boundary("multipart/form-data; boundary=", b) == -EINVAL, "empty boundary");
    ok(sbx_multipart_boundary("multipart/form-data; boundary=\"ab \"", b) == -EINVAL,
       "boundary ending in a space");
    ok(sbx_multipart_boundary("multipart/form-data; boundary=\"a\rb\"", b) == -EINVAL,
       "boundary with a CR");
    ok(sbx_multipart_boundary("text/plain; boundary=XX", b) == -EINVAL, "not a form");
    ok(sbx_multipart_boundary(NULL, b) == -EINVAL, "no Content-Type");
    memset(long71, 'a', 71);
    long71[71] = '\0';
    {
        char ct[200];
        snprintf(ct, sizeof(ct), "multipart/form-data; boundary=%s", long71);
        ok(sbx_multipart_boundary(ct, b) == -EINVAL, "71-character boundary");
        ct[strlen(ct) - 1] = '\0';
        ok(sbx_multipart_boundary(ct, b) == 0 && strlen(b) == 70, "70-character boundary");
    }
    ok(sbx_multipart_new("a\rb", collect, NULL, &m, &e) == -EINVAL && !m, "new refuses a CR");
}

/* Several "file" parts, each announced with its filename: the sink records "<name>{content}"
 * for each, in every piece size. */
struct files_sink {
    char buf[4096];
    size_t len;
};

static void put(struct files_sink *s, const char *p, size_t n)
{
    if (s->len + n < sizeof(s->buf)) {
        memcpy(s->buf + s->len, p, n);
        s->len += n;
        s->buf[s->len] = '\0';
    }
}

static int files_begin(void *cls, const char *filename, struct sbx_error *err)
{
    (void)err;
    put(cls, filename, strlen(filename));
    put(cls, "{", 1);
    return 0;
}

static int files_end(void *cls, struct sbx_error *err)
{
    (void)err;
    put(cls, "}", 1);
    return 0;
}

static int files_data(void *cls, const char *data, size_t len, struct sbx_error *err)
{
    (void)err;
    put(cls, data, len);
    return 0;
}

static const struct sbx_multipart_parts files_parts = {files_begin, files_end};

static int parse_files(const char *body, size_t step, struct files_sink *s, char msg[256])
{
    return parse_with("b", body, strlen(body), step, files_data, s, &files_parts, msg);
}

static void several_files(void)
{
    static const char body[] =
        "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/tmp/a b\"\r\n\r\n"
        "one\r\n--b\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nskip\r\n"
        "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x\\\\y\"\r\n"
        "Content-Type: application/octet-stream\r\n\r\ntwo\r\n--b\r\n"
        "Content-Disposition: form-data; name=\"file\"\r\n\r\n\r\n--b--\r\n";
    bool all = true;
    char msg[256];

    for (size_t step = 1; step <= sizeof(body); step++) {
        struct files_sink s = {{0}, 0};
        int r = parse_files(body, step, &s, msg);
        if (r != 0 || strcmp(s.buf, "/tmp/a b{one}x\\y{two}{}") != 0) {
            ok(false, "several files in pieces of %zu: %d %s '%s'", step, r, msg, s.buf);
            all = false;
            break;
        }
    }
    if (all)
        ok(true, "several files, each with its filename, in pieces of every size");
    {
        char big[SBX_MULTIPART_FILENAME_MAX + 256];
        struct files_sink s = {{0}, 0};
        int n = snprintf(big, sizeof(big),
                         "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"");
        memset(big + n, 'a', SBX_MULTIPART_FILENAME_MAX + 1);
        snprintf(big + n + SBX_MULTIPART_FILENAME_MAX + 1, 64, "\"\r\n\r\nx\r\n--b--\r\n");
        ok(parse_files(big, 4096, &s, msg) == -EINVAL && strstr(msg, "filename is too long"),
           "a filename past the bound is refused: %s", msg);
    }
}

/* Counts the data calls and checks the bytes against the content expected. */
struct run_sink {
    const char *want;
    size_t len, calls;
    bool same;
};

static int count_run(void *cls, const char *data, size_t len, struct sbx_error *err)
{
    struct run_sink *s = cls;

    (void)err;
    s->same = s->same && memcmp(s->want + s->len, data, len) == 0;
    s->len += len;
    s->calls++;
    return 0;
}

/* Content with a CR every 97 bytes and partial delimiters in it is handed on in runs as long as
 * the pieces it comes in, not cut at each CR: one call for a body in one piece, and at most two
 * a piece (the run, and a partial match carried over) in any other. */
static void runs(void)
{
    enum { N = 256 * 1024 };
    static const char head[] = "--XX\r\n" FILEPART;
    char *body = malloc(sizeof(head) + N + 16), *c, msg[256];
    size_t len;

    if (!body)
        return;
    c = body + strlen(strcpy(body, head));
    for (size_t i = 0; i < N; i++)
        c[i] = (char)('a' + i % 26);
    for (size_t i = 96; i < N; i += 97)
        c[i] = '\r';
    for (size_t i = 1000; i + 5 < N; i += 4096)
        memcpy(c + i, "\r\n--X", 5);
    len = (size_t)(c - body) + N;
    memcpy(body + len, "\r\n--XX--", 9);
    len += 9;
    size_t steps[] = {1000, 4096, 65536, len};
    for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++) {
        size_t step = steps[k];
        struct run_sink s = {c, 0, 0, true};
        size_t pieces = (len + step - 1) / step;
        int r = parse_with("XX", body, len, step, count_run, &s, NULL, msg);
        ok(r == 0 && s.same && s.len == N && s.calls <= (step == len ? 1 : 2 * pieces),
           "content in pieces of %zu: %zu bytes in %zu calls (%zu pieces): %d %s", step, s.len,
           s.calls, pieces, r, msg);
    }
    free(body);
}

int main(void)
{
    runs();
    several_files();
    forms();
    not_whole();
    limits();
    boundaries();
    return done_testing();
}
