/* libFuzzer target for the REST API's query parameters and headers, parsed by http_args.c and
 * sbx_http_parse_bool as the handlers call them: mode= (PUT /v1/files, PUT /v1/dirs),
 * recursive= and parents= (booleans), and the Range header of GET /v1/files.
 *
 * Input: one byte choosing the parser, then (for Range) 8 bytes of file size, then the value
 * (cut at a NUL). Each parser is held against the grammar it documents, written as a POSIX
 * regular expression here:
 *   mode   accepted exactly when ^0[0-7]{3}$, and then the octal value;
 *   bool   accepted exactly for Go's strconv.ParseBool spellings;
 *   Range  honoured (1 or -1) only for ^bytes=([0-9]+-[0-9]*|-[0-9]+)$; when 1,
 *          start <= end < size and the range is the one the header names, clamped to the size. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <regex.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_box.h"
#include "http_args.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool matches(const char *re, const char *s)
{
    regex_t rx;
    int r;

    CHECK(regcomp(&rx, re, REG_EXTENDED | REG_NOSUB) == 0, "regcomp '%s'", re);
    r = regexec(&rx, s, 0, NULL, 0);
    regfree(&rx);
    return r == 0;
}

static void check_mode(const char *s)
{
    mode_t m = 01000;
    int r = sbx_http_parse_mode(s, &m);
    bool ok = matches("^0[0-7]{3}$", s);

    CHECK((r == 0) == ok, "mode '%s': %d", s, r);
    CHECK(r == 0 ? m == (mode_t)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'))
                 : r == -EINVAL && m == 01000,
          "mode '%s' gave %o", s, (unsigned)m);
}

static void check_bool(const char *s)
{
    bool v = false;
    int r = sbx_http_parse_bool(s, &v);
    bool yes = matches("^(1|t|T|true|TRUE|True)$", s),
         no = matches("^(0|f|F|false|FALSE|False)$", s);

    CHECK((r == 0) == (yes || no) && (r < 0 || v == yes), "bool '%s': %d, %d", s, r, v);
}

/* The decimal number s[0..n), saturated at UINT64_MAX. */
static uint64_t decimal(const char *s, size_t n)
{
    uint64_t v = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(s[i] - '0');

        if (v > (UINT64_MAX - d) / 10)
            return UINT64_MAX;
        v = v * 10 + d;
    }
    return v;
}

static void check_range(const char *h, uint64_t size)
{
    uint64_t start = 7, end = 7, a, b;
    int r = sbx_http_parse_range(h, size, &start, &end);
    const char *spec = h + 6, *dash;

    CHECK(r >= -1 && r <= 1, "range '%s': %d", h, r);
    if (!matches("^bytes=([0-9]+-[0-9]*|-[0-9]+)$", h)) {
        CHECK(r == 0,
              "range '%s' (size %" PRIu64 ") is malformed, yet %d [%" PRIu64 ", %" PRIu64 "]", h,
              size, r, start, end);
        return;
    }
    dash = strchr(spec, '-');
    if (dash == spec) { /* the last b bytes */
        b = decimal(spec + 1, strlen(spec + 1));
        if (b == 0 || size == 0) {
            CHECK(r == -1, "range '%s' (size %" PRIu64 "): %d", h, size, r);
            return;
        }
        CHECK(r == 1 && start == (b >= size ? 0 : size - b) && end == size - 1,
              "range '%s' (size %" PRIu64 "): %d [%" PRIu64 ", %" PRIu64 "]", h, size, r, start,
              end);
        return;
    }
    a = decimal(spec, (size_t)(dash - spec));
    b = dash[1] ? decimal(dash + 1, strlen(dash + 1)) : UINT64_MAX;
    if (b < a) {
        CHECK(r == 0, "range '%s' ends before it starts, yet %d", h, r);
        return;
    }
    if (a >= size) {
        CHECK(r == -1, "range '%s' (size %" PRIu64 "): %d", h, size, r);
        return;
    }
    CHECK(r == 1 && start == a && end == (b >= size ? size - 1 : b) && start <= end && end < size,
          "range '%s' (size %" PRIu64 "): %d [%" PRIu64 ", %" PRIu64 "]", h, size, r, start, end);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t file_size = 0;
    uint8_t op;
    char *s;

    if (size < 1 || size > 4096)
        return 0;
    op = data[0] % 3;
    data++;
    size--;
    if (op == 2) {
        if (size < 8)
            return 0;
        memcpy(&file_size, data, 8);
        data += 8;
        size -= 8;
    }
    s = strndup((const char *)data, size);
    CHECK(s, "out of memory");
    if (op == 0)
        check_mode(s);
    else if (op == 1)
        check_bool(s);
    else
        check_range(s, file_size);
    free(s);
    return 0;
}
