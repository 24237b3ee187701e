#include "http_args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int http_parse_mode(const char *s, mode_t *ret)
{
    if (strlen(s) != 4 || s[0] != '0' || strspn(s + 1, "01234567") != 3)
        return -EINVAL;
    *ret = (mode_t)strtoul(s, NULL, 8);
    return 0;
}

int http_parse_range(const char *h, uint64_t size, uint64_t *start, uint64_t *end)
{
    char *e1, *e2;
    unsigned long long a, b;

    if (!h || strncmp(h, "bytes=", 6) != 0 || strchr(h, ','))
        return 0;
    h += 6;
    if (*h == '-') {
        b = strtoull(h + 1, &e2, 10);
        if (e2 == h + 1 || *e2)
            return 0;
        if (b == 0 || size == 0)
            return -1;
        *start = b >= size ? 0 : size - b;
        *end = size - 1;
        return 1;
    }
    a = strtoull(h, &e1, 10);
    if (e1 == h || *e1 != '-')
        return 0;
    if (e1[1] == '\0') {
        b = size ? size - 1 : 0;
    } else {
        b = strtoull(e1 + 1, &e2, 10);
        if (*e2 || b < a)
            return 0;
    }
    if (a >= size)
        return -1;
    *start = a;
    *end = b >= size ? size - 1 : b;
    return 1;
}

json_t *http_parse_move(const char *body, size_t len, const char **from, const char **to,
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
