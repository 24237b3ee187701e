/* The Connect protocol's framing (connectrpc.com/docs/protocol), without the wire: what E2B's
 * SDKs speak to envd, which sandboxd serves on its E2B port. Envelopes (a flags byte and a
 * 4-byte big-endian length before each message of a stream), the end-of-stream message and the
 * unary error body (JSON written here), the error codes and their HTTP statuses, the content
 * types (unary or streaming, JSON or binary protobuf) and the timeout header. The adapter on
 * libmicrohttpd hands bytes and header values in and writes out what it gets back. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* The error codes, numbered as gRPC's (0 is success, which has no name on the wire). */
enum sbx_connect_code {
    SBX_CONNECT_OK = 0,
    SBX_CONNECT_CANCELED,
    SBX_CONNECT_UNKNOWN,
    SBX_CONNECT_INVALID_ARGUMENT,
    SBX_CONNECT_DEADLINE_EXCEEDED,
    SBX_CONNECT_NOT_FOUND,
    SBX_CONNECT_ALREADY_EXISTS,
    SBX_CONNECT_PERMISSION_DENIED,
    SBX_CONNECT_RESOURCE_EXHAUSTED,
    SBX_CONNECT_FAILED_PRECONDITION,
    SBX_CONNECT_ABORTED,
    SBX_CONNECT_OUT_OF_RANGE,
    SBX_CONNECT_UNIMPLEMENTED,
    SBX_CONNECT_INTERNAL,
    SBX_CONNECT_UNAVAILABLE,
    SBX_CONNECT_DATA_LOSS,
    SBX_CONNECT_UNAUTHENTICATED,
};
#define SBX_CONNECT_CODES 17

/* The code's name on the wire ("not_found"); NULL for SBX_CONNECT_OK and numbers out of range. */
const char *sbx_connect_code_name(int code);

/* The code named name[0..len) (exact, lowercase), or -EINVAL. */
int sbx_connect_code_parse(const char *name, size_t len);

/* The HTTP status of a unary error with this code (not_found 404, unavailable 503, canceled
 * 499, ...); 500 for numbers out of range, 200 for SBX_CONNECT_OK. */
unsigned sbx_connect_http_status(int code);

/* The code a client reads from an HTTP error status whose body names none (the protocol's
 * table: 400 internal, 401 unauthenticated, 403 permission_denied, 404 unimplemented,
 * 429/502/503/504 unavailable, anything else unknown). */
enum sbx_connect_code sbx_connect_code_of_http(unsigned status);

/* Content types. */
enum sbx_connect_codec {
    SBX_CONNECT_JSON,  /* "json": protobuf's JSON mapping */
    SBX_CONNECT_PROTO, /* "proto": binary protobuf */
};

struct sbx_connect_type {
    enum sbx_connect_codec codec;
    bool streaming; /* application/connect+<codec>: enveloped messages both ways */
};

/* Reads a Content-Type value (need not be NUL-terminated): application/json, application/proto
 * (unary), application/connect+json, application/connect+proto (streaming), the type and
 * subtype without regard to case, blanks around them ignored; a JSON type may carry
 * `charset=utf-8` and nothing else. Anything else is -EPROTONOSUPPORT (answered 415 Unsupported
 * Media Type), with the reason in err. */
int sbx_connect_type_parse(const char *value, size_t len, struct sbx_connect_type *ret,
                           struct sbx_error *err);

/* The Content-Type of a response of type t ("application/connect+json", ...). */
const char *sbx_connect_type_name(struct sbx_connect_type t);

/* Reads Connect-Timeout-Ms: 1 to 10 ASCII digits, nothing else (the protocol's grammar), into
 * milliseconds. -EINVAL otherwise, with the reason in err. */
int sbx_connect_timeout_parse(const char *value, size_t len, uint64_t *ret_ms,
                              struct sbx_error *err);

/* Checks Connect-Protocol-Version: absent (NULL) or "1". -EINVAL otherwise. */
int sbx_connect_version_check(const char *value, size_t len, struct sbx_error *err);

/* Envelopes. */
#define SBX_CONNECT_FLAG_COMPRESSED 0x01u
#define SBX_CONNECT_FLAG_END        0x02u
#define SBX_CONNECT_PREFIX_LEN      5

/* Writes the 5-byte prefix of a message of len bytes with flags. */
void sbx_connect_prefix(uint8_t out[SBX_CONNECT_PREFIX_LEN], uint8_t flags, uint32_t len);

/* An incremental reader of a stream of envelopes, fed bytes as they arrive in pieces of any
 * size. Holds at most one message of at most `max` bytes. */
struct sbx_connect_reader {
    size_t max;
    uint8_t head[SBX_CONNECT_PREFIX_LEN];
    size_t head_n; /* bytes of the prefix read */
    uint8_t *msg;  /* the message being read, once its prefix is whole */
    size_t msg_len, msg_n;
    bool done; /* a message was handed out: its buffer goes at the next feed */
};

/* One message read. Valid until the next call on the reader. */
struct sbx_connect_msg {
    uint8_t flags;
    const uint8_t *data;
    size_t len;
};

void sbx_connect_reader_init(struct sbx_connect_reader *r, size_t max);
void sbx_connect_reader_release(struct sbx_connect_reader *r);

/* Reads from p[0..n): returns 1 with a whole message in *ret (and *used the bytes taken, which
 * may be fewer than n: call again with the rest), 0 when all n bytes were taken and no message
 * is whole yet, or an error that ends the stream: -EMSGSIZE for a message longer than max,
 * -EPROTO for flags other than SBX_CONNECT_FLAG_COMPRESSED and SBX_CONNECT_FLAG_END, -ENOMEM;
 * after one the reader can only be released. Whether a compressed or end-of-stream message is
 * welcome is the caller's to say. */
int sbx_connect_reader_feed(struct sbx_connect_reader *r, const uint8_t *p, size_t n, size_t *used,
                            struct sbx_connect_msg *ret, struct sbx_error *err);

/* Whether the stream may end here: no message is partly read. -EPROTO (with how much is
 * missing) when one is. */
int sbx_connect_reader_finish(const struct sbx_connect_reader *r, struct sbx_error *err);

/* An error as Connect carries it. details[i].value is the binary protobuf of a message of
 * type details[i].type (a full name without the type.googleapis.com/ prefix). */
struct sbx_connect_detail {
    const char *type;
    const uint8_t *value;
    size_t len;
};

struct sbx_connect_error {
    int code; /* an enum sbx_connect_code other than OK */
    const char *message;
    const struct sbx_connect_detail *details;
    size_t n_details;
};

/* Longest message written (in bytes of UTF-8, before JSON's escapes): a longer one is cut at a
 * character boundary. */
#define SBX_CONNECT_MAX_MESSAGE 4096
/* Most details written, and longest type name and value of each. */
#define SBX_CONNECT_MAX_DETAILS      8
#define SBX_CONNECT_MAX_DETAIL_TYPE  256
#define SBX_CONNECT_MAX_DETAIL_VALUE 4096

/* The JSON of an error: {"code":"not_found","message":"...","details":[{"type":"...",
 * "value":"<base64 without padding>"}]} (message and details only when there are any). Bytes
 * of the message that start no valid UTF-8 character are written as U+FFFD. Returns 0 with a
 * malloc'ed, NUL-terminated string in *ret and its length in *ret_len; -EINVAL for a code out
 * of range or OK, a type name not printable ASCII, or too many or too long details; -ENOMEM. */
int sbx_connect_error_json(const struct sbx_connect_error *e, char **ret, size_t *ret_len,
                           struct sbx_error *err);

/* The last envelope of a stream: flags SBX_CONNECT_FLAG_END and the JSON {} for a stream that
 * ends well (e NULL), {"error":<as sbx_connect_error_json>} for one that fails. Returns 0 with
 * the malloc'ed envelope (prefix included) in *ret, *ret_len bytes; errors as
 * sbx_connect_error_json. */
int sbx_connect_end_stream(const struct sbx_connect_error *e, uint8_t **ret, size_t *ret_len,
                           struct sbx_error *err);
