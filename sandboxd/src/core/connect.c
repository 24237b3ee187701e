/* The Connect protocol's framing: codes, content types, headers, envelopes, the JSON of errors.
 * See connect.h. */
#define _GNU_SOURCE
#include "connect.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cleanup.h"
#include "utf8.h"

static const struct {
    const char *name;
    unsigned status;
} codes[SBX_CONNECT_CODES] = {
    [SBX_CONNECT_OK] = {NULL, 200},
    [SBX_CONNECT_CANCELED] = {"canceled", 499},
    [SBX_CONNECT_UNKNOWN] = {"unknown", 500},
    [SBX_CONNECT_INVALID_ARGUMENT] = {"invalid_argument", 400},
    [SBX_CONNECT_DEADLINE_EXCEEDED] = {"deadline_exceeded", 504},
    [SBX_CONNECT_NOT_FOUND] = {"not_found", 404},
    [SBX_CONNECT_ALREADY_EXISTS] = {"already_exists", 409},
    [SBX_CONNECT_PERMISSION_DENIED] = {"permission_denied", 403},
    [SBX_CONNECT_RESOURCE_EXHAUSTED] = {"resource_exhausted", 429},
    [SBX_CONNECT_FAILED_PRECONDITION] = {"failed_precondition", 400},
    [SBX_CONNECT_ABORTED] = {"aborted", 409},
    [SBX_CONNECT_OUT_OF_RANGE] = {"out_of_range", 400},
    [SBX_CONNECT_UNIMPLEMENTED] = {"unimplemented", 501},
    [SBX_CONNECT_INTERNAL] = {"internal", 500},
    [SBX_CONNECT_UNAVAILABLE] = {"unavailable", 503},
    [SBX_CONNECT_DATA_LOSS] = {"data_loss", 500},
    [SBX_CONNECT_UNAUTHENTICATED] = {"unauthenticated", 401},
};

const char *sbx_connect_code_name(int code)
{
    return code > 0 && code < SBX_CONNECT_CODES ? codes[code].name : NULL;
}

int sbx_connect_code_parse(const char *name, size_t len)
{
    for (int c = 1; c < SBX_CONNECT_CODES; c++)
        if (strlen(codes[c].name) == len && memcmp(codes[c].name, name, len) == 0)
            return c;
    return -EINVAL;
}

unsigned sbx_connect_http_status(int code)
{
    return code >= 0 && code < SBX_CONNECT_CODES ? codes[code].status : 500;
}

enum sbx_connect_code sbx_connect_code_of_http(unsigned status)
{
    switch (status) {
    case 400:
        return SBX_CONNECT_INTERNAL;
    case 401:
        return SBX_CONNECT_UNAUTHENTICATED;
    case 403:
        return SBX_CONNECT_PERMISSION_DENIED;
    case 404:
        return SBX_CONNECT_UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
        return SBX_CONNECT_UNAVAILABLE;
    default:
        return SBX_CONNECT_UNKNOWN;
    }
}

static bool blank(char c)
{
    return c == ' ' || c == '\t';
}

/* p[0..*len) without blanks at either end. */
static const char *trim(const char *p, size_t *len)
{
    while (*len && blank(p[0]))
        p++, (*len)--;
    while (*len && blank(p[*len - 1]))
        (*len)--;
    return p;
}

static bool word_is(const char *p, size_t len, const char *word)
{
    return strlen(word) == len && strncasecmp(p, word, len) == 0;
}

/* The only parameter a JSON type may have: charset=utf-8 (the value quoted or not). */
static bool charset_utf8(const char *p, size_t len)
{
    const char *eq = memchr(p, '=', len);

    if (!eq)
        return false;
    size_t name_len = (size_t)(eq - p), value_len = len - name_len - 1;
    const char *name = trim(p, &name_len), *value = trim(eq + 1, &value_len);

    if (value_len >= 2 && value[0] == '"' && value[value_len - 1] == '"')
        value++, value_len -= 2;
    return word_is(name, name_len, "charset") && word_is(value, value_len, "utf-8");
}

int sbx_connect_type_parse(const char *value, size_t len, struct sbx_connect_type *ret,
                           struct sbx_error *err)
{
    static const struct {
        const char *name;
        struct sbx_connect_type t;
    } types[] = {
        {"application/json", {SBX_CONNECT_JSON, false}},
        {"application/proto", {SBX_CONNECT_PROTO, false}},
        {"application/connect+json", {SBX_CONNECT_JSON, true}},
        {"application/connect+proto", {SBX_CONNECT_PROTO, true}},
    };
    const char *semi = value ? memchr(value, ';', len) : NULL;
    size_t type_len = semi ? (size_t)(semi - value) : len;
    const char *type = value ? trim(value, &type_len) : NULL;

    for (size_t i = 0; type && i < SBX_ARRAY_SIZE(types); i++) {
        if (!word_is(type, type_len, types[i].name))
            continue;
        if (semi && !(types[i].t.codec == SBX_CONNECT_JSON &&
                      charset_utf8(semi + 1, len - (size_t)(semi - value) - 1)))
            break;
        *ret = types[i].t;
        return 0;
    }
    return sbx_error_set(err, EPROTONOSUPPORT,
                         "content type is not one of application/json, application/proto, "
                         "application/connect+json, application/connect+proto");
}

const char *sbx_connect_type_name(struct sbx_connect_type t)
{
    if (t.streaming)
        return t.codec == SBX_CONNECT_JSON ? "application/connect+json"
                                           : "application/connect+proto";
    return t.codec == SBX_CONNECT_JSON ? "application/json" : "application/proto";
}

int sbx_connect_timeout_parse(const char *value, size_t len, uint64_t *ret_ms,
                              struct sbx_error *err)
{
    uint64_t ms = 0;

    if (len == 0 || len > 10)
        return sbx_error_set(err, EINVAL, "connect-timeout-ms is not 1 to 10 digits");
    for (size_t i = 0; i < len; i++) {
        if (value[i] < '0' || value[i] > '9')
            return sbx_error_set(err, EINVAL, "connect-timeout-ms is not 1 to 10 digits");
        ms = ms * 10 + (uint64_t)(value[i] - '0');
    }
    *ret_ms = ms;
    return 0;
}

int sbx_connect_version_check(const char *value, size_t len, struct sbx_error *err)
{
    if (!value || (len == 1 && value[0] == '1'))
        return 0;
    return sbx_error_set(err, EINVAL, "connect-protocol-version must be 1");
}

void sbx_connect_prefix(uint8_t out[SBX_CONNECT_PREFIX_LEN], uint8_t flags, uint32_t len)
{
    out[0] = flags;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
}

void sbx_connect_reader_init(struct sbx_connect_reader *r, size_t max)
{
    *r = (struct sbx_connect_reader){.max = max};
}

void sbx_connect_reader_release(struct sbx_connect_reader *r)
{
    free(r->msg);
    r->msg = NULL;
}

/* The prefix is whole: checks it and makes room for the message. */
static int reader_start(struct sbx_connect_reader *r, struct sbx_error *err)
{
    uint8_t flags = r->head[0];
    size_t len =
        (size_t)r->head[1] << 24 | (size_t)r->head[2] << 16 | (size_t)r->head[3] << 8 | r->head[4];

    if (flags & ~(SBX_CONNECT_FLAG_COMPRESSED | SBX_CONNECT_FLAG_END))
        return sbx_error_set(err, EPROTO, "envelope with unknown flags 0x%02x", flags);
    if (len > r->max)
        return sbx_error_set(err, EMSGSIZE, "message of %zu bytes is over the limit of %zu", len,
                             r->max);
    r->msg = malloc(len ? len : 1);
    if (!r->msg)
        return sbx_error_set(err, ENOMEM, "out of memory for a message of %zu bytes", len);
    r->msg_len = len;
    r->msg_n = 0;
    return 0;
}

int sbx_connect_reader_feed(struct sbx_connect_reader *r, const uint8_t *p, size_t n, size_t *used,
                            struct sbx_connect_msg *ret, struct sbx_error *err)
{
    size_t off = 0;
    int rc;

    if (r->done) {
        sbx_connect_reader_release(r);
        r->head_n = 0;
        r->done = false;
    }
    while (r->head_n < SBX_CONNECT_PREFIX_LEN && off < n)
        r->head[r->head_n++] = p[off++];
    if (r->head_n < SBX_CONNECT_PREFIX_LEN) {
        *used = off;
        return 0;
    }
    if (!r->msg && (rc = reader_start(r, err)) < 0)
        return rc;
    size_t take = r->msg_len - r->msg_n < n - off ? r->msg_len - r->msg_n : n - off;
    if (take)
        memcpy(r->msg + r->msg_n, p + off, take);
    r->msg_n += take;
    *used = off + take;
    if (r->msg_n < r->msg_len)
        return 0;
    *ret = (struct sbx_connect_msg){.flags = r->head[0], .data = r->msg, .len = r->msg_len};
    r->done = true;
    return 1;
}

int sbx_connect_reader_finish(const struct sbx_connect_reader *r, struct sbx_error *err)
{
    if (r->done || r->head_n == 0)
        return 0;
    if (r->head_n < SBX_CONNECT_PREFIX_LEN)
        return sbx_error_set(err, EPROTO, "stream ends inside an envelope's prefix");
    return sbx_error_set(err, EPROTO, "stream ends %zu bytes short of a message",
                         r->msg_len - r->msg_n);
}

/* A growing string; the first failure sticks and later appends do nothing. */
struct buf {
    char *p;
    size_t len, cap;
    bool failed;
};

static void put(struct buf *b, const void *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void puts_(struct buf *b, const char *s)
{
    put(b, s, strlen(s));
}

/* s as a JSON string, bytes that start no valid UTF-8 character as U+FFFD, cut at a character
 * boundary so that the string it stands for is at most max bytes. */
static void put_json_string(struct buf *b, const char *s, size_t max)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t taken = 0, n;

    put(b, "\"", 1);
    for (; *p; p += n) {
        n = sbx_utf8_char(p);
        taken += n ? n : 3;
        if (taken > max)
            break;
        if (n == 0) {
            put(b, "\xef\xbf\xbd", 3);
            n = 1;
        } else if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            put(b, esc, 2);
        } else if (*p < 0x20) {
            static const char hex[] = "0123456789abcdef";
            char esc[6] = {'\\', 'u', '0', '0', hex[*p >> 4], hex[*p & 15]};
            put(b, esc, 6);
        } else {
            put(b, p, n);
        }
    }
    put(b, "\"", 1);
}

/* Base64 (RFC 4648 §4, the standard alphabet) without padding, as Connect wants details. */
static void put_base64(struct buf *b, const uint8_t *p, size_t n)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        size_t left = n - i;
        char out[4] = {0};

        if (left > 1)
            v |= (uint32_t)p[i + 1] << 8;
        if (left > 2)
            v |= p[i + 2];
        for (int k = 0; k < 4; k++)
            out[k] = abc[(v >> (18 - 6 * k)) & 63];
        put(b, out, left >= 3 ? 4 : left + 1);
    }
}

static bool type_name_ok(const char *t)
{
    size_t n = strlen(t);

    if (n == 0 || n > SBX_CONNECT_MAX_DETAIL_TYPE)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.'))
            return false;
    }
    return true;
}

static int check_error(const struct sbx_connect_error *e, struct sbx_error *err)
{
    if (!sbx_connect_code_name(e->code))
        return sbx_error_set(err, EINVAL, "no error code %d", e->code);
    if (e->n_details > SBX_CONNECT_MAX_DETAILS)
        return sbx_error_set(err, EINVAL, "%zu error details, more than %d", e->n_details,
                             SBX_CONNECT_MAX_DETAILS);
    for (size_t i = 0; i < e->n_details; i++) {
        if (!e->details[i].type || !type_name_ok(e->details[i].type))
            return sbx_error_set(err, EINVAL, "error detail %zu has no valid type name", i);
        if (e->details[i].len > SBX_CONNECT_MAX_DETAIL_VALUE)
            return sbx_error_set(err, EINVAL, "error detail %zu is over %d bytes", i,
                                 SBX_CONNECT_MAX_DETAIL_VALUE);
    }
    return 0;
}

static void put_error(struct buf *b, const struct sbx_connect_error *e)
{
    puts_(b, "{\"code\":\"");
    puts_(b, sbx_connect_code_name(e->code));
    puts_(b, "\"");
    if (e->message && e->message[0]) {
        puts_(b, ",\"message\":");
        put_json_string(b, e->message, SBX_CONNECT_MAX_MESSAGE);
    }
    if (e->n_details) {
        puts_(b, ",\"details\":[");
        for (size_t i = 0; i < e->n_details; i++) {
            puts_(b, i ? ",{\"type\":\"" : "{\"type\":\"");
            puts_(b, e->details[i].type);
            puts_(b, "\",\"value\":\"");
            put_base64(b, e->details[i].value, e->details[i].len);
            puts_(b, "\"}");
        }
        puts_(b, "]");
    }
    puts_(b, "}");
}

int sbx_connect_error_json(const struct sbx_connect_error *e, char **ret, size_t *ret_len,
                           struct sbx_error *err)
{
    _cleanup_free_ char *p = NULL;
    struct buf b = {0};
    int rc;

    if ((rc = check_error(e, err)) < 0)
        return rc;
    put_error(&b, e);
    p = b.p;
    if (b.failed)
        return sbx_error_set(err, ENOMEM, "out of memory for an error's JSON");
    *ret_len = b.len;
    *ret = TAKE_PTR(p);
    return 0;
}

int sbx_connect_end_stream(const struct sbx_connect_error *e, uint8_t **ret, size_t *ret_len,
                           struct sbx_error *err)
{
    _cleanup_free_ char *p = NULL;
    struct buf b = {0};
    int rc;

    if (e && (rc = check_error(e, err)) < 0)
        return rc;
    put(&b, "\0\0\0\0\0", SBX_CONNECT_PREFIX_LEN);
    if (e) {
        puts_(&b, "{\"error\":");
        put_error(&b, e);
        puts_(&b, "}");
    } else {
        puts_(&b, "{}");
    }
    p = b.p;
    if (b.failed)
        return sbx_error_set(err, ENOMEM, "out of memory for the end of a stream");
    sbx_connect_prefix((uint8_t *)p, SBX_CONNECT_FLAG_END,
                       (uint32_t)(b.len - SBX_CONNECT_PREFIX_LEN));
    *ret_len = b.len;
    *ret = (uint8_t *)TAKE_PTR(p);
    return 0;
}
