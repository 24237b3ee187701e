#define _GNU_SOURCE
#include "ws_frame.h"

#include <stdlib.h>
#include <string.h>
/* SHA-1 itself, not the EVP layer (see hasher.c): deprecated in OpenSSL 3, still there. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/evp.h>
#include <openssl/sha.h>

#include "utf8.h"

void sbx_ws_parser_init(struct sbx_ws_parser *p, size_t max_msg)
{
    *p = (struct sbx_ws_parser){.max_msg = max_msg};
}

void sbx_ws_parser_release(struct sbx_ws_parser *p)
{
    free(p->msg);
    p->msg = NULL;
    p->msg_cap = 0;
}

static int fail(struct sbx_ws_parser *p, uint16_t code, const char *why)
{
    p->close_code = code;
    p->why = why;
    return -1;
}

/* The header's length once its first two bytes are known (client frames carry a mask). */
static size_t header_need(const struct sbx_ws_parser *p)
{
    uint8_t l;

    if (p->hdr_len < 2)
        return 2;
    l = p->hdr[1] & 0x7f;
    return 2 + (l == 126 ? 2 : l == 127 ? 8 : 0) + 4;
}

static bool is_control(uint8_t op)
{
    return op & 0x8;
}

/* Room for len more bytes of the message under way, and its terminating NUL. */
static int reserve(struct sbx_ws_parser *p, uint64_t len)
{
    size_t need, cap;
    uint8_t *m;

    if (len > p->max_msg - p->msg_len)
        return fail(p, SBX_WS_TOO_BIG, "message too big");
    need = p->msg_len + (size_t)len + 1;
    if (need <= p->msg_cap)
        return 0;
    cap = p->msg_cap ? p->msg_cap : 256;
    while (cap < need)
        cap *= 2;
    if (cap > p->max_msg + 1)
        cap = p->max_msg + 1;
    m = realloc(p->msg, cap);
    if (!m)
        return fail(p, SBX_WS_INTERNAL, "out of memory");
    p->msg = m;
    p->msg_cap = cap;
    return 0;
}

/* What the first two bytes tell, judged before the rest of the header arrives. */
static int header_start(struct sbx_ws_parser *p)
{
    const uint8_t *h = p->hdr;

    p->fin = h[0] & 0x80;
    p->op = h[0] & 0x0f;
    if (h[0] & 0x70)
        return fail(p, SBX_WS_PROTOCOL_ERROR, "reserved bits set");
    if (!(h[1] & 0x80))
        return fail(p, SBX_WS_PROTOCOL_ERROR, "client frame not masked");
    if ((p->op > SBX_WS_BINARY && p->op < SBX_WS_CLOSE) || p->op > SBX_WS_PONG)
        return fail(p, SBX_WS_PROTOCOL_ERROR, "unknown opcode");
    if (is_control(p->op) && !p->fin)
        return fail(p, SBX_WS_PROTOCOL_ERROR, "fragmented control frame");
    if (is_control(p->op) && (h[1] & 0x7f) > SBX_WS_CONTROL_MAX)
        return fail(p, SBX_WS_PROTOCOL_ERROR, "control frame longer than 125 bytes");
    return 0;
}

static int header_done(struct sbx_ws_parser *p)
{
    const uint8_t *h = p->hdr;
    uint64_t len = h[1] & 0x7f;
    size_t i = 2;

    if (len == 126) {
        len = (uint64_t)h[2] << 8 | h[3];
        i = 4;
        if (len < 126)
            return fail(p, SBX_WS_PROTOCOL_ERROR, "length not in its shortest form");
    } else if (len == 127) {
        len = 0;
        for (i = 2; i < 10; i++)
            len = len << 8 | h[i];
        if (len >> 63)
            return fail(p, SBX_WS_PROTOCOL_ERROR, "length out of range");
        if (len <= 0xffff)
            return fail(p, SBX_WS_PROTOCOL_ERROR, "length not in its shortest form");
    }
    memcpy(p->mask, h + i, 4);
    p->len = len;
    p->got = 0;
    switch (p->op) {
    case SBX_WS_CONT:
        if (!p->msg_op)
            return fail(p, SBX_WS_PROTOCOL_ERROR, "continuation frame without a message");
        return reserve(p, len);
    case SBX_WS_TEXT:
    case SBX_WS_BINARY:
        if (p->msg_op)
            return fail(p, SBX_WS_PROTOCOL_ERROR, "new message before the last one ended");
        p->msg_op = p->op;
        p->msg_len = 0;
        return reserve(p, len);
    default: /* a control frame: header_start judged it */
        return 0;
    }
}

static bool close_code_valid(unsigned code)
{
    return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
           (code >= 3000 && code <= 4999);
}

bool sbx_ws_utf8_valid(const uint8_t *s, size_t len)
{
    size_t i = 0;

    while (i < len) {
        size_t k = s[i] ? sbx_utf8_char(s + i) : 1;
        if (k == 0 || k > len - i)
            return false;
        i += k;
    }
    return true;
}

/* The frame read whole: 1 with *msg set when it ends a message or is a control frame. */
static int frame_done(struct sbx_ws_parser *p, struct sbx_ws_msg *msg)
{
    p->hdr_len = 0;
    if (is_control(p->op)) {
        p->ctl[p->len] = '\0';
        if (p->op == SBX_WS_CLOSE && p->len == 1)
            return fail(p, SBX_WS_PROTOCOL_ERROR, "close frame with a one-byte payload");
        if (p->op == SBX_WS_CLOSE && p->len >= 2) {
            if (!close_code_valid((unsigned)p->ctl[0] << 8 | p->ctl[1]))
                return fail(p, SBX_WS_PROTOCOL_ERROR, "invalid close code");
            if (!sbx_ws_utf8_valid(p->ctl + 2, (size_t)p->len - 2))
                return fail(p, SBX_WS_INVALID_DATA, "close reason is not UTF-8");
        }
        *msg = (struct sbx_ws_msg){.op = p->op, .data = p->ctl, .len = (size_t)p->len};
        return 1;
    }
    p->msg_len += (size_t)p->len;
    if (!p->fin)
        return 0;
    p->msg[p->msg_len] = '\0';
    if (p->msg_op == SBX_WS_TEXT && !sbx_ws_utf8_valid(p->msg, p->msg_len))
        return fail(p, SBX_WS_INVALID_DATA, "text message is not UTF-8");
    *msg = (struct sbx_ws_msg){.op = p->msg_op, .data = p->msg, .len = p->msg_len};
    p->msg_op = 0;
    return 1;
}

int sbx_ws_parse(struct sbx_ws_parser *p, const uint8_t *in, size_t n, size_t *used,
                 struct sbx_ws_msg *msg)
{
    size_t i = 0;
    int r = 0;

    while (r == 0) {
        uint8_t *dst;
        if (!p->in_payload) {
            size_t need = header_need(p);
            while (p->hdr_len < need && i < n) {
                p->hdr[p->hdr_len++] = in[i++];
                if (p->hdr_len == 2 && header_start(p) < 0) {
                    *used = i;
                    return -1;
                }
                need = header_need(p);
            }
            if (p->hdr_len < need)
                break;
            if (header_done(p) < 0) {
                r = -1;
                break;
            }
            p->in_payload = true;
        }
        dst = is_control(p->op) ? p->ctl : p->msg + p->msg_len;
        while (p->got < p->len && i < n) {
            dst[p->got] = in[i++] ^ p->mask[p->got & 3];
            p->got++;
        }
        if (p->got < p->len)
            break;
        p->in_payload = false;
        r = frame_done(p, msg);
    }
    *used = i;
    return r;
}

size_t sbx_ws_frame_header(uint8_t out[10], uint8_t op, uint64_t len)
{
    out[0] = (uint8_t)(0x80 | op);
    if (len < 126) {
        out[1] = (uint8_t)len;
        return 2;
    }
    if (len <= 0xffff) {
        out[1] = 126;
        out[2] = (uint8_t)(len >> 8);
        out[3] = (uint8_t)len;
        return 4;
    }
    out[1] = 127;
    for (int k = 0; k < 8; k++)
        out[2 + k] = (uint8_t)(len >> (56 - 8 * k));
    return 10;
}

bool sbx_ws_key_valid(const char *key)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    if (!key || strlen(key) != 24 || strcmp(key + 22, "==") != 0)
        return false;
    for (int i = 0; i < 21; i++)
        if (!key[i] || !strchr(b64, key[i]))
            return false;
    /* The last character before the padding carries two bits of the 16th byte and four zeros. */
    return key[21] && strchr("AQgw", key[21]);
}

void sbx_ws_accept(const char *key, char out[29])
{
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    unsigned char md[SHA_DIGEST_LENGTH];
    SHA_CTX c;

    SHA1_Init(&c);
    SHA1_Update(&c, key, strlen(key));
    SHA1_Update(&c, guid, sizeof(guid) - 1);
    SHA1_Final(md, &c);
    EVP_EncodeBlock((unsigned char *)out, md, SHA_DIGEST_LENGTH);
}
