#include "parse.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    double ms;
} units[] = {
    {"ns", 1e-6}, {"us", 1e-3}, {"µs", 1e-3}, {"ms", 1}, {"s", 1e3}, {"m", 60e3}, {"h", 3600e3},
};

int sbx_parse_duration_ms(const char *s, uint64_t *ret)
{
    double total = 0;

    if (!s || !*s)
        return -EINVAL;
    if (strcmp(s, "0") == 0) {
        *ret = 0;
        return 0;
    }
    while (*s) {
        char *end;
        double v;
        size_t best = 0, best_len = 0;

        if (*s < '0' || *s > '9') {
            if (*s != '.')
                return -EINVAL;
        }
        errno = 0;
        v = strtod(s, &end);
        if (end == s || errno || v < 0)
            return -EINVAL;
        s = end;
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            size_t n = strlen(units[i].name);
            if (strncmp(s, units[i].name, n) == 0 && n > best_len) {
                best = i;
                best_len = n;
            }
        }
        if (!best_len)
            return -EINVAL;
        total += v * units[best].ms;
        s += best_len;
    }
    if (total > 1e15)
        return -ERANGE;
    *ret = (uint64_t)llround(total);
    return 0;
}

int sbx_parse_int(const char *s, long long min, long long max, long long *ret)
{
    char *end;
    long long v;

    if (!s || !*s)
        return -EINVAL;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (*end)
        return -EINVAL;
    if (errno == ERANGE || v < min || v > max)
        return -ERANGE;
    *ret = v;
    return 0;
}
