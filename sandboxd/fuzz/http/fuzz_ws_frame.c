/* libFuzzer target for the WebSocket frame parser (ws_frame.c): a client's bytes, as they might
 * arrive. Input: one byte choosing a chunk size (1 to 256), then the stream.
 *
 * The stream is parsed twice, whole and cut into chunks of that size; both must deliver the same
 * messages and control frames and fail the same way at the same place (a parser whose result
 * depends on how TCP cut its input loses or invents messages). Every message keeps the limits:
 * data within max_msg, control frames within 125 bytes, text and close reasons UTF-8, a close
 * code in the ranges RFC 6455 allows. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "ws_frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_MSG    4096
#define MAX_EVENTS 512

struct run {
    size_t n;
    uint8_t op[MAX_EVENTS];
    size_t len[MAX_EVENTS];
    uint64_t digest[MAX_EVENTS];
    int failed;
    uint16_t code;
    size_t consumed;
};

static uint64_t digest(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;

    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void check_msg(const struct sbx_ws_msg *m)
{
    if (m->op & 0x8) {
        CHECK(m->len <= SBX_WS_CONTROL_MAX, "control frame of %zu bytes", m->len);
        if (m->op == SBX_WS_CLOSE && m->len >= 2) {
            unsigned code = (unsigned)m->data[0] << 8 | m->data[1];
            CHECK((code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
                      (code >= 3000 && code <= 4999),
                  "close code %u delivered", code);
        }
        CHECK(m->op == SBX_WS_CLOSE || m->op == SBX_WS_PING || m->op == SBX_WS_PONG, "op %u",
              m->op);
    } else {
        CHECK(m->op == SBX_WS_TEXT || m->op == SBX_WS_BINARY, "message op %u", m->op);
        CHECK(m->len <= MAX_MSG, "message of %zu bytes over %d", m->len, MAX_MSG);
        if (m->op == SBX_WS_TEXT)
            CHECK(sbx_ws_utf8_valid(m->data, m->len), "text message not UTF-8");
    }
}

static void parse(const uint8_t *in, size_t size, size_t chunk, struct run *r)
{
    struct sbx_ws_parser p;
    size_t off = 0;

    memset(r, 0, sizeof(*r));
    sbx_ws_parser_init(&p, MAX_MSG);
    while (off < size && !r->failed) {
        size_t n = size - off < chunk ? size - off : chunk, used;
        struct sbx_ws_msg m;
        int ret = sbx_ws_parse(&p, in + off, n, &used, &m);
        CHECK(used <= n, "used %zu of %zu", used, n);
        CHECK(ret == 1 || used == n || ret < 0, "returned %d having used %zu of %zu", ret, used, n);
        off += used;
        if (ret < 0) {
            CHECK(p.close_code >= 1000 && p.why && *p.why, "failure without a code or reason");
            r->failed = 1;
            r->code = p.close_code;
        } else if (ret == 1 && r->n < MAX_EVENTS) {
            check_msg(&m);
            r->op[r->n] = m.op;
            r->len[r->n] = m.len;
            r->digest[r->n] = digest(m.data, m.len);
            r->n++;
        } else if (ret == 1) {
            break; /* enough seen */
        }
    }
    r->consumed = off;
    sbx_ws_parser_release(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct run whole, cut;

    if (size < 1)
        return 0;
    parse(data + 1, size - 1, SIZE_MAX, &whole);
    parse(data + 1, size - 1, (size_t)data[0] + 1, &cut);
    if (whole.n == MAX_EVENTS || cut.n == MAX_EVENTS)
        return 0;
    CHECK(whole.n == cut.n, "%zu messages whole, %zu cut in %u", whole.n, cut.n, data[0] + 1);
    for (size_t i = 0; i < whole.n; i++)
        CHECK(whole.op[i] == cut.op[i] && whole.len[i] == cut.len[i] &&
                  whole.digest[i] == cut.digest[i],
              "message %zu differs when cut", i);
    CHECK(whole.failed == cut.failed && whole.code == cut.code, "failure %d/%u whole, %d/%u cut",
          whole.failed, whole.code, cut.failed, cut.code);
    CHECK(!whole.failed || whole.consumed == cut.consumed, "failed at %zu whole, %zu cut",
          whole.consumed, cut.consumed);
    return 0;
}
