#include "http_args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"

int sbx_http_parse_mode(const char *s, mode_t *ret)
{
    if (strlen(s) != 4 || s[0] != '0' || strspn(s + 1, "01234567") != 3)
        return -EINVAL;
    *ret = (mode_t)strtoul(s, NULL, 8);
    return 0;
}

/* A run of decimal digits at *s, saturated at UINT64_MAX; *s moves past it. -1 if none (strtoull
 * would take a sign or leading blanks too). */
static int digits(const char **s, uint64_t *ret)
{
    const char *p = *s;
    uint64_t v = 0;

    if (*p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d;
    }
    *s = p;
    *ret = v;
    return 0;
}

int sbx_http_parse_range(const char *h, uint64_t size, uint64_t *start, uint64_t *end)
{
    uint64_t a, b;

    if (!h || strncmp(h, "bytes=", 6) != 0)
        return 0;
    h += 6;
    if (*h == '-') {
        h++;
        if (digits(&h, &b) < 0 || *h)
            return 0;
        if (b == 0 || size == 0)
            return -1;
        *start = b >= size ? 0 : size - b;
        *end = size - 1;
        return 1;
    }
    if (digits(&h, &a) < 0 || *h++ != '-')
        return 0;
    if (*h == '\0') {
        b = UINT64_MAX;
    } else if (digits(&h, &b) < 0 || *h || b < a) {
        return 0; /* malformed, several ranges, or one that ends before it starts */
    }
    if (a >= size)
        return -1;
    *start = a;
    *end = b >= size ? size - 1 : b;
    return 1;
}

json_t *sbx_http_parse_move(const char *body, size_t len, const char **from, const char **to,
                            bool *overwrite)
{
    json_t *j = body ? json_loadb(body, len, 0, NULL) : NULL;
    int o = 0;

    if (!j || json_unpack(j, "{s:s, s:s, s?b}", "from", from, "to", to, "overwrite", &o) < 0) {
        json_decref(j);
        return NULL;
    }
    *overwrite = o != 0;
    return j;
}

int sbx_http_parse_bool(const char *s, bool *ret)
{
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};

    for (size_t i = 0; i < SBX_ARRAY_SIZE(yes); i++) {
        if (strcmp(s, yes[i]) == 0) {
            *ret = true;
            return 0;
        }
        if (strcmp(s, no[i]) == 0) {
            *ret = false;
            return 0;
        }
    }
    return -EINVAL;
}
