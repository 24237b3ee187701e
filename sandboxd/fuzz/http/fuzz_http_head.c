/* libFuzzer target for the strict request-head rules (http_head.c) the REST port's gate applies
 * to a connection's first head: any bytes, cut where sbx_http_head_end says the head ends.
 *
 * Held against the grammar of RFC 9112 written independently as a POSIX regular expression: a
 * head the rules accept matches it (the rules may refuse more: Host, Content-Length and
 * Transfer-Encoding are judged apart), has no NUL, and names HTTP/1.0 or 1.1; a refusal has a
 * status of 400, 501 or 505 and a message. */
#include <regex.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "http_head.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TCHAR  "[-!#$%&'*+.^_`|~0-9A-Za-z]"
#define PCHARS "([^\x01-\x20\x7f%]|%[0-9A-Fa-f][0-9A-Fa-f])*"
#define REGN   "([-._~!$&'()*+,;=0-9A-Za-z]|%[0-9A-Fa-f][0-9A-Fa-f])*"
#define AUTH   "(\\[[0-9A-Fa-f:.]*\\]|" REGN ")(:[0-9]*)?"
#define TARGET "(/" PCHARS "|[hH][tT][tT][pP][sS]?://" AUTH "([/?]" PCHARS ")?|\\*)"
#define VALUE  "[^\x01-\x08\x0a-\x1f\x7f]*"
#define HEAD   "^(\r\n)*" TCHAR "+ " TARGET " HTTP/1\\.[01]\r\n(" TCHAR "+:" VALUE "\r\n)*\r\n$"

static bool probe(const char *path, size_t len)
{
    return len == 8 && memcmp(path, "/healthz", 8) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static regex_t rx;
    static bool compiled;
    const char *buf = (const char *)data;
    size_t end = sbx_http_head_end(buf, size);
    struct sbx_http_verdict v = {0};
    struct sbx_http_head h;
    char *copy;

    if (!compiled) {
        CHECK(regcomp(&rx, HEAD, REG_EXTENDED | REG_NOSUB) == 0, "regcomp");
        compiled = true;
    }
    if (!end)
        return 0;
    CHECK(end <= size && buf[end - 1] == '\n' &&
              (buf[end - 2] == '\n' || (end >= 3 && buf[end - 2] == '\r' && buf[end - 3] == '\n')),
          "end %zu of %zu is not after an empty line", end, size);
    if (!sbx_http_head_check(buf, end, probe, &h, &v)) {
        CHECK((v.status == 400 || v.status == 501 || v.status == 505) && v.code && v.message &&
                  *v.message,
              "refusal %u without a message", v.status);
        return 0;
    }
    CHECK(!memchr(buf, '\0', end), "accepted a head with a NUL");
    CHECK(h.minor == 0 || h.minor == 1, "minor %d", h.minor);
    copy = strndup(buf, end);
    CHECK(copy, "strndup");
    CHECK(regexec(&rx, copy, 0, NULL, 0) == 0, "accepted a head outside the grammar: '%s'", copy);
    free(copy);
    return 0;
}
