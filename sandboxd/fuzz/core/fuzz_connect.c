/* libFuzzer target for the Connect framing (connect.c): what an E2B SDK's bytes and headers meet
 * on sandboxd's E2B port, and the errors written back to it.
 *
 * Input: one byte choosing the part (its value modulo 4), then:
 *   0 envelopes: a byte giving the reader's limit (its value times 4), a byte seeding the sizes
 *     of the pieces the rest is fed in, the rest a stream of envelopes. Checked: the messages
 *     and the verdict (an error, or whether the stream may end) are those of a plain reader
 *     written here that sees the stream whole; each message is exactly its bytes in the stream
 *     after its prefix; an error carries its -errno and a message;
 *   1 headers: the rest (cut at a NUL, which header values cannot hold) as a Content-Type, a
 *     Connect-Timeout-Ms and a Connect-Protocol-Version value, each accepted exactly when it
 *     matches the protocol's grammar written as a POSIX regex here, and read as it says;
 *   2, 3 errors: a byte for the code (any number), a byte for how many details (the part 3
 *     says whether to write an end of stream instead), then NUL-separated strings: the message,
 *     then a type and a value per detail. Checked: accepted exactly when the code has a name and
 *     the details are few, short and named by [A-Za-z0-9_.]+; what is written is JSON (jansson
 *     reads it) with the code's name, the message as sbx_utf8_sanitize makes it cut at a
 *     character boundary to at most SBX_CONNECT_MAX_MESSAGE bytes, and each value's bytes in
 *     base64 without padding; an end of stream is one envelope flagged as the end, holding
 *     {"error": that JSON}. */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <regex.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "connect.h"
#include "fuzz_check.h"
#include "utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The plain reader: the messages of a whole stream up to its end or its first error; the
 * error (-errno, or 0) in *bad. */
struct seen {
    uint8_t flags;
    const uint8_t *data; /* into the stream */
    size_t len;
};

static size_t ref_read(const uint8_t *p, size_t n, size_t max, struct seen *out, size_t cap,
                       bool *ends_well, int *bad)
{
    size_t off = 0, count = 0;

    *ends_well = true;
    *bad = 0;
    while (off < n) {
        if (n - off < SBX_CONNECT_PREFIX_LEN) {
            *ends_well = false;
            break;
        }
        uint8_t flags = p[off];
        size_t len = (size_t)p[off + 1] << 24 | (size_t)p[off + 2] << 16 | (size_t)p[off + 3] << 8 |
                     p[off + 4];
        if (flags > 3 || len > max) {
            *bad = flags > 3 ? -EPROTO : -EMSGSIZE;
            break;
        }
        if (n - off - SBX_CONNECT_PREFIX_LEN < len) {
            *ends_well = false;
            break;
        }
        CHECK(count < cap, "more messages than room");
        out[count++] = (struct seen){flags, p + off + SBX_CONNECT_PREFIX_LEN, len};
        off += SBX_CONNECT_PREFIX_LEN + len;
    }
    return count;
}

static void fuzz_envelopes(const uint8_t *p, size_t n)
{
    static struct seen want[4096];
    struct sbx_connect_reader r;
    struct sbx_error err = {0};
    size_t max, off = 0, got = 0, nwant;
    uint32_t seed;
    bool ends_well;
    int rc = 0, bad;

    if (n < 2 || n > 16384)
        return;
    max = (size_t)p[0] * 4;
    seed = p[1] | 1u;
    p += 2, n -= 2;
    nwant = ref_read(p, n, max, want, SBX_ARRAY_SIZE(want), &ends_well, &bad);

    sbx_connect_reader_init(&r, max);
    while (off < n) {
        size_t piece, used = 0;
        struct sbx_connect_msg m;

        seed = seed * 1103515245u + 12345u;
        piece = 1 + (seed >> 16) % 9;
        if (piece > n - off)
            piece = n - off;
        rc = sbx_connect_reader_feed(&r, p + off, piece, &used, &m, &err);
        if (rc < 0)
            break;
        CHECK(used <= piece && (rc == 1 || used == piece), "took %zu of %zu", used, piece);
        off += used;
        if (rc == 0)
            continue;
        CHECK(got < nwant, "a message the plain reader did not see");
        CHECK(m.flags == want[got].flags && m.len == want[got].len &&
                  memcmp(m.data, want[got].data, m.len) == 0,
              "message %zu differs", got);
        CHECK(want[got].data + want[got].len == p + off, "message %zu ends elsewhere", got);
        got++;
    }
    CHECK(got == nwant, "%zu messages, not %zu", got, nwant);
    CHECK(bad ? rc == bad : rc >= 0, "error %d where the plain reader says %d", rc, bad);
    if (rc < 0)
        CHECK(err.code == -rc && err.msg[0], "error without its errno or message");
    else
        CHECK((sbx_connect_reader_finish(&r, &err) == 0) == ends_well, "wrong end verdict");
    sbx_connect_reader_release(&r);
}

static bool matches(const char *re, const char *s)
{
    regex_t rx;
    bool m;

    CHECK(regcomp(&rx, re, REG_EXTENDED | REG_ICASE | REG_NOSUB) == 0, "bad regex %s", re);
    m = regexec(&rx, s, 0, NULL, 0) == 0;
    regfree(&rx);
    return m;
}

static void fuzz_headers(const uint8_t *p, size_t n)
{
    _cleanup_free_ char *s = strndup((const char *)p, n);
    struct sbx_connect_type t;
    struct sbx_error err = {0};
    uint64_t ms;
    size_t len;

    if (!s)
        return;
    len = strlen(s);
    bool json = matches("^[ \t]*application/(connect\\+)?json[ \t]*"
                        "(;[ \t]*charset[ \t]*=[ \t]*(utf-8|\"utf-8\")[ \t]*)?$",
                        s),
         proto = matches("^[ \t]*application/(connect\\+)?proto[ \t]*$", s);
    int rc = sbx_connect_type_parse(s, len, &t, &err);
    CHECK((rc == 0) == (json || proto), "content type %s: %d", s, rc);
    if (rc == 0)
        CHECK(t.codec == (json ? SBX_CONNECT_JSON : SBX_CONNECT_PROTO) &&
                  t.streaming == (strcasestr(s, "connect+") != NULL),
              "content type %s read wrong", s);
    else
        CHECK(rc == -EPROTONOSUPPORT && err.msg[0], "content type refused without a reason");

    rc = sbx_connect_timeout_parse(s, len, &ms, &err);
    CHECK((rc == 0) == matches("^[0-9]{1,10}$", s), "timeout %s: %d", s, rc);
    CHECK(rc != 0 || ms == strtoull(s, NULL, 10), "timeout %s read as %llu", s,
          (unsigned long long)ms);
    rc = sbx_connect_version_check(s, len, &err);
    CHECK((rc == 0) == (strcmp(s, "1") == 0), "version %s: %d", s, rc);
}

/* Splits p[0..n) at NULs into up to cap strings (the last one unterminated in the input). */
static size_t split(const uint8_t *p, size_t n, char **out, size_t cap)
{
    size_t k = 0, off = 0;

    while (k < cap && off <= n) {
        const uint8_t *nul = memchr(p + off, 0, n - off);
        size_t len = nul ? (size_t)(nul - (p + off)) : n - off;
        out[k] = strndup((const char *)p + off, len);
        CHECK(out[k], "out of memory");
        k++;
        off += len + 1;
        if (!nul)
            break;
    }
    return k;
}

static bool type_ok(const char *t)
{
    return *t && strlen(t) <= SBX_CONNECT_MAX_DETAIL_TYPE &&
           strspn(t, "abcdefghijklmnopqrstuvwxyz"
                     "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789_.") == strlen(t);
}

/* The message as it must come back: sanitized, cut to the limit at a character boundary. */
static bool message_ok(const char *got, const char *sent)
{
    _cleanup_free_ char *want = sbx_utf8_sanitize(sent);
    size_t len = 0, n;

    CHECK(want, "out of memory");
    while (want[len] && (n = sbx_utf8_char((const unsigned char *)want + len)) &&
           len + n <= SBX_CONNECT_MAX_MESSAGE)
        len += n;
    return strlen(got) == len && memcmp(got, want, len) == 0;
}

static bool value_ok(const char *b64, const char *want)
{
    size_t n = strlen(b64), wn = strlen(want);
    _cleanup_free_ char *padded = malloc(n + 4);
    _cleanup_free_ unsigned char *out = malloc(n + 4);

    CHECK(padded && out, "out of memory");
    if (n % 4 == 1 || strchr(b64, '='))
        return false;
    memcpy(padded, b64, n);
    while (n % 4)
        padded[n++] = '=';
    padded[n] = '\0';
    int len = EVP_DecodeBlock(out, (const unsigned char *)padded, (int)n);
    if (len < 0)
        return false;
    len -= (int)(strchr(padded, '=') ? n - (size_t)(strchr(padded, '=') - padded) : 0);
    return (size_t)len == wn && memcmp(out, want, wn) == 0;
}

static void check_error_json(json_t *j, const struct sbx_connect_error *e)
{
    const char *code = json_string_value(json_object_get(j, "code"));
    json_t *msg = json_object_get(j, "message"), *det = json_object_get(j, "details");

    CHECK(code && strcmp(code, sbx_connect_code_name(e->code)) == 0, "code");
    if (e->message && e->message[0])
        CHECK(json_is_string(msg) && message_ok(json_string_value(msg), e->message), "message");
    else
        CHECK(!msg, "a message that was not given");
    CHECK(json_array_size(det) == e->n_details, "details");
    for (size_t i = 0; i < e->n_details; i++) {
        json_t *d = json_array_get(det, i);
        const char *t = json_string_value(json_object_get(d, "type")),
                   *v = json_string_value(json_object_get(d, "value"));
        CHECK(t && strcmp(t, e->details[i].type) == 0, "detail type");
        CHECK(v && value_ok(v, (const char *)e->details[i].value), "detail value %s", v);
    }
}

static void fuzz_errors(const uint8_t *p, size_t n, bool end_stream)
{
    char *s[1 + 2 * (SBX_CONNECT_MAX_DETAILS + 2)] = {0};
    struct sbx_connect_detail d[SBX_CONNECT_MAX_DETAILS + 2];
    struct sbx_error err = {0};
    size_t ns, nd;
    bool valid;

    if (n < 2)
        return;
    int code = (int8_t)p[0];
    nd = p[1] % (SBX_CONNECT_MAX_DETAILS + 2);
    ns = split(p + 2, n - 2, s, SBX_ARRAY_SIZE(s));
    if (ns < 1 + 2 * nd)
        nd = (ns - 1) / 2;
    valid = sbx_connect_code_name(code) != NULL && nd <= SBX_CONNECT_MAX_DETAILS;
    for (size_t i = 0; i < nd; i++) {
        d[i] = (struct sbx_connect_detail){s[1 + 2 * i], (const uint8_t *)s[2 + 2 * i],
                                           strlen(s[2 + 2 * i])};
        valid = valid && type_ok(d[i].type) && d[i].len <= SBX_CONNECT_MAX_DETAIL_VALUE;
    }
    struct sbx_connect_error e = {code, s[0], d, nd};

    char *out = NULL;
    size_t len = 0;
    int rc;
    if (end_stream)
        rc = sbx_connect_end_stream(&e, (uint8_t **)&out, &len, &err);
    else
        rc = sbx_connect_error_json(&e, &out, &len, &err);
    CHECK((rc == 0) == valid, "verdict %d, expected %s", rc, valid ? "accepted" : "refused");
    if (rc == 0) {
        const char *json = out;
        size_t jlen = len;
        if (end_stream) {
            uint8_t want[SBX_CONNECT_PREFIX_LEN];
            CHECK(len > SBX_CONNECT_PREFIX_LEN, "short end of stream");
            sbx_connect_prefix(want, SBX_CONNECT_FLAG_END,
                               (uint32_t)(len - SBX_CONNECT_PREFIX_LEN));
            CHECK(memcmp(out, want, SBX_CONNECT_PREFIX_LEN) == 0, "end of stream's prefix");
            json += SBX_CONNECT_PREFIX_LEN;
            jlen -= SBX_CONNECT_PREFIX_LEN;
        }
        json_error_t jerr;
        json_t *j = json_loadb(json, jlen, JSON_REJECT_DUPLICATES, &jerr);
        CHECK(j, "not JSON: %s", jerr.text);
        if (end_stream) {
            CHECK(json_object_size(j) == 1, "end of stream: more than the error");
            check_error_json(json_object_get(j, "error"), &e);
        } else {
            check_error_json(j, &e);
        }
        json_decref(j);
    } else {
        CHECK(rc == -EINVAL && err.code == EINVAL && err.msg[0] && !out, "refusal");
    }
    free(out);
    for (size_t i = 0; i < ns; i++)
        free(s[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    switch (data[0] % 4) {
    case 0:
        fuzz_envelopes(data + 1, size - 1);
        break;
    case 1:
        fuzz_headers(data + 1, size - 1);
        break;
    default:
        fuzz_errors(data + 1, size - 1, data[0] % 4 == 3);
        break;
    }
    return 0;
}
