/* WebSocket framing (RFC 6455), the server's side: the handshake's accept key, a parser that
 * turns a client's bytes into whole messages and control frames, and the header of a frame we
 * send. Knows no socket and no server: the fuzz target feeds it bytes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum sbx_ws_op {
    SBX_WS_CONT = 0x0,
    SBX_WS_TEXT = 0x1,
    SBX_WS_BINARY = 0x2,
    SBX_WS_CLOSE = 0x8,
    SBX_WS_PING = 0x9,
    SBX_WS_PONG = 0xa,
};

/* Close codes we send (RFC 6455 §7.4.1). */
enum {
    SBX_WS_NORMAL = 1000,
    SBX_WS_GOING_AWAY = 1001,
    SBX_WS_PROTOCOL_ERROR = 1002,
    SBX_WS_INVALID_DATA = 1007,
    SBX_WS_POLICY = 1008,
    SBX_WS_TOO_BIG = 1009,
    SBX_WS_INTERNAL = 1011,
};

#define SBX_WS_CONTROL_MAX 125

/* A whole message (text or binary, its fragments joined) or one control frame. */
struct sbx_ws_msg {
    uint8_t op;
    const uint8_t *data; /* valid until the next call of the parser */
    size_t len;
};

struct sbx_ws_parser {
    size_t max_msg; /* a message longer, all fragments together: SBX_WS_TOO_BIG */
    /* the frame being read */
    uint8_t hdr[14];
    size_t hdr_len;
    bool in_payload; /* the header is read; its payload is being read */
    bool fin;
    uint8_t op;
    uint8_t mask[4];
    uint64_t len, got;
    /* the message its data frames build (op 0: none under way) */
    uint8_t msg_op;
    uint8_t *msg;
    size_t msg_len, msg_cap;
    /* a control frame's payload */
    uint8_t ctl[SBX_WS_CONTROL_MAX + 1];
    /* why the connection must fail, once the parser returned -1 */
    uint16_t close_code;
    const char *why;
};

void sbx_ws_parser_init(struct sbx_ws_parser *p, size_t max_msg);
void sbx_ws_parser_release(struct sbx_ws_parser *p);

/* Consumes in up to the end of the next whole message or control frame. Returns 1 with *msg set,
 * 0 when all of in was consumed without completing one, or -1 when the client broke the
 * protocol (p->close_code and p->why say how; the connection must be failed). *used: the bytes
 * of in consumed. Text messages and a close frame's reason are checked as UTF-8; a close frame's
 * code is checked. */
int sbx_ws_parse(struct sbx_ws_parser *p, const uint8_t *in, size_t n, size_t *used,
                 struct sbx_ws_msg *msg);

/* Writes the header of an unmasked final frame of op carrying len bytes; returns its length
 * (2 to 10). */
size_t sbx_ws_frame_header(uint8_t out[10], uint8_t op, uint64_t len);

/* Whether a Sec-WebSocket-Key is what a client must send: 16 bytes in base64. */
bool sbx_ws_key_valid(const char *key);

/* The Sec-WebSocket-Accept answering key: base64(SHA-1(key GUID)), NUL-terminated. */
void sbx_ws_accept(const char *key, char out[29]);

/* Whether len bytes at s are UTF-8 as sbx_utf8_char defines it (NUL bytes allowed). s[len] must
 * be readable (a NUL the caller put there). */
bool sbx_ws_utf8_valid(const uint8_t *s, size_t len);
