/* The h2c bridge's reader of HTTP/1.1 responses (h2c_resp.h) on what libmicrohttpd writes: each
 * framing, an interim head, HEAD, and the refusals; fed byte by byte as well as whole. */
#include <errno.h>
#include <string.h>

#include "h2c_resp.h"
#include "tap.h"

static struct sbx_h2c_resp p;

/* Feeds s in pieces of `piece` bytes to its end (or the reader's); the body into body. */
static int feed(const char *s, size_t piece, bool no_body, char *body, size_t *body_len)
{
    size_t len = strlen(s), off = 0;

    sbx_h2c_resp_init(&p, no_body);
    *body_len = 0;
    while (off < len && p.state != SBX_H2C_RESP_DONE) {
        size_t n = len - off < piece ? len - off : piece, got;
        ssize_t r = sbx_h2c_resp_feed(&p, s + off, n, body + *body_len, &got);
        if (r < 0)
            return (int)r;
        *body_len += got;
        off += (size_t)r;
    }
    return sbx_h2c_resp_eof(&p);
}

static bool body_is(const char *s, size_t piece, const char *want)
{
    char body[256];
    size_t n;

    return feed(s, piece, false, body, &n) == 0 && n == strlen(want) && !memcmp(body, want, n);
}

static void framings(void)
{
    const char *cl = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A:  v \r\n\r\nhelloEXTRA";
    const char *ch = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "5\r\nhello\r\n1;x=y\r\n!\r\n0\r\nX-Trailer: 1\r\n\r\n";
    const char *eof = "HTTP/1.0 200 OK\r\n\r\nto the end";

    for (size_t piece = 1; piece <= 64; piece *= 4) {
        ok(body_is(cl, piece, "hello"), "Content-Length, pieces of %zu", piece);
        ok(body_is(ch, piece, "hello!"), "chunked with an extension and a trailer, %zu", piece);
        ok(body_is(eof, piece, "to the end"), "delimited by the end, %zu", piece);
    }
    ok(body_is(cl, 1000, "hello") && p.status == 200 && p.n_fields == 2 &&
           p.fields[1].value_len == 1 && p.fields[1].value[0] == 'v',
       "status and fields, the value trimmed");
}

static void heads(void)
{
    char body[256];
    size_t n;

    ok(body_is("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok",
               3, "ok") &&
           p.status == 201,
       "an interim head is skipped");
    ok(feed("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", 7, true, body, &n) == 0 && n == 0,
       "HEAD: the head is all");
    ok(body_is("HTTP/1.1 204 No Content\r\n\r\n", 5, ""), "204 has no body");
    ok(feed("HTTP/1.1 101 Switching\r\n\r\n", 100, false, body, &n) == -EPROTO, "no upgrade");
}

static void refusals(void)
{
    static const char *const bad[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-A: 1\r\n 2\r\n\r\n",
        "HTTP/1.1 200 OK\nContent-Length: 0\n\n",
        "HTTP/2 200\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\ncut",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
    };
    char body[256], big[SBX_H2C_RESP_HEAD_MAX + 64];
    size_t n;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ok(feed(bad[i], 4, false, body, &n) == -EPROTO, "malformed response %zu refused", i);
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    memcpy(big, "HTTP/1.1 200 OK\r\nX: ", 20);
    ok(feed(big, 4096, false, body, &n) == -E2BIG, "a head past 16 KiB");
}

static void hop_by_hop(void)
{
    ok(sbx_h2c_hop_by_hop("Transfer-Encoding", 17) && sbx_h2c_hop_by_hop("connection", 10) &&
           sbx_h2c_hop_by_hop("TE", 2),
       "hop-by-hop fields");
    ok(!sbx_h2c_hop_by_hop("content-length", 14) && !sbx_h2c_hop_by_hop("t", 1),
       "end-to-end fields");
}

int main(void)
{
    framings();
    heads();
    refusals();
    hop_by_hop();
    return done_testing();
}
