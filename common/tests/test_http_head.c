/* http_head: the strict request-head rules, case by case (RFC 9112 §2-§6, RFC 9110 §7.2). */
#include <string.h>

#include "http_head.h"
#include "tap.h"

static bool probe_path(const char *path, size_t len)
{
    return len == 8 && memcmp(path, "/healthz", 8) == 0;
}

/* Checks head (which must be complete) and returns the status: 0 when accepted. */
static unsigned verdict(const char *head, const char **msg, struct sbx_http_head *h)
{
    struct sbx_http_verdict v = {0};
    size_t len = strlen(head), end = sbx_http_head_end(head, len);

    *msg = "";
    if (end != len)
        return 1; /* the test's head is not complete where expected */
    if (sbx_http_head_check(head, end, probe_path, h, &v))
        return 0;
    *msg = v.message;
    return v.status;
}

struct refusal {
    const char *head;
    unsigned status;
    const char *says;
};

static const struct refusal refused[] = {
    {"GARBAGE\r\n\r\n", 400, "request line"},
    {"GET  /a HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request line"},
    {"GET /a  HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request line"},
    {"GET /a HTTP/1.1 \r\nHost: x\r\n\r\n", 400, "request line"},
    {"GET /a http/1.1\r\nHost: x\r\n\r\n", 400, "request line"},
    {"G(T /a HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request line"},
    {"GET /a HTTP/2.0\r\nHost: x\r\n\r\n", 505, "HTTP/1.0 and HTTP/1.1"},
    {"GET /a HTTP/1.2\r\nHost: x\r\n\r\n", 505, "HTTP/1.0 and HTTP/1.1"},
    {"GET /a HTTP/1.1\nHost: x\n\n", 400, "CRLF"},
    {"GET /a HTTP/1.1\r\nHost: x\n\r\n", 400, "CRLF"},
    {"GET /a HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n", 400, "CRLF"},
    {"GET /a HTTP/1.1\r\nHost: x\r\nX: a\001b\r\n\r\n", 400, "control character"},
    {"GET /a HTTP/1.1\r\nHost: x\r\nX: a\177\r\n\r\n", 400, "control character"},
    {"GET /a HTTP/1.1\r\nHost : x\r\n\r\n", 400, "token followed by a colon"},
    {"GET /a HTTP/1.1\r\nX\r\nHost: x\r\n\r\n", 400, "token followed by a colon"},
    {"GET /a HTTP/1.1\r\n: x\r\nHost: x\r\n\r\n", 400, "empty header field name"},
    {"GET /a HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", 400, "folding"},
    {"GET /a HTTP/1.1\r\n\r\n", 400, "without a Host"},
    {"GET /a HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", 400, "more than one Host"},
    {"GET /a HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "invalid Host"},
    {"GET /a HTTP/1.1\r\nHost: a:8x\r\n\r\n", 400, "invalid Host"},
    {"GET /a HTTP/1.1\r\nHost: [::1\r\n\r\n", 400, "invalid Host"},
    {"GET /a HTTP/1.1\r\nHost: a/b\r\n\r\n", 400, "invalid Host"},
    {"GET /a%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400, "percent-escape"},
    {"GET /a%4 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "percent-escape"},
    {"GET /a?b=%g0 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "percent-escape"},
    {"GET /a\001 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request target"},
    {"GET /a\177 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request target"},
    {"GET a/b HTTP/1.1\r\nHost: x\r\n\r\n", 400, "neither in origin nor in absolute"},
    {"GET x:80 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "neither in origin nor in absolute"},
    {"GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400, "asterisk"},
    {"GET http://a b/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request line"},
    {"GET http://a@b/ HTTP/1.1\r\nHost: x\r\n\r\n", 400, "authority"},
    {"PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
     "both Content-Length and Transfer-Encoding"},
    {"PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400,
     "more than one Content-Length"},
    {"PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 1\r\n\r\n", 400, "decimal"},
    {"PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400, "decimal"},
    {"PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: \r\n\r\n", 400, "decimal"},
    {"PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 9999999999999999999\r\n\r\n", 400, "decimal"},
    {"PUT /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501,
     "other than chunked"},
    {"PUT /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked"
     "\r\n\r\n",
     501, "other than chunked"},
    {"PUT /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "HTTP/1.0"},
};

static const char *const accepted[] = {
    "GET /a HTTP/1.1\r\nHost: x\r\n\r\n",
    "\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n", /* leading empty lines are skipped */
    "GET /a HTTP/1.0\r\n\r\n",                    /* no Host needed in 1.0 */
    "GET /a HTTP/1.1\r\nHost:\r\n\r\n",           /* an empty Host is allowed */
    "GET /a HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n",
    "GET /a HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n",
    "GET /a HTTP/1.1\r\nhOsT:   x.example  \r\nX-Empty:\r\nX-Tab:\ta\tb\t\r\n\r\n",
    "GET /a%20b?c=%2F&d HTTP/1.1\r\nHost: x\r\n\r\n",
    "GET /caf\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n", /* curl sends UTF-8 names unescaped */
    "GET /a HTTP/1.1\r\nHost: x\r\nX-Utf8: caf\xc3\xa9\r\n\r\n", /* obs-text in a value */
    "GET http://x/a HTTP/1.1\r\nHost: y\r\n\r\n",
    "GET HTTPS://x:1/a?b HTTP/1.1\r\nHost: x\r\n\r\n",
    "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
    "PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    "PUT /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n",
};

static void test_refusals(void)
{
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        struct sbx_http_head h;
        const char *msg;
        unsigned st = verdict(refused[i].head, &msg, &h);
        ok(st == refused[i].status && strstr(msg, refused[i].says), "refused #%zu: %u '%s'", i, st,
           msg);
    }
}

static void test_accepted(void)
{
    for (size_t i = 0; i < sizeof(accepted) / sizeof(accepted[0]); i++) {
        struct sbx_http_head h;
        const char *msg;
        unsigned st = verdict(accepted[i], &msg, &h);
        ok(st == 0, "accepted #%zu: %u '%s'", i, st, msg);
    }
}

static void test_probe_and_method(void)
{
    struct sbx_http_head h;
    const char *msg;

    ok(verdict("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", &msg, &h) == 0 && h.probe &&
           h.get_method && h.minor == 1,
       "GET /healthz is a probe");
    ok(verdict("HEAD /healthz?x=1 HTTP/1.0\r\n\r\n", &msg, &h) == 0 && h.probe && h.head_method &&
           h.minor == 0,
       "HEAD /healthz?query is a probe, and HTTP/1.0");
    ok(verdict("GET http://a/healthz HTTP/1.1\r\nHost: a\r\n\r\n", &msg, &h) == 0 && h.probe,
       "absolute form of a probe");
    ok(verdict("PUT /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", &msg, &h) == 0 &&
           !h.probe,
       "PUT /healthz is no probe");
    ok(verdict("GET /healthz/x HTTP/1.1\r\nHost: x\r\n\r\n", &msg, &h) == 0 && !h.probe,
       "a longer path is no probe");
}

static void test_head_end(void)
{
    const char *a = "GET / HTTP/1.1\r\nHost: x\r\n\r\nBODY";

    ok(sbx_http_head_end(a, strlen(a)) == strlen(a) - 4, "the head ends at its empty line");
    ok(sbx_http_head_end(a, 20) == 0, "incomplete");
    ok(sbx_http_head_end("\r\n\r\n", 4) == 0, "leading empty lines do not end a head");
    ok(sbx_http_head_end("GET / HTTP/1.1\n\n", 16) == 16, "bare LF lines end too");
    ok(sbx_http_head_end("GET / HTTP/1.1\r\n\r", 17) == 0, "half an empty line");
}

static void test_target_path(void)
{
    ok(strcmp(sbx_http_target_path("/a?b"), "/a?b") == 0, "origin form");
    ok(strcmp(sbx_http_target_path("http://h:1/a?b"), "/a?b") == 0, "absolute form");
    ok(strcmp(sbx_http_target_path("http://h?b"), "?b") == 0, "absolute form, empty path");
    ok(strcmp(sbx_http_target_path("HTTPS://h"), "") == 0, "absolute form, no path");
}

static void test_fields_alone(void)
{
    struct sbx_http_fields f = {0};
    struct sbx_http_verdict v;

    sbx_http_fields_add(&f, "Host", 4, "x", 1);
    sbx_http_fields_add(&f, "X", 1, "a\0b", 3);
    ok(!sbx_http_fields_check(&f, 1, &v) && strstr(v.message, "NUL"),
       "a NUL inside a value given with its length");
}

int main(void)
{
    test_refusals();
    test_accepted();
    test_probe_and_method();
    test_head_end();
    test_target_path();
    test_fields_alone();
    return done_testing();
}
