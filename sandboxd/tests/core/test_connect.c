/* Connect framing (connect.c) against the protocol's own tables and grammar, and its JSON read
 * back by jansson. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "connect.h"
#include "tap.h"
#include "utf8.h"

/* The protocol's table of codes, names and HTTP statuses (connectrpc.com/docs/protocol). */
static const struct {
    int code;
    const char *name;
    unsigned status;
} spec[] = {
    {1, "canceled", 499},
    {2, "unknown", 500},
    {3, "invalid_argument", 400},
    {4, "deadline_exceeded", 504},
    {5, "not_found", 404},
    {6, "already_exists", 409},
    {7, "permission_denied", 403},
    {8, "resource_exhausted", 429},
    {9, "failed_precondition", 400},
    {10, "aborted", 409},
    {11, "out_of_range", 400},
    {12, "unimplemented", 501},
    {13, "internal", 500},
    {14, "unavailable", 503},
    {15, "data_loss", 500},
    {16, "unauthenticated", 401},
};

static void test_codes(void)
{
    bool good = true;

    for (size_t i = 0; i < sizeof(spec) / sizeof(spec[0]); i++) {
        const char *n = sbx_connect_code_name(spec[i].code);
        good = good && n && strcmp(n, spec[i].name) == 0 &&
               sbx_connect_code_parse(spec[i].name, strlen(spec[i].name)) == spec[i].code &&
               sbx_connect_http_status(spec[i].code) == spec[i].status;
    }
    ok(good, "every code has the protocol's name and HTTP status, and its name parses back");
    ok(!sbx_connect_code_name(0) && !sbx_connect_code_name(17) && !sbx_connect_code_name(-1),
       "success and numbers out of range have no name");
    ok(sbx_connect_code_parse("NOT_FOUND", 9) == -EINVAL &&
           sbx_connect_code_parse("not_foun", 8) == -EINVAL &&
           sbx_connect_code_parse("not_found ", 10) == -EINVAL &&
           sbx_connect_code_parse("", 0) == -EINVAL,
       "names parse exactly");
    ok(sbx_connect_code_parse("not_found trailing", 9) == SBX_CONNECT_NOT_FOUND,
       "a name is read from its length, not up to a NUL");
    ok(sbx_connect_code_of_http(400) == SBX_CONNECT_INTERNAL &&
           sbx_connect_code_of_http(401) == SBX_CONNECT_UNAUTHENTICATED &&
           sbx_connect_code_of_http(403) == SBX_CONNECT_PERMISSION_DENIED &&
           sbx_connect_code_of_http(404) == SBX_CONNECT_UNIMPLEMENTED &&
           sbx_connect_code_of_http(429) == SBX_CONNECT_UNAVAILABLE &&
           sbx_connect_code_of_http(502) == SBX_CONNECT_UNAVAILABLE &&
           sbx_connect_code_of_http(503) == SBX_CONNECT_UNAVAILABLE &&
           sbx_connect_code_of_http(504) == SBX_CONNECT_UNAVAILABLE &&
           sbx_connect_code_of_http(500) == SBX_CONNECT_UNKNOWN &&
           sbx_connect_code_of_http(409) == SBX_CONNECT_UNKNOWN,
       "an HTTP status without a code in its body reads as the protocol's table says");
}

static bool type_is(const char *v, int codec, bool streaming)
{
    struct sbx_connect_type t = {0};
    struct sbx_error err = {0};

    return sbx_connect_type_parse(v, strlen(v), &t, &err) == 0 && (int)t.codec == codec &&
           t.streaming == streaming;
}

static bool type_refused(const char *v)
{
    struct sbx_connect_type t;
    struct sbx_error err = {0};

    return sbx_connect_type_parse(v, v ? strlen(v) : 0, &t, &err) == -EPROTONOSUPPORT &&
           err.code == EPROTONOSUPPORT && err.msg[0];
}

static void test_types(void)
{
    ok(type_is("application/json", SBX_CONNECT_JSON, false) &&
           type_is("application/proto", SBX_CONNECT_PROTO, false) &&
           type_is("application/connect+json", SBX_CONNECT_JSON, true) &&
           type_is("application/connect+proto", SBX_CONNECT_PROTO, true),
       "the four content types");
    ok(type_is("Application/JSON", SBX_CONNECT_JSON, false) &&
           type_is(" application/connect+proto\t", SBX_CONNECT_PROTO, true),
       "type and subtype without regard to case, blanks around them ignored");
    ok(type_is("application/json; charset=utf-8", SBX_CONNECT_JSON, false) &&
           type_is("application/json;charset=\"UTF-8\"", SBX_CONNECT_JSON, false) &&
           type_is("application/connect+json ; charset = utf-8 ", SBX_CONNECT_JSON, true),
       "JSON may say charset=utf-8");
    ok(type_refused("application/proto; charset=utf-8") &&
           type_refused("application/json; charset=latin1") &&
           type_refused("application/json; foo=bar") && type_refused("application/json;") &&
           type_refused("application/jsonx") && type_refused("application/grpc") &&
           type_refused("application/grpc+proto") && type_refused("text/plain") &&
           type_refused("") && type_refused(NULL),
       "any other type or parameter is refused with a reason");
    ok(strcmp(sbx_connect_type_name((struct sbx_connect_type){SBX_CONNECT_JSON, false}),
              "application/json") == 0 &&
           strcmp(sbx_connect_type_name((struct sbx_connect_type){SBX_CONNECT_PROTO, true}),
                  "application/connect+proto") == 0,
       "response types are named as the protocol names them");
}

static bool timeout_is(const char *v, uint64_t want)
{
    uint64_t ms = 12345;
    struct sbx_error err = {0};

    return sbx_connect_timeout_parse(v, strlen(v), &ms, &err) == 0 && ms == want;
}

static bool timeout_refused(const char *v)
{
    uint64_t ms = 7;
    struct sbx_error err = {0};

    return sbx_connect_timeout_parse(v, strlen(v), &ms, &err) == -EINVAL && ms == 7 && err.msg[0];
}

static void test_headers(void)
{
    struct sbx_error err = {0};

    ok(timeout_is("0", 0) && timeout_is("60000", 60000) &&
           timeout_is("9999999999", 9999999999ull) && timeout_is("0000000001", 1),
       "connect-timeout-ms: 1 to 10 digits");
    ok(timeout_refused("") && timeout_refused("12345678901") && timeout_refused("-1") &&
           timeout_refused("+1") && timeout_refused("1.5") && timeout_refused(" 1") &&
           timeout_refused("1a"),
       "connect-timeout-ms: anything else is refused and left unread");
    ok(sbx_connect_version_check(NULL, 0, &err) == 0 &&
           sbx_connect_version_check("1", 1, &err) == 0,
       "connect-protocol-version absent or 1");
    ok(sbx_connect_version_check("2", 1, &err) == -EINVAL &&
           sbx_connect_version_check("", 0, &err) == -EINVAL &&
           sbx_connect_version_check("1 ", 2, &err) == -EINVAL,
       "connect-protocol-version: anything else is refused");
}

#define BIG 70000

/* A stream of three messages: empty, BIG bytes, and an end of stream. */
static size_t make_stream(uint8_t *out, uint8_t *big)
{
    size_t n = 0;

    for (size_t i = 0; i < BIG; i++)
        big[i] = (uint8_t)(i * 7 + 3);
    sbx_connect_prefix(out, 0, 0);
    n += SBX_CONNECT_PREFIX_LEN;
    sbx_connect_prefix(out + n, 0, BIG);
    n += SBX_CONNECT_PREFIX_LEN;
    memcpy(out + n, big, BIG);
    n += BIG;
    sbx_connect_prefix(out + n, SBX_CONNECT_FLAG_END, 2);
    n += SBX_CONNECT_PREFIX_LEN;
    memcpy(out + n, "{}", 2);
    return n + 2;
}

/* Feeds stream[0..n) in pieces of `piece` bytes; true when exactly the three messages come. */
static bool read_in_pieces(const uint8_t *stream, size_t n, size_t piece, const uint8_t *big)
{
    struct sbx_connect_reader r;
    struct sbx_error err = {0};
    int got = 0;
    bool good = true;

    sbx_connect_reader_init(&r, BIG);
    for (size_t off = 0; off < n && good;) {
        size_t len = n - off < piece ? n - off : piece, used = 0;
        struct sbx_connect_msg m;
        int rc = sbx_connect_reader_feed(&r, stream + off, len, &used, &m, &err);

        good = rc >= 0 && used <= len && (rc == 1 || used == len);
        off += used;
        if (rc != 1)
            continue;
        if (got == 0)
            good = good && m.flags == 0 && m.len == 0;
        else if (got == 1)
            good = good && m.flags == 0 && m.len == BIG && memcmp(m.data, big, BIG) == 0;
        else
            good = good && m.flags == SBX_CONNECT_FLAG_END && m.len == 2 &&
                   memcmp(m.data, "{}", 2) == 0;
        got++;
    }
    good = good && got == 3 && sbx_connect_reader_finish(&r, &err) == 0;
    sbx_connect_reader_release(&r);
    return good;
}

static int feed_all(const uint8_t *p, size_t n, size_t max, struct sbx_connect_msg *m,
                    struct sbx_error *err, bool *finished_ok)
{
    struct sbx_connect_reader r;
    struct sbx_error finish_err = {0};
    size_t used = 0;
    int rc;

    sbx_connect_reader_init(&r, max);
    rc = sbx_connect_reader_feed(&r, p, n, &used, m, err);
    *finished_ok = sbx_connect_reader_finish(&r, &finish_err) == 0;
    if (!*finished_ok && rc >= 0)
        *err = finish_err;
    sbx_connect_reader_release(&r);
    return rc;
}

static void test_reader(void)
{
    static uint8_t stream[BIG + 64], big[BIG];
    size_t n = make_stream(stream, big);
    struct sbx_connect_msg m;
    struct sbx_error err = {0};
    bool fin;

    ok(read_in_pieces(stream, n, n, big), "a stream fed whole gives its three messages");
    ok(read_in_pieces(stream, n, 1, big), "fed a byte at a time, the same");
    ok(read_in_pieces(stream, n, 7, big) && read_in_pieces(stream, n, 4096, big),
       "fed in pieces that cut prefixes and messages anywhere, the same");

    uint8_t over[SBX_CONNECT_PREFIX_LEN + 11] = {0};
    sbx_connect_prefix(over, 0, 11);
    ok(feed_all(over, sizeof(over), 10, &m, &err, &fin) == -EMSGSIZE && err.code == EMSGSIZE,
       "a message over the limit is refused from its prefix alone");
    uint8_t at_max[SBX_CONNECT_PREFIX_LEN + 10] = {0};
    sbx_connect_prefix(at_max, 0, 10);
    ok(feed_all(at_max, sizeof(at_max), 10, &m, &err, &fin) == 1 && m.len == 10 && fin,
       "a message of exactly the limit is read");
    uint8_t huge[SBX_CONNECT_PREFIX_LEN];
    sbx_connect_prefix(huge, 0, 0xffffffffu);
    ok(feed_all(huge, sizeof(huge), 1 << 20, &m, &err, &fin) == -EMSGSIZE,
       "a length of 4 GiB allocates nothing");

    uint8_t flags[SBX_CONNECT_PREFIX_LEN + 1] = {0x04, 0, 0, 0, 1, 'x'};
    ok(feed_all(flags, sizeof(flags), 10, &m, &err, &fin) == -EPROTO && err.code == EPROTO,
       "unknown flags are refused");
    uint8_t comp[SBX_CONNECT_PREFIX_LEN + 1] = {SBX_CONNECT_FLAG_COMPRESSED, 0, 0, 0, 1, 'x'};
    ok(feed_all(comp, sizeof(comp), 10, &m, &err, &fin) == 1 &&
           m.flags == SBX_CONNECT_FLAG_COMPRESSED,
       "the compressed flag is handed to the caller to judge");

    ok(feed_all(stream, 3, BIG, &m, &err, &fin) == 0 && !fin,
       "a stream that ends inside a prefix cannot finish");
    ok(feed_all(stream + SBX_CONNECT_PREFIX_LEN, SBX_CONNECT_PREFIX_LEN + 100, BIG, &m, &err,
                &fin) == 0 &&
           !fin && strstr(err.msg, "short"),
       "a stream that ends inside a message cannot finish, and says how much is missing");
    ok(feed_all(stream, 0, BIG, &m, &err, &fin) == 0 && fin, "an empty stream finishes");
}

/* The JSON of e read back by jansson. */
static json_t *error_json(const struct sbx_connect_error *e)
{
    char *s = NULL;
    size_t len = 0;
    struct sbx_error err = {0};
    json_t *j;

    if (sbx_connect_error_json(e, &s, &len, &err) < 0)
        return NULL;
    j = strlen(s) == len ? json_loadb(s, len, 0, NULL) : NULL;
    free(s);
    return j;
}

static void test_error_json(void)
{
    static const uint8_t foob[] = "foobar";
    const struct sbx_connect_detail d[] = {
        {"a.B", foob, 0}, {"a.B", foob, 1}, {"a.B", foob, 2},
        {"a.B", foob, 3}, {"a.B", foob, 4}, {"google.rpc.ErrorInfo", foob, 6},
    };
    const char *want[] = {"", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmFy"}; /* RFC 4648 §10 */
    struct sbx_connect_error e = {SBX_CONNECT_NOT_FOUND,
                                  "path \"/a\\b\"\n\x01 caf\xc3\xa9 \xff end", d, 6};
    json_t *j = error_json(&e);
    bool good = j && json_object_size(j) == 3;

    ok(good && strcmp(json_string_value(json_object_get(j, "code")), "not_found") == 0,
       "the code by name");
    ok(good && strcmp(json_string_value(json_object_get(j, "message")),
                      "path \"/a\\b\"\n\x01 caf\xc3\xa9 \xef\xbf\xbd end") == 0,
       "the message escaped, its UTF-8 kept, a byte that starts no character as U+FFFD");
    json_t *arr = good ? json_object_get(j, "details") : NULL;
    good = json_array_size(arr) == 6;
    for (size_t i = 0; good && i < 6; i++) {
        json_t *o = json_array_get(arr, i);
        good = json_object_size(o) == 2 &&
               strcmp(json_string_value(json_object_get(o, "type")), d[i].type) == 0 &&
               strcmp(json_string_value(json_object_get(o, "value")), want[i]) == 0;
    }
    ok(good, "details: type and value in base64 without padding (RFC 4648's vectors)");
    json_decref(j);

    e = (struct sbx_connect_error){SBX_CONNECT_INTERNAL, NULL, NULL, 0};
    j = error_json(&e);
    ok(j && json_object_size(j) == 1 &&
           strcmp(json_string_value(json_object_get(j, "code")), "internal") == 0,
       "no message and no details: the code alone");
    json_decref(j);

    static char longmsg[3 * SBX_CONNECT_MAX_MESSAGE];
    for (size_t i = 0; i + 2 < sizeof(longmsg); i += 2)
        memcpy(longmsg + i, "\xc3\xa9", 2);
    e = (struct sbx_connect_error){SBX_CONNECT_UNKNOWN, longmsg, NULL, 0};
    j = error_json(&e);
    const char *m = j ? json_string_value(json_object_get(j, "message")) : NULL;
    ok(m && strlen(m) == SBX_CONNECT_MAX_MESSAGE && sbx_utf8_valid(m) &&
           strncmp(m, longmsg, strlen(m)) == 0,
       "a long message is cut to %d bytes at a character boundary", SBX_CONNECT_MAX_MESSAGE);
    json_decref(j);

    static char badbytes[2 * SBX_CONNECT_MAX_MESSAGE];
    memset(badbytes, 0xff, sizeof(badbytes) - 1);
    e = (struct sbx_connect_error){SBX_CONNECT_UNKNOWN, badbytes, NULL, 0};
    j = error_json(&e);
    m = j ? json_string_value(json_object_get(j, "message")) : NULL;
    ok(m && strlen(m) == SBX_CONNECT_MAX_MESSAGE / 3 * 3 && sbx_utf8_valid(m),
       "the cut counts what is written: bytes that start no character as U+FFFD's 3 bytes");
    json_decref(j);

    struct sbx_error err = {0};
    char *s = NULL;
    size_t len;
    struct sbx_connect_detail bad_type = {"a b", foob, 1}, big = {"a", foob, 5000};
    struct sbx_connect_detail many[SBX_CONNECT_MAX_DETAILS + 1];
    for (size_t i = 0; i < SBX_ARRAY_SIZE(many); i++)
        many[i] = d[1];
    ok(sbx_connect_error_json(&(struct sbx_connect_error){0, "x", NULL, 0}, &s, &len, &err) ==
               -EINVAL &&
           sbx_connect_error_json(&(struct sbx_connect_error){17, "x", NULL, 0}, &s, &len, &err) ==
               -EINVAL &&
           sbx_connect_error_json(&(struct sbx_connect_error){5, "x", &bad_type, 1}, &s, &len,
                                  &err) == -EINVAL &&
           sbx_connect_error_json(&(struct sbx_connect_error){5, "x", &big, 1}, &s, &len, &err) ==
               -EINVAL &&
           sbx_connect_error_json(&(struct sbx_connect_error){5, "x", many, SBX_ARRAY_SIZE(many)},
                                  &s, &len, &err) == -EINVAL &&
           s == NULL,
       "no code, an unknown one, a bad type name, a detail too long or too many: refused");
}

static void test_end_stream(void)
{
    uint8_t *p = NULL;
    size_t len = 0;
    struct sbx_error err = {0};
    struct sbx_connect_reader r;
    struct sbx_connect_msg m;
    size_t used;

    ok(sbx_connect_end_stream(NULL, &p, &len, &err) == 0 && len == 7 &&
           memcmp(p, "\x02\0\0\0\x02{}", 7) == 0,
       "a stream that ends well ends with {} flagged as the end");
    free(p);

    struct sbx_connect_error e = {SBX_CONNECT_DEADLINE_EXCEEDED, "too slow", NULL, 0};
    ok(sbx_connect_end_stream(&e, &p, &len, &err) == 0, "a failed stream's end is made");
    sbx_connect_reader_init(&r, 1 << 16);
    bool read = sbx_connect_reader_feed(&r, p, len, &used, &m, &err) == 1 && used == len &&
                m.flags == SBX_CONNECT_FLAG_END;
    json_t *j = read ? json_loadb((const char *)m.data, m.len, 0, NULL) : NULL;
    json_t *ej = json_object_get(j, "error");
    ok(j && json_object_size(j) == 1 &&
           strcmp(json_string_value(json_object_get(ej, "code")), "deadline_exceeded") == 0 &&
           strcmp(json_string_value(json_object_get(ej, "message")), "too slow") == 0,
       "it reads back as one envelope: {\"error\": {code, message}}");
    json_decref(j);
    sbx_connect_reader_release(&r);
    free(p);
    p = NULL;
    ok(sbx_connect_end_stream(&(struct sbx_connect_error){0, NULL, NULL, 0}, &p, &len, &err) ==
               -EINVAL &&
           !p,
       "an end of stream with an error of no code is refused");
}

int main(void)
{
    test_codes();
    test_types();
    test_headers();
    test_reader();
    test_error_json();
    test_end_stream();
    return done_testing();
}
