/* ws_frame: the handshake key, and client frames parsed into messages, case by case
 * (RFC 6455 §1.3, §5, §7). */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "ws_frame.h"

#define MAX_MSG 1024

/* A masked client frame of op with payload in buf; returns its length. */
static size_t frame(uint8_t *buf, uint8_t b0, const void *payload, size_t len)
{
    static const uint8_t mask[4] = {0x37, 0xfa, 0x21, 0x3d};
    size_t n = 0;

    buf[n++] = b0;
    if (len < 126) {
        buf[n++] = (uint8_t)(0x80 | len);
    } else if (len <= 0xffff) {
        buf[n++] = 0x80 | 126;
        buf[n++] = (uint8_t)(len >> 8);
        buf[n++] = (uint8_t)len;
    } else {
        buf[n++] = 0x80 | 127;
        for (int k = 0; k < 8; k++)
            buf[n++] = (uint8_t)((uint64_t)len >> (56 - 8 * k));
    }
    memcpy(buf + n, mask, 4);
    n += 4;
    for (size_t i = 0; i < len; i++)
        buf[n + i] = ((const uint8_t *)payload)[i] ^ mask[i & 3];
    return n + len;
}

/* Feeds in whole (step 0) or step bytes at a time; returns the parser's last result and puts the
 * messages' ops and payloads in out (as "op:payload;" with the payload's bytes as they are). */
static int feed(const uint8_t *in, size_t n, size_t step, char *out, size_t size,
                struct sbx_ws_parser *p)
{
    size_t off = 0;
    int r = 0;

    out[0] = '\0';
    while (off < n && r >= 0) {
        size_t chunk = step && n - off > step ? step : n - off, used;
        struct sbx_ws_msg m;
        r = sbx_ws_parse(p, in + off, chunk, &used, &m);
        off += used;
        if (r == 1) {
            size_t l = strlen(out);
            snprintf(out + l, size - l, "%x:%.*s;", m.op, (int)m.len, (const char *)m.data);
        }
    }
    return r;
}

static void accept_key(void)
{
    char out[29];

    /* RFC 6455 §1.3's own example. */
    sbx_ws_accept("dGhlIHNhbXBsZSBub25jZQ==", out);
    ok(strcmp(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=") == 0, "accept key of the RFC's example: %s",
       out);
    ok(sbx_ws_key_valid("dGhlIHNhbXBsZSBub25jZQ=="), "the RFC's key is valid");
    ok(!sbx_ws_key_valid("dGhlIHNhbXBsZSBub25jZQ="), "23 characters refused");
    ok(!sbx_ws_key_valid("dGhlIHNhbXBsZSBub25jZR=="), "non-zero padding bits refused");
    ok(!sbx_ws_key_valid("dGhlIHNhbXBsZSBub2*jZQ=="), "a character outside base64 refused");
    ok(!sbx_ws_key_valid(NULL), "no key refused");
}

static void messages(void)
{
    /* RFC 6455 §5.7: a masked "Hello". */
    static const uint8_t hello[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d,
                                    0x7f, 0x9f, 0x4d, 0x51, 0x58};
    uint8_t buf[4096], big[70000];
    char out[256];
    struct sbx_ws_parser p;
    size_t n = 0;

    for (size_t step = 0; step <= 3; step++) {
        sbx_ws_parser_init(&p, MAX_MSG);
        ok(feed(hello, sizeof(hello), step, out, sizeof(out), &p) == 1 &&
               strcmp(out, "1:Hello;") == 0,
           "the RFC's masked Hello, %zu bytes at a time: %s", step, out);
        sbx_ws_parser_release(&p);
    }
    /* Fragments with a ping between them, then an empty binary message and a close. */
    n = frame(buf, 0x01, "Hel", 3);
    n += frame(buf + n, 0x89, "p", 1);
    n += frame(buf + n, 0x00, "l", 1);
    n += frame(buf + n, 0x80, "o", 1);
    n += frame(buf + n, 0x82, "", 0);
    n += frame(buf + n, 0x88, "\x03\xe8ok", 4);
    for (size_t step = 0; step <= 1; step++) {
        sbx_ws_parser_init(&p, MAX_MSG);
        feed(buf, n, step, out, sizeof(out), &p);
        ok(strcmp(out, "9:p;1:Hello;2:;8:\x03\xe8ok;") == 0, "fragments around a ping (step %zu)",
           step);
        sbx_ws_parser_release(&p);
    }
    /* 16-bit and 64-bit lengths. */
    memset(big, 'x', sizeof(big));
    sbx_ws_parser_init(&p, 100000);
    {
        static uint8_t fr[140000];
        size_t m = frame(fr, 0x82, big, 300), used;
        struct sbx_ws_msg msg;
        ok(sbx_ws_parse(&p, fr, m, &used, &msg) == 1 && msg.len == 300 && used == m,
           "16-bit length");
        m = frame(fr, 0x82, big, 70000);
        ok(sbx_ws_parse(&p, fr, m, &used, &msg) == 1 && msg.len == 70000 && msg.data[69999] == 'x',
           "64-bit length");
    }
    sbx_ws_parser_release(&p);
}

struct bad {
    const char *what;
    uint8_t b0;
    const char *payload;
    size_t len;
    uint16_t code;
};

static void refusals(void)
{
    static const struct bad bad[] = {
        {"reserved bit", 0xc1, "a", 1, SBX_WS_PROTOCOL_ERROR},
        {"unknown opcode", 0x83, "a", 1, SBX_WS_PROTOCOL_ERROR},
        {"fragmented ping", 0x09, "a", 1, SBX_WS_PROTOCOL_ERROR},
        {"continuation first", 0x80, "a", 1, SBX_WS_PROTOCOL_ERROR},
        {"text not UTF-8", 0x81, "\xc3\x28", 2, SBX_WS_INVALID_DATA},
        {"overlong UTF-8", 0x81, "\xc0\xaf", 2, SBX_WS_INVALID_DATA},
        {"close with one byte", 0x88, "\x03", 1, SBX_WS_PROTOCOL_ERROR},
        {"close code 1005", 0x88, "\x03\xed", 2, SBX_WS_PROTOCOL_ERROR},
        {"close code 999", 0x88, "\x03\xe7", 2, SBX_WS_PROTOCOL_ERROR},
        {"close reason not UTF-8", 0x88, "\x03\xe8\xff", 3, SBX_WS_INVALID_DATA},
    };
    uint8_t buf[300];
    char out[64], payload[200];
    struct sbx_ws_parser p;
    size_t n;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sbx_ws_parser_init(&p, MAX_MSG);
        n = frame(buf, bad[i].b0, bad[i].payload, bad[i].len);
        ok(feed(buf, n, 0, out, sizeof(out), &p) == -1 && p.close_code == bad[i].code && p.why,
           "%s: %u %s", bad[i].what, p.close_code, p.why ? p.why : "");
        sbx_ws_parser_release(&p);
    }
    memset(payload, 'a', sizeof(payload));
    sbx_ws_parser_init(&p, MAX_MSG);
    n = frame(buf, 0x89, payload, 126);
    ok(feed(buf, n, 0, out, sizeof(out), &p) == -1 && p.close_code == SBX_WS_PROTOCOL_ERROR,
       "ping of 126 bytes");
    sbx_ws_parser_release(&p);
    /* A new message while one is under way. */
    sbx_ws_parser_init(&p, MAX_MSG);
    n = frame(buf, 0x01, "a", 1);
    n += frame(buf + n, 0x81, "b", 1);
    ok(feed(buf, n, 0, out, sizeof(out), &p) == -1 && p.close_code == SBX_WS_PROTOCOL_ERROR,
       "text inside a fragmented text: %s", p.why ? p.why : "");
    sbx_ws_parser_release(&p);
    /* Unmasked. */
    sbx_ws_parser_init(&p, MAX_MSG);
    ok(feed((const uint8_t *)"\x81\x01"
                             "a",
            3, 0, out, sizeof(out), &p) == -1 &&
           p.close_code == SBX_WS_PROTOCOL_ERROR,
       "unmasked frame: %s", p.why ? p.why : "");
    sbx_ws_parser_release(&p);
    /* A length not in its shortest form. */
    sbx_ws_parser_init(&p, MAX_MSG);
    ok(feed((const uint8_t *)"\x82\xfe\x00\x05mask", 8, 0, out, sizeof(out), &p) == -1 &&
           p.close_code == SBX_WS_PROTOCOL_ERROR,
       "16-bit length of 5: %s", p.why ? p.why : "");
    sbx_ws_parser_release(&p);
    /* Too big, whole and in fragments: refused at the header, before any payload. */
    sbx_ws_parser_init(&p, 100);
    n = frame(buf, 0x82, payload, 101);
    ok(feed(buf, 14, 0, out, sizeof(out), &p) == -1 && p.close_code == SBX_WS_TOO_BIG,
       "101 bytes over a limit of 100, refused at the header");
    sbx_ws_parser_release(&p);
    sbx_ws_parser_init(&p, 100);
    n = frame(buf, 0x02, payload, 60);
    n += frame(buf + n, 0x80, payload, 60);
    ok(feed(buf, n, 0, out, sizeof(out), &p) == -1 && p.close_code == SBX_WS_TOO_BIG,
       "two fragments of 60 over a limit of 100");
    sbx_ws_parser_release(&p);
    /* A 64-bit length with its top bit set. */
    sbx_ws_parser_init(&p, MAX_MSG);
    ok(feed((const uint8_t *)"\x82\xff\x80\x00\x00\x00\x00\x00\x00\x00mask", 14, 0, out,
            sizeof(out), &p) == -1,
       "64-bit length with the top bit set");
    sbx_ws_parser_release(&p);
}

static void headers(void)
{
    uint8_t h[10];

    ok(sbx_ws_frame_header(h, SBX_WS_BINARY, 5) == 2 && h[0] == 0x82 && h[1] == 5, "short header");
    ok(sbx_ws_frame_header(h, SBX_WS_TEXT, 126) == 4 && h[1] == 126 && h[2] == 0 && h[3] == 126,
       "16-bit header");
    ok(sbx_ws_frame_header(h, SBX_WS_BINARY, 65536) == 10 && h[1] == 127 && h[7] == 1 && h[8] == 0,
       "64-bit header");
}

int main(void)
{
    accept_key();
    messages();
    refusals();
    headers();
    return done_testing();
}
