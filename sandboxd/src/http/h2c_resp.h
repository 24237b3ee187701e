/* The h2c bridge's reader of the HTTP/1.1 responses libmicrohttpd writes (h2c.h): incremental,
 * bounded, and strict about framing, since what it lets through becomes HTTP/2 frames. A head is
 * at most SBX_H2C_RESP_HEAD_MAX bytes and SBX_H2C_RESP_FIELDS_MAX fields; a body is framed by
 * Content-Length, chunked coding or the connection's end; 1xx heads (100 Continue) are skipped.
 * Knows nothing of sockets or nghttp2: the fuzz target feeds it bytes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SBX_H2C_RESP_HEAD_MAX   16384
#define SBX_H2C_RESP_FIELDS_MAX 64
#define SBX_H2C_RESP_LINE_MAX   1024 /* a chunk-size or trailer line */

struct sbx_h2c_resp_field {
    const char *name, *value; /* in the parser's head buffer, not NUL-terminated */
    size_t name_len, value_len;
};

enum sbx_h2c_resp_state {
    SBX_H2C_RESP_HEAD,      /* reading the head */
    SBX_H2C_RESP_LENGTH,    /* a body of Content-Length bytes */
    SBX_H2C_RESP_CHUNK,     /* a chunk-size line */
    SBX_H2C_RESP_DATA,      /* a chunk's data */
    SBX_H2C_RESP_DATA_END,  /* the CRLF after a chunk's data */
    SBX_H2C_RESP_TRAILERS,  /* trailer lines after the last chunk (dropped) */
    SBX_H2C_RESP_UNTIL_EOF, /* a body delimited by the connection's end */
    SBX_H2C_RESP_DONE,
};

struct sbx_h2c_resp {
    enum sbx_h2c_resp_state state;
    bool no_body;   /* the request was HEAD: the head is all */
    bool head_done; /* the final head has been parsed (fields valid) */
    unsigned status;
    size_t n_fields;
    struct sbx_h2c_resp_field fields[SBX_H2C_RESP_FIELDS_MAX];
    uint64_t left;   /* of the body or of the chunk */
    size_t trailers; /* bytes of trailers so far */
    size_t head_len; /* bytes in head */
    size_t scanned;  /* of head, searched for its end */
    size_t line_len; /* bytes in line */
    unsigned crlf;   /* bytes of a chunk's closing CRLF seen */
    char line[SBX_H2C_RESP_LINE_MAX];
    char head[SBX_H2C_RESP_HEAD_MAX];
};

/* Starts reading a response; no_body: it answers a HEAD request. */
void sbx_h2c_resp_init(struct sbx_h2c_resp *p, bool no_body);

/* Reads up to len bytes of in. Body bytes go to out (never more than the bytes read, so out
 * needs room for len); *out_len says how many. Returns the bytes read, which is fewer than len
 * when the final head ended within them (the caller relays it before reading on) or the
 * response is done; -EPROTO for a malformed response, -E2BIG for a head or line too long. */
ssize_t sbx_h2c_resp_feed(struct sbx_h2c_resp *p, const char *in, size_t len, char *out,
                          size_t *out_len);

/* The connection ended: 0 if that ends the response (or it was done), -EPROTO if it was cut. */
int sbx_h2c_resp_eof(struct sbx_h2c_resp *p);

/* Whether a response field is one of HTTP/1.1's hop-by-hop ones, which HTTP/2 has no place for
 * (connection, keep-alive, proxy-connection, transfer-encoding, upgrade, te). */
bool sbx_h2c_hop_by_hop(const char *name, size_t len);
