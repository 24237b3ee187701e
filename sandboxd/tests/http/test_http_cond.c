/* Conditional requests and range sets: entity tags, HTTP dates, If-None-Match before
 * If-Modified-Since, If-Range, several ranges. */
#include <errno.h>
#include <string.h>

#include "http_args.h"
#include "http_cond.h"
#include "tap.h"

static const char *const tag = "\"a1-14-65.000000001\"";

static void etags(void)
{
    struct stat a = {.st_ino = 0xa1, .st_size = 20, .st_mtim = {0x65, 1}}, b = a;
    char ea[SBX_HTTP_ETAG_MAX], eb[SBX_HTTP_ETAG_MAX];

    sbx_http_etag(&a, ea);
    ok(strcmp(ea, tag) == 0, "etag %s", ea);
    b.st_mtim.tv_nsec = 2;
    sbx_http_etag(&b, eb);
    ok(strcmp(ea, eb) != 0, "a nanosecond apart: %s", eb);
    b = a;
    b.st_ino = 0xa2;
    sbx_http_etag(&b, eb);
    ok(strcmp(ea, eb) != 0, "another inode: %s", eb);
    b = a;
    b.st_size = 21;
    sbx_http_etag(&b, eb);
    ok(strcmp(ea, eb) != 0, "another size: %s", eb);
}

static void dates(void)
{
    char s[SBX_HTTP_DATE_MAX];
    time_t t = 0;

    ok(sbx_http_parse_date("Sun, 06 Nov 1994 08:49:37 GMT", &t) == 0 && t == 784111777,
       "IMF-fixdate");
    ok(sbx_http_parse_date("Sunday, 06-Nov-94 08:49:37 GMT", &t) == 0 && t == 784111777, "RFC 850");
    ok(sbx_http_parse_date("Sun Nov  6 08:49:37 1994", &t) == 0 && t == 784111777, "asctime");
    ok(sbx_http_parse_date("Sun, 06 Nov 1994 08:49:37", &t) == -EINVAL, "no GMT");
    ok(sbx_http_parse_date("Sun, 06 Nov 1994 08:49:37 GMT x", &t) == -EINVAL, "trailing bytes");
    ok(sbx_http_parse_date("yesterday", &t) == -EINVAL, "not a date");
    ok(sbx_http_parse_date("", &t) == -EINVAL && sbx_http_parse_date(NULL, &t) == -EINVAL,
       "empty, none");
    sbx_http_format_date(784111777, s);
    ok(strcmp(s, "Sun, 06 Nov 1994 08:49:37 GMT") == 0, "formatted: %s", s);
}

static void not_modified(void)
{
    const char *d = "Sun, 06 Nov 1994 08:49:37 GMT"; /* 784111777 */

    ok(!sbx_http_not_modified(NULL, NULL, tag, 5), "no condition");
    ok(sbx_http_not_modified(tag, NULL, tag, 5), "the tag");
    ok(sbx_http_not_modified("W/\"a1-14-65.000000001\"", NULL, tag, 5), "weak comparison");
    ok(sbx_http_not_modified("\"x\", \"y\" ,\"a1-14-65.000000001\"", NULL, tag, 5), "in a list");
    ok(sbx_http_not_modified(" ,\"x\",,W/\"a1-14-65.000000001\", ", NULL, tag, 5),
       "empty elements and blanks");
    ok(sbx_http_not_modified("*", NULL, tag, 5), "*");
    ok(!sbx_http_not_modified("\"x\", \"y\"", NULL, tag, 5), "other tags");
    ok(!sbx_http_not_modified("a1-14-65.000000001", NULL, tag, 5), "unquoted: malformed");
    ok(!sbx_http_not_modified("\"x\" junk, \"a1-14-65.000000001\"", NULL, tag, 5),
       "malformed before the tag");
    ok(!sbx_http_not_modified("*, \"x\"", NULL, tag, 5), "* in a list");
    ok(sbx_http_not_modified(NULL, d, tag, 784111777), "modified at the date");
    ok(sbx_http_not_modified(NULL, d, tag, 784111776), "modified before the date");
    ok(!sbx_http_not_modified(NULL, d, tag, 784111778), "modified after the date");
    ok(!sbx_http_not_modified(NULL, "garbage", tag, 5), "a malformed date");
    ok(!sbx_http_not_modified("\"x\"", d, tag, 784111777),
       "If-None-Match decides, If-Modified-Since is not looked at");
    ok(sbx_http_not_modified(tag, d, tag, 784111778), "If-None-Match decides the other way");
}

static void if_range(void)
{
    const char *d = "Sun, 06 Nov 1994 08:49:37 GMT";

    ok(sbx_http_if_range(NULL, tag, 5, 10), "none");
    ok(sbx_http_if_range(tag, tag, 5, 10), "the tag");
    ok(!sbx_http_if_range("W/\"a1-14-65.000000001\"", tag, 5, 10), "weak never matches");
    ok(!sbx_http_if_range("\"other\"", tag, 5, 10), "another tag");
    ok(!sbx_http_if_range("\"a1-14-65.000000001\", \"x\"", tag, 5, 10), "a list");
    ok(sbx_http_if_range(d, tag, 784111777, 784111778), "the date");
    ok(!sbx_http_if_range(d, tag, 784111777, 784111777), "the date, not yet a strong validator");
    ok(!sbx_http_if_range(d, tag, 784111776, 784111800), "another date");
    ok(!sbx_http_if_range("nonsense", tag, 5, 10), "malformed");
}

static void ranges(void)
{
    struct sbx_http_range r[4];

    ok(sbx_http_parse_ranges("bytes=0-1,5-6", 20, r, 4) == 2 && r[0].start == 0 && r[0].end == 1 &&
           r[1].start == 5 && r[1].end == 6,
       "two ranges");
    ok(sbx_http_parse_ranges("bytes=0-1 , , -3, ", 20, r, 4) == 2 && r[1].start == 17 &&
           r[1].end == 19,
       "blanks, empty elements, a suffix");
    ok(sbx_http_parse_ranges("bytes=50-60,0-0", 20, r, 4) == 1 && r[0].start == 0 && r[0].end == 0,
       "an unsatisfiable range dropped");
    ok(sbx_http_parse_ranges("bytes=50-60,30-", 20, r, 4) == -1, "none satisfiable");
    ok(sbx_http_parse_ranges("bytes=0-1,x", 20, r, 4) == 0, "one malformed: ignored");
    ok(sbx_http_parse_ranges("bytes=1-0,2-3", 20, r, 4) == 0, "one backwards: ignored");
    ok(sbx_http_parse_ranges("bytes=0-1 2-3", 20, r, 4) == 0, "no comma: ignored");
    ok(sbx_http_parse_ranges("bytes= 0-1,2-3", 20, r, 4) == 0, "a blank first: ignored");
    ok(sbx_http_parse_ranges("bytes=0-1,2-3 ", 20, r, 4) == 0, "a blank last: ignored");
    ok(sbx_http_parse_ranges("bytes=,0-1", 20, r, 4) == 1, "an empty first element");
    ok(sbx_http_parse_ranges("bytes=0-0,1-1,2-2,3-3,4-4", 20, r, 4) == 0, "more than max: ignored");
    ok(sbx_http_parse_ranges("bytes=", 20, r, 4) == 0 &&
           sbx_http_parse_ranges("bytes=,", 20, r, 4) == 0,
       "no range: ignored");
    ok(sbx_http_parse_ranges("items=0-1", 20, r, 4) == 0 &&
           sbx_http_parse_ranges(NULL, 20, r, 4) == 0,
       "another unit, none");
    ok(sbx_http_parse_ranges("bytes=0-", 0, r, 4) == -1, "an empty file");
}

int main(void)
{
    etags();
    dates();
    not_modified();
    if_range();
    ranges();
    return done_testing();
}
