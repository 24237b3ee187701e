/* libFuzzer target for the proxy's framing of HTTP/1.1 (h1.c): what a client or an upstream
 * sends, any bytes. Input: a flags byte (bit 0: a response head, else a request head; bit 1:
 * decode chunked data), then the message.
 *
 * The head is cut where sbx_http_head_end says it ends and parsed; whatever it says of the body's
 * framing, the rest is fed whole and again in pieces of every size from 1 to 7, and both must
 * agree: the same bytes taken (or both refused), the same end, the same data handed out; a chunked
 * body that ends is held to the grammar (hex size, CRLF after data, a last chunk) by a decoder
 * written out here independently. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "h1.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct run {
    long taken; /* -1: refused */
    bool done;
    size_t out;
    char *data;
};

static struct run feed(const struct sbx_h1_body *start, const char *s, size_t len, size_t step)
{
    struct sbx_h1_body b = *start;
    struct run r = {.data = malloc(len + 1)};
    char *buf = malloc(step ? step : 1);
    size_t at = 0;

    CHECK(r.data && buf, "malloc");
    while (at < len && !r.done) {
        size_t n = len - at < step ? len - at : step, got;
        memcpy(buf, s + at, n);
        long t = sbx_h1_body_feed(&b, buf, n, &got, &r.done);
        if (t < 0) {
            r.taken = -1;
            break;
        }
        CHECK((size_t)t <= n && got <= (size_t)t, "took %ld of %zu, gave %zu", t, n, got);
        CHECK((size_t)t == n || r.done, "took %ld of %zu without ending", t, n);
        memcpy(r.data + r.out, buf, got);
        r.out += got;
        at += (size_t)t;
        r.taken = (long)at;
    }
    free(buf);
    return r;
}

/* The chunked grammar, plainly: the data of a whole coding at s, or -1. */
static long plain_chunked(const char *s, size_t len, char *out, size_t *olen)
{
    size_t i = 0;

    *olen = 0;
    for (;;) {
        unsigned long long n = 0;
        size_t digits = 0;
        while (i < len && strchr("0123456789abcdefABCDEF", s[i]) && s[i]) {
            n = n * 16 + (unsigned long long)(s[i] <= '9' ? s[i] - '0' : (s[i] | 0x20) - 'a' + 10);
            i++;
            digits++;
        }
        if (digits == 0)
            return -1;
        while (i < len && s[i] != '\r')
            i++;
        if (i + 1 >= len || s[i + 1] != '\n')
            return -1;
        i += 2;
        if (n == 0)
            break;
        if (len - i < n + 2 || s[i + n] != '\r' || s[i + n + 1] != '\n')
            return -1;
        memcpy(out + *olen, s + i, n);
        *olen += n;
        i += n + 2;
    }
    for (;;) { /* trailer lines, then the empty one */
        const char *cr = i < len ? memchr(s + i, '\r', len - i) : NULL;
        if (!cr || (size_t)(cr - s) + 1 >= len || cr[1] != '\n')
            return -1;
        if (cr == s + i)
            return (long)(i + 2);
        i = (size_t)(cr - s) + 2;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data + 1;
    struct sbx_http_verdict v;
    struct sbx_h1_msg *m;
    struct sbx_h1_body b;
    size_t len, end;

    if (size < 1)
        return 0;
    len = size - 1;
    if (!(end = sbx_http_head_end(s, len)) || !(m = malloc(sizeof(*m))))
        return 0;
    if (data[0] & 1) {
        if (!sbx_h1_parse_response(s, end, m) || sbx_h1_response_body(m, false, &b) < 0) {
            free(m);
            return 0;
        }
    } else if (!sbx_h1_parse_request(s, end, m, &v) || sbx_h1_request_body(m, &b) < 0) {
        CHECK(v.status >= 400 || sbx_h1_request_body(m, &b) < 0, "refused without a status");
        free(m);
        return 0;
    }
    free(m);
    b.decode = b.kind == SBX_H1_BODY_CHUNKED && (data[0] & 2);
    struct run whole = feed(&b, s + end, len - end, len - end + 1);
    for (size_t step = 1; step <= 7; step++) {
        struct run r = feed(&b, s + end, len - end, step);
        CHECK(r.taken == whole.taken &&
                  (r.taken < 0 || (r.done == whole.done && r.out == whole.out &&
                                   memcmp(r.data, whole.data, r.out) == 0)),
              "step %zu disagrees with the whole", step);
        free(r.data);
    }
    if (b.kind == SBX_H1_BODY_CHUNKED && whole.done) {
        char *out = malloc(len + 1);
        size_t olen;
        CHECK(out, "malloc");
        long plain = plain_chunked(s + end, (size_t)whole.taken, out, &olen);
        CHECK(plain == whole.taken, "the grammar says %ld, the decoder took %ld", plain,
              whole.taken);
        if (b.decode)
            CHECK(olen == whole.out && memcmp(out, whole.data, olen) == 0, "data differs");
        free(out);
    }
    free(whole.data);
    return 0;
}
