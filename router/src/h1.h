/* HTTP/1.1 messages as the proxy relays them: a head split into its lines, and the framing of
 * the body that follows it (RFC 9112 §6), tracked over bytes passed through unchanged. Knows no
 * socket: the proxy feeds it what it read. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http_head.h"

#define SBX_H1_MAX_FIELDS 128

struct sbx_h1_field {
    const char *name, *value; /* into the head's buffer, not NUL-terminated */
    size_t name_len, value_len;
};

struct sbx_h1_msg {
    const char *method, *target; /* a request's (not NUL-terminated) */
    size_t method_len, target_len;
    int status; /* a response's */
    int minor;  /* HTTP/1.minor */
    struct sbx_h1_field fields[SBX_H1_MAX_FIELDS];
    unsigned nfields;
};

/* A request head as sbx_http_head_end delimits it, held to sbx_http_head_check (a refusal fills
 * v), then split. */
bool sbx_h1_parse_request(const char *buf, size_t len, struct sbx_h1_msg *m,
                          struct sbx_http_verdict *v);

/* A response head from an upstream: "HTTP/1.x NNN reason", then field lines. False when it is
 * not one (the proxy answers 502). */
bool sbx_h1_parse_response(const char *buf, size_t len, struct sbx_h1_msg *m);

/* The first field of that name (case-insensitive), or NULL. */
const struct sbx_h1_field *sbx_h1_get(const struct sbx_h1_msg *m, const char *name);

/* Whether any field of that name lists token (comma-separated, case-insensitive). */
bool sbx_h1_has_token(const struct sbx_h1_msg *m, const char *name, const char *token);

/* Whether a field is hop-by-hop for this message: the RFC 9110 §7.6.1 list, and the names its
 * Connection fields list. */
bool sbx_h1_hop_by_hop(const struct sbx_h1_msg *m, const struct sbx_h1_field *f);

enum sbx_h1_body_kind {
    SBX_H1_BODY_NONE,    /* no body */
    SBX_H1_BODY_LENGTH,  /* Content-Length bytes */
    SBX_H1_BODY_CHUNKED, /* chunked coding, to its last chunk and trailers */
    SBX_H1_BODY_CLOSE,   /* until the connection closes (responses only) */
};

struct sbx_h1_body {
    enum sbx_h1_body_kind kind;
    uint64_t left;    /* bytes of the body, or of the current chunk */
    unsigned state;   /* the chunked decoder's */
    unsigned line;    /* bytes of the current size, extension or trailer line */
    unsigned digits;  /* hex digits of the current size */
    unsigned trailer; /* bytes of trailers so far */
    bool decode;      /* hand out the data alone (for an HTTP/1.0 client) */
};

/* The framing of a request's body; -EINVAL for a Content-Length that is not one number. */
int sbx_h1_request_body(const struct sbx_h1_msg *m, struct sbx_h1_body *b);

/* The framing of a response's body: none for HEAD, 1xx, 204 and 304. */
int sbx_h1_response_body(const struct sbx_h1_msg *m, bool head_request, struct sbx_h1_body *b);

/* Takes the body's bytes from buf[0, len): returns how many belong to it (the rest begin the
 * next message), or -EBADMSG for a malformed chunked coding. *done is set once it is whole. With
 * decode, the data alone is moved to the front of buf and *out says how much; otherwise *out is
 * the count taken. A CLOSE body is never done here: its end is the connection's. */
long sbx_h1_body_feed(struct sbx_h1_body *b, char *buf, size_t len, size_t *out, bool *done);
