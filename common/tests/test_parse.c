#include <errno.h>
#include <string.h>

#include "parse.h"
#include "tap.h"

static void duration(const char *s, int want_r, uint64_t want_ms)
{
    uint64_t ms = 12345;
    int r = sbx_parse_duration_ms(s, &ms);

    ok(r == want_r && (r < 0 || ms == want_ms), "duration \"%s\" -> %d %llu (want %d %llu)", s, r,
       (unsigned long long)ms, want_r, (unsigned long long)want_ms);
}

int main(void)
{
    long long v = 0;

    duration("10s", 0, 10000);
    duration("0", 0, 0);
    duration("1m30s", 0, 90000);
    duration("250ms", 0, 250);
    duration("1.5h", 0, 5400000);
    duration("2us", 0, 0);
    duration("", -EINVAL, 0);
    duration("10", -EINVAL, 0);
    duration("s", -EINVAL, 0);
    duration("-1s", -EINVAL, 0);
    duration("10x", -EINVAL, 0);
    duration("99999999999h", -ERANGE, 0);

    ok(sbx_parse_int("9090", 0, 65535, &v) == 0 && v == 9090, "int in range");
    ok(sbx_parse_int("65536", 0, 65535, &v) == -ERANGE, "int above range");
    ok(sbx_parse_int("12a", 0, 65535, &v) == -EINVAL, "int with junk");
    ok(sbx_parse_int("", 0, 65535, &v) == -EINVAL, "empty int");
    return done_testing();
}
