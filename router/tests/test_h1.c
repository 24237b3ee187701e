/* h1: heads split, hop-by-hop fields found, and bodies framed as RFC 9112 frames them, whole
 * and a byte at a time. */
#include <errno.h>
#include <string.h>

#include "h1.h"
#include "tap.h"

/* Feeds s in pieces of step bytes: the count of body bytes taken (-1 on error), whether done,
 * and (decode) the data handed out in out. */
static long feed(struct sbx_h1_body *b, const char *s, size_t step, bool *done, char *out)
{
    char buf[512];
    size_t len = strlen(s), taken = 0, o = 0;

    *done = false;
    while (taken < len && !*done) {
        size_t n = len - taken < step ? len - taken : step, got;
        memcpy(buf, s + taken, n);
        long r = sbx_h1_body_feed(b, buf, n, &got, done);
        if (r < 0)
            return -1;
        if (out)
            memcpy(out + o, buf, got);
        o += got;
        taken += (size_t)r;
        if ((size_t)r < n && !*done)
            return -1; /* took less without ending: not how the decoder behaves */
    }
    if (out)
        out[o] = '\0';
    return (long)taken;
}

static void chunked_cases(void)
{
    static const struct {
        const char *in;
        long body; /* bytes of the body; -1: malformed */
        const char *data;
    } cases[] = {
        {"5\r\nhello\r\n0\r\n\r\n", 15, "hello"},
        {"5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1", 15, "hello"},
        {"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n", 34, "abcde"},
        {"A\r\n0123456789\r\n0\r\n\r\n", 20, "0123456789"},
        {"0\r\n\r\n", 5, ""},
        {"5\r\nhelloX\r\n0\r\n\r\n", -1, NULL},
        {"g\r\n", -1, NULL},
        {"\r\n", -1, NULL},
        {"1000000000000000\r\n", -1, NULL},
        {"5\nhello\r\n", -1, NULL},
        {"0\r\nX\x01Y: 1\r\n\r\n", -1, NULL},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        for (size_t step = 1; step <= 64; step *= 4)
            for (int decode = 0; decode < 2; decode++) {
                struct sbx_h1_body b = {.kind = SBX_H1_BODY_CHUNKED, .decode = decode};
                char out[128];
                bool done;
                long got = feed(&b, cases[i].in, step, &done, out);
                if (cases[i].body < 0) {
                    ok(got < 0, "chunked case %zu (step %zu) refused", i, step);
                    continue;
                }
                ok(got == cases[i].body && done, "chunked case %zu (step %zu, decode %d): %ld", i,
                   step, decode, got);
                if (decode)
                    ok(strcmp(out, cases[i].data) == 0, "chunked case %zu decodes to '%s'", i, out);
            }
}

static void length_and_heads(void)
{
    static const char req[] = "POST /a?b HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n"
                              "Connection: close, X-Drop\r\nX-Drop: 1\r\nKeep-Alive: 5\r\n"
                              "X-Keep:  v  \r\n\r\n";
    static const char resp[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    static const char two_lengths[] =
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
    struct sbx_http_verdict v = {0};
    struct sbx_h1_msg m;
    struct sbx_h1_body b;
    bool done;

    ok(sbx_h1_parse_request(req, sizeof(req) - 1, &m, &v), "request parsed");
    ok(m.method_len == 4 && m.target_len == 4 && m.minor == 1 && m.nfields == 6,
       "its line and six fields");
    ok(sbx_h1_has_token(&m, "Connection", "close"), "Connection lists close");
    ok(sbx_h1_hop_by_hop(&m, sbx_h1_get(&m, "X-Drop")), "a field Connection names is hop-by-hop");
    ok(sbx_h1_hop_by_hop(&m, sbx_h1_get(&m, "keep-alive")), "Keep-Alive is hop-by-hop");
    ok(!sbx_h1_hop_by_hop(&m, sbx_h1_get(&m, "X-Keep")), "others are end-to-end");
    ok(sbx_h1_get(&m, "X-Keep")->value_len == 1, "values lose surrounding whitespace");
    ok(sbx_h1_request_body(&m, &b) == 0 && b.kind == SBX_H1_BODY_LENGTH && b.left == 4,
       "Content-Length frames the body");
    ok(feed(&b, "abcdefg", 3, &done, NULL) == 4 && done, "four bytes are the body");

    ok(!sbx_h1_parse_request("GET / HTTP/1.1\r\n\r\n", 18, &m, &v) && v.status == 400,
       "no Host: 400");
    ok(sbx_h1_parse_response(resp, sizeof(resp) - 1, &m) && m.status == 200, "response parsed");
    ok(sbx_h1_response_body(&m, false, &b) == 0 && b.kind == SBX_H1_BODY_CHUNKED,
       "chunked response");
    ok(sbx_h1_response_body(&m, true, &b) == 0 && b.kind == SBX_H1_BODY_NONE, "no body for HEAD");
    ok(sbx_h1_parse_response("HTTP/1.0 204\r\n\r\n", 16, &m) &&
           sbx_h1_response_body(&m, false, &b) == 0 && b.kind == SBX_H1_BODY_NONE,
       "no body for 204 (and no reason phrase)");
    ok(sbx_h1_parse_response("HTTP/1.1 200 OK\r\n\r\n", 19, &m) &&
           sbx_h1_response_body(&m, false, &b) == 0 && b.kind == SBX_H1_BODY_CLOSE,
       "neither length nor chunked: until the close");
    ok(!sbx_h1_parse_response(two_lengths, sizeof(two_lengths) - 1, &m) ||
           sbx_h1_response_body(&m, false, &b) == -EINVAL,
       "two different lengths refused");
    ok(!sbx_h1_parse_response("HTTP/2 200\r\n\r\n", 14, &m), "not HTTP/1.x refused");
    ok(!sbx_h1_parse_response("HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", 32, &m),
       "a field name with a space refused");
}

int main(void)
{
    chunked_cases();
    length_and_heads();
    return done_testing();
}
