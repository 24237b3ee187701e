/* libFuzzer target for the h2c bridge's reader of HTTP/1.1 responses (h2c_resp.c): any bytes, as
 * libmicrohttpd would write them on a stream's socketpair. The first byte says whether the request
 * was HEAD and the size of the pieces the rest is fed in.
 *
 * Fed whole and fed in pieces, the reader gives the same verdict and head, and the same body
 * when it accepts the response. What it accepts is what HTTP/2 may carry: a final status of 200
 * to 999, field names that are tokens, values without CR, LF or NUL, a body no longer than what
 * was read and, framed by Content-Length, exactly that long. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz_check.h"
#include "h2c_resp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct outcome {
    int verdict; /* 0, or the -errno of the feed or of the end */
    bool head;
    unsigned status;
    size_t n_fields;
    enum sbx_h2c_resp_state state;
    char *fields; /* "name: value\n" of each, as parsed */
    size_t fields_len;
    char *body;
    size_t body_len;
};

static void keep_head(struct outcome *o, const struct sbx_h2c_resp *p)
{
    o->head = true;
    o->status = p->status;
    o->n_fields = p->n_fields;
    o->fields = malloc(SBX_H2C_RESP_HEAD_MAX * 2);
    CHECK(o->fields, "malloc");
    for (size_t i = 0; i < p->n_fields; i++) {
        const struct sbx_h2c_resp_field *f = &p->fields[i];
        memcpy(o->fields + o->fields_len, f->name, f->name_len);
        o->fields_len += f->name_len;
        o->fields[o->fields_len++] = ':';
        memcpy(o->fields + o->fields_len, f->value, f->value_len);
        o->fields_len += f->value_len;
        o->fields[o->fields_len++] = '\n';
    }
}

static bool is_token(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
                    "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
                    s[i]) ||
            !s[i])
            return false;
    return n > 0;
}

static void check_head(const struct sbx_h2c_resp *p)
{
    CHECK(p->status >= 200 && p->status <= 999, "final status %u", p->status);
    for (size_t i = 0; i < p->n_fields; i++) {
        const struct sbx_h2c_resp_field *f = &p->fields[i];
        CHECK(is_token(f->name, f->name_len), "field name not a token");
        CHECK(!memchr(f->value, '\r', f->value_len) && !memchr(f->value, '\n', f->value_len) &&
                  !memchr(f->value, '\0', f->value_len),
              "field value with CR, LF or NUL");
    }
}

/* Content-Length of an accepted head, or -1. */
static int64_t content_length(const struct sbx_h2c_resp *p)
{
    for (size_t i = 0; i < p->n_fields; i++) {
        const struct sbx_h2c_resp_field *f = &p->fields[i];
        if (f->name_len == 14 && strncasecmp(f->name, "content-length", 14) == 0)
            return strtoll(strndupa(f->value, f->value_len), NULL, 10);
    }
    return -1;
}

static void run(const char *in, size_t len, size_t piece, bool no_body, struct outcome *o)
{
    struct sbx_h2c_resp *p = malloc(sizeof(*p));
    size_t off = 0;

    CHECK(p, "malloc");
    memset(o, 0, sizeof(*o));
    o->body = malloc(len + 1);
    CHECK(o->body, "malloc");
    sbx_h2c_resp_init(p, no_body);
    while (off < len && p->state != SBX_H2C_RESP_DONE) {
        size_t n = len - off < piece ? len - off : piece, got = 0;
        ssize_t r = sbx_h2c_resp_feed(p, in + off, n, o->body + o->body_len, &got);
        if (r < 0) {
            CHECK(r == -EPROTO || r == -E2BIG, "feed gave %zd", r);
            o->verdict = (int)r;
            break;
        }
        CHECK((size_t)r <= n && got <= (size_t)r, "read %zd of %zu, %zu out", r, n, got);
        o->body_len += got;
        off += (size_t)r;
        if (p->head_done && !o->head) {
            check_head(p);
            keep_head(o, p);
        }
        CHECK(r > 0 || p->state == SBX_H2C_RESP_DONE, "no progress");
    }
    if (!o->verdict)
        o->verdict = sbx_h2c_resp_eof(p);
    o->state = p->state;
    if (o->head && !o->verdict && content_length(p) >= 0 && !no_body && p->status != 204 &&
        p->status != 304)
        CHECK((int64_t)o->body_len == content_length(p), "body of %zu, Content-Length %" PRId64,
              o->body_len, content_length(p));
    free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct outcome whole, pieces;
    bool no_body;
    size_t piece;

    if (size < 1)
        return 0;
    no_body = data[0] & 1;
    piece = (size_t)(data[0] >> 1) + 1;
    run((const char *)data + 1, size - 1, size, no_body, &whole);
    run((const char *)data + 1, size - 1, piece, no_body, &pieces);
    CHECK(whole.verdict == pieces.verdict, "verdict %d whole, %d in pieces", whole.verdict,
          pieces.verdict);
    CHECK(whole.head == pieces.head && whole.status == pieces.status &&
              whole.fields_len == pieces.fields_len &&
              (!whole.fields_len || memcmp(whole.fields, pieces.fields, whole.fields_len) == 0),
          "heads differ");
    /* What a refused response gave before its refusal depends on where the pieces were cut. */
    CHECK(whole.verdict ||
              (whole.body_len == pieces.body_len &&
               (!whole.body_len || memcmp(whole.body, pieces.body, whole.body_len) == 0)),
          "bodies differ");
    CHECK(whole.state == pieces.state, "states differ");
    free(whole.fields);
    free(pieces.fields);
    free(whole.body);
    free(pieces.body);
    return 0;
}
