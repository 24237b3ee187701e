/* libFuzzer target for the REST API's query parameters and headers, parsed by http_args.c and
 * sbx_http_parse_bool as the handlers call them: mode= (PUT /v1/files, PUT /v1/dirs),
 * recursive= and parents= (booleans), and the Range, If-None-Match, If-Range and date headers
 * of GET /v1/files (http_cond.c).
 *
 * Input: one byte choosing the parser, then (for Range and range sets) 8 bytes of file size,
 * then the value (cut at a NUL). Each parser is held against the grammar it documents, written
 * as a POSIX regular expression here, or against another parser already held to one:
 *   mode   accepted exactly when ^0[0-7]{3}$, and then the octal value;
 *   bool   accepted exactly for Go's strconv.ParseBool spellings;
 *   Range  honoured (1 or -1) only for ^bytes=([0-9]+-[0-9]*|-[0-9]+)$; when 1,
 *          start <= end < size and the range is the one the header names, clamped to the size;
 *   range set  exactly the ranges sbx_http_parse_range gives for each comma-separated element
 *          (blanks around commas, empty elements skipped), in order; 0 when one is malformed,
 *          there are more than the maximum, or blanks start the set or end it without a
 *          comma; -1 when none is satisfiable;
 *   conditions  If-None-Match matches the file's tag when it is the tag, W/ and the tag, or *,
 *          and never when the value does not hold the tag's opaque part (nor is *); If-Range
 *          never honours a weak tag; a date that parses formats to an IMF-fixdate that parses
 *          to the same time. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuzz_box.h"
#include "http_args.h"
#include "http_cond.h"

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

#define MAX_SET 4

/* What sbx_http_parse_ranges must answer for h, from sbx_http_parse_range on each element. */
static int expected_set(const char *h, uint64_t size, struct sbx_http_range *want)
{
    char *copy, *save = NULL, *el, one[4200];
    int n = 0, specs = 0, verdict = 1;

    if (strncmp(h, "bytes=", 6) != 0)
        return 0;
    /* No blank before the first element, nor after the last unless a comma follows it. */
    if (strchr(" \t", h[6]) && h[6])
        return 0;
    for (size_t len = strlen(h); len > 6 && strchr(" \t", h[len - 1]); len--)
        if (len - 1 == 6 || !strchr(" \t,", h[len - 2]))
            return 0;
    copy = strdup(h + 6);
    CHECK(copy, "out of memory");
    for (el = strtok_r(copy, ",", &save); el && verdict; el = strtok_r(NULL, ",", &save)) {
        size_t len;
        uint64_t a, b;
        int r;
        el += strspn(el, " \t");
        for (len = strlen(el); len && (el[len - 1] == ' ' || el[len - 1] == '\t'); len--)
            ;
        el[len] = '\0';
        if (!len)
            continue;
        if (++specs > MAX_SET || strpbrk(el, " \t")) {
            verdict = 0;
            break;
        }
        snprintf(one, sizeof(one), "bytes=%s", el);
        r = sbx_http_parse_range(one, size, &a, &b);
        if (r == 0)
            verdict = 0;
        else if (r > 0)
            want[n++] = (struct sbx_http_range){a, b};
    }
    free(copy);
    if (!verdict || specs == 0)
        return 0;
    return n ? n : -1;
}

static void check_set(const char *h, uint64_t size)
{
    struct sbx_http_range got[MAX_SET], want[MAX_SET];
    int n = sbx_http_parse_ranges(h, size, got, MAX_SET), e = expected_set(h, size, want);

    CHECK(n == e, "range set '%s' (size %" PRIu64 "): %d, expected %d", h, size, n, e);
    for (int i = 0; i < n; i++)
        CHECK(got[i].start == want[i].start && got[i].end == want[i].end && got[i].end < size,
              "range set '%s': range %d [%" PRIu64 ", %" PRIu64 "]", h, i, got[i].start,
              got[i].end);
}

static void check_cond(const char *s)
{
    static const char *const tag = "\"a1-14-65.000000001\"";
    char weak[64], formatted[SBX_HTTP_DATE_MAX];
    bool hit = sbx_http_not_modified(s, NULL, tag, 5);
    time_t t, again;

    snprintf(weak, sizeof(weak), "W/%s", tag);
    if (!strcmp(s, tag) || !strcmp(s, weak) || !strcmp(s, "*"))
        CHECK(hit, "If-None-Match '%s' does not match", s);
    if (!strstr(s, "a1-14-65.000000001") && !strchr(s, '*'))
        CHECK(!hit, "If-None-Match '%s' matches without the tag", s);
    if (!strncmp(s, "W/", 2) || !strstr(s, tag))
        CHECK(!sbx_http_if_range(s, tag, 5, 10) || sbx_http_parse_date(s, &t) == 0,
              "If-Range '%s' honoured", s);
    CHECK(sbx_http_if_range(NULL, tag, 5, 10), "no If-Range");
    if (sbx_http_parse_date(s, &t) == 0) {
        sbx_http_format_date(t, formatted);
        CHECK(sbx_http_parse_date(formatted, &again) == 0 && again == t,
              "date '%s' -> '%s' does not round-trip", s, formatted);
        CHECK(sbx_http_not_modified(NULL, s, tag, t) && !sbx_http_not_modified(NULL, s, tag, t + 1),
              "If-Modified-Since '%s'", s);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t file_size = 0;
    uint8_t op;
    char *s;

    if (size < 1 || size > 4096)
        return 0;
    op = data[0] % 5;
    data++;
    size--;
    if (op == 2 || op == 3) {
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
    else if (op == 2)
        check_range(s, file_size);
    else if (op == 3)
        check_set(s, file_size);
    else
        check_cond(s);
    free(s);
    return 0;
}
