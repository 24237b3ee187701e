/* Request heads held to RFC 9112: the request line, field syntax, and the fields that decide a
 * message's framing (Host, Content-Length, Transfer-Encoding). Knows nothing of libmicrohttpd:
 * the gate feeds it a connection's first head as raw bytes, the server feeds it the fields
 * libmicrohttpd parsed of every later one, and both get the same verdict. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* What a refusal answers (status 0: accepted). Every refusal closes the connection: once a
 * head is malformed, nothing after it on the connection can be trusted to be framed right. */
struct sbx_http_verdict {
    unsigned status;
    const char *code;
    const char *message;
};

/* What the framing fields of one head said, field by field. */
struct sbx_http_fields {
    unsigned host;              /* Host field lines */
    unsigned content_length;    /* Content-Length field lines */
    unsigned transfer_encoding; /* Transfer-Encoding field lines */
    bool host_invalid;
    bool content_length_invalid;
    bool transfer_encoding_unknown; /* anything but "chunked" */
    const char *bad_value;          /* why a field value was refused (NUL, CR, LF, a control) */
};

/* Counts one field line; name and value as received (value without surrounding whitespace). */
void sbx_http_fields_add(struct sbx_http_fields *f, const char *name, size_t name_len,
                         const char *value, size_t value_len);

/* The verdict on a head's fields for HTTP/1.minor; false when refused. */
bool sbx_http_fields_check(const struct sbx_http_fields *f, int minor, struct sbx_http_verdict *v);

/* Where the head at buf ends: the length up to and including its empty line, or 0 while it is
 * incomplete. A head of lines ended by a bare LF also ends (the check then refuses it). */
size_t sbx_http_head_end(const char *buf, size_t len);

/* What the gate needs of a head it accepted. */
struct sbx_http_head {
    bool head_method; /* HEAD: a refusal carries no body */
    bool get_method;
    bool probe; /* the target is an open health route (GET or HEAD of it) */
    int minor;  /* HTTP/1.minor */
};

/* Checks a complete head (buf, len as sbx_http_head_end gave) strictly: one request line,
 * method a token, the target in origin, absolute or (for OPTIONS) asterisk form with valid
 * percent-escapes and no controls, HTTP/1.0 or 1.1 (505 for other versions), lines ended by
 * CRLF, field names tokens directly followed by the colon, no folded lines, values without
 * NUL/CR/LF/controls, then sbx_http_fields_check. Leading empty lines are skipped, as RFC 9112
 * §2.2 allows. is_probe tells which paths are health routes. */
bool sbx_http_head_check(const char *buf, size_t len,
                         bool (*is_probe)(const char *path, size_t len), struct sbx_http_head *h,
                         struct sbx_http_verdict *v);

/* The path of a request target in absolute form ("http://host/p?q" -> "/p?q"; "http://host" ->
 * ""), or target itself in origin form. */
const char *sbx_http_target_path(const char *target);

/* Whether s (len bytes) holds only valid percent-escapes ('%' and two hex digits). */
bool sbx_http_escapes_valid(const char *s, size_t len);
