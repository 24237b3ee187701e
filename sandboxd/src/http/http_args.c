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

/* The range-spec [h, end) against size, answered as by sbx_http_parse_range. */
static int parse_spec(const char *h, const char *end, uint64_t size, uint64_t *start,
                      uint64_t *ret_end)
{
    uint64_t a, b;

    if (*h == '-') {
        h++;
        if (digits(&h, &b) < 0 || h != end)
            return 0;
        if (b == 0 || size == 0)
            return -1;
        *start = b >= size ? 0 : size - b;
        *ret_end = size - 1;
        return 1;
    }
    if (digits(&h, &a) < 0 || h == end || *h++ != '-')
        return 0;
    if (h == end) {
        b = UINT64_MAX;
    } else if (digits(&h, &b) < 0 || h != end || b < a) {
        return 0; /* malformed, or a range that ends before it starts */
    }
    if (a >= size)
        return -1;
    *start = a;
    *ret_end = b >= size ? size - 1 : b;
    return 1;
}

int sbx_http_parse_range(const char *h, uint64_t size, uint64_t *start, uint64_t *end)
{
    if (!h || strncmp(h, "bytes=", 6) != 0)
        return 0;
    return parse_spec(h + 6, h + strlen(h), size, start, end);
}

static const char *skip_blanks(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

int sbx_http_parse_ranges(const char *h, uint64_t size, struct sbx_http_range *ret, size_t max)
{
    size_t n = 0, specs = 0;
    const char *p, *q;

    if (!h || strncmp(h, "bytes=", 6) != 0)
        return 0;
    /* RFC 9110 §5.6.1.2 as a recipient reads a list: [ element ] *( OWS "," OWS [ element ] );
     * no blank before the first element nor after the last (a single range is read so too). */
    for (p = h + 6;; p = skip_blanks(q + 1)) {
        if (*p != ',' && *p != '\0') {
            const char *end = p + strcspn(p, ", \t");
            uint64_t a, b;
            int r = ++specs > max ? 0 : parse_spec(p, end, size, &a, &b);
            if (r == 0)
                return 0;
            if (r > 0)
                ret[n++] = (struct sbx_http_range){a, b};
            p = end;
        }
        q = skip_blanks(p);
        if (*q == '\0' && q != p)
            return 0;
        if (*q == '\0')
            break;
        if (*q != ',')
            return 0;
    }
    if (specs == 0)
        return 0;
    return n ? (int)n : -1;
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
