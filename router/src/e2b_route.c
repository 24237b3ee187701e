#define _GNU_SOURCE
#include "e2b_route.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "preview.h"

bool sbx_e2b_id_valid(const char *s, size_t len)
{
    if (len == 0 || len > SBX_E2B_ID_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
            return false;
    return true;
}

int sbx_e2b_from_host(const char *host, size_t len, const char *domain, char id[64], char port[8])
{
    long under = sbx_host_under(host, len, domain);
    size_t n = under > 0 ? (size_t)under : 0, plen;
    const char *dash;

    if (under < 0)
        return 0;
    /* "<port>-<id>" */
    if (memchr(host, '.', n) || !(dash = memchr(host, '-', n)))
        return -EINVAL;
    plen = (size_t)(dash - host);
    if (plen == 0 || plen > 5 || strspn(host, "0123456789") < plen ||
        !sbx_e2b_id_valid(dash + 1, n - plen - 1))
        return -EINVAL;
    memcpy(port, host, plen);
    port[plen] = '\0';
    memcpy(id, dash + 1, n - plen - 1);
    id[n - plen - 1] = '\0';
    return 1;
}

static bool is(const char *s, size_t len, const char *lit)
{
    return len == strlen(lit) && memcmp(s, lit, len) == 0;
}

/* The operation of "/sandboxes[/{id}[/verb]]" by method; rest is what follows "/sandboxes". */
static enum sbx_e2b_op op_of(const char *m, size_t ml, const char *rest, size_t len,
                             struct sbx_e2b_req *r, bool v2)
{
    const char *slash;
    size_t idlen;

    if (len == 0 || is(rest, len, "/"))
        return is(m, ml, "POST")  ? SBX_E2B_CREATE
               : is(m, ml, "GET") ? SBX_E2B_LIST
                                  : SBX_E2B_BAD_METHOD;
    if (rest[0] != '/')
        return SBX_E2B_NONE; /* "/sandboxesfoo" */
    rest++, len--;
    slash = memchr(rest, '/', len);
    idlen = slash ? (size_t)(slash - rest) : len;
    if (sbx_e2b_id_valid(rest, idlen))
        memcpy(r->id, rest, idlen), r->id[idlen] = '\0';
    else
        r->bad_id = true;
    if (!slash)
        return v2                    ? SBX_E2B_UNSUPPORTED
               : is(m, ml, "GET")    ? SBX_E2B_GET
               : is(m, ml, "DELETE") ? SBX_E2B_DELETE
                                     : SBX_E2B_BAD_METHOD;
    rest = slash + 1;
    len -= idlen + 1;
    if (is(rest, len, "timeout") && !v2)
        return is(m, ml, "POST") ? SBX_E2B_TIMEOUT : SBX_E2B_BAD_METHOD;
    if (is(rest, len, "connect"))
        return is(m, ml, "POST") ? SBX_E2B_CONNECT : SBX_E2B_BAD_METHOD;
    return SBX_E2B_UNSUPPORTED;
}

void sbx_e2b_parse(const char *method, size_t method_len, const char *target, size_t len,
                   struct sbx_e2b_req *r)
{
    const char *q = memchr(target, '?', len);
    size_t plen = q ? (size_t)(q - target) : len;
    bool v2 = plen >= 3 && memcmp(target, "/v2", 3) == 0;
    const char *path = v2 ? target + 3 : target;

    memset(r, 0, sizeof(*r));
    if (q) {
        r->query = q + 1;
        r->query_len = len - plen - 1;
    }
    if (v2)
        plen -= 3;
    if (plen < 10 || memcmp(path, "/sandboxes", 10) != 0)
        return;
    r->op = op_of(method, method_len, path + 10, plen - 10, r, v2);
}

static int hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c |= 0x20;
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

bool sbx_e2b_query(const char *q, size_t len, const char *name, char *out, size_t size)
{
    size_t nlen = strlen(name);

    for (size_t at = 0; q && at < len;) {
        const char *amp = memchr(q + at, '&', len - at);
        size_t end = amp ? (size_t)(amp - q) : len, o = 0;
        if (end - at > nlen && q[at + nlen] == '=' && memcmp(q + at, name, nlen) == 0) {
            for (size_t i = at + nlen + 1; i < end; i++) {
                char c = q[i];
                if (c == '+')
                    c = ' ';
                else if (c == '%' && i + 2 < end && hex(q[i + 1]) >= 0 && hex(q[i + 2]) >= 0)
                    c = (char)(hex(q[i + 1]) * 16 + hex(q[i + 2])), i += 2;
                if (o + 1 >= size)
                    return false;
                out[o++] = c;
            }
            out[o] = '\0';
            return true;
        }
        at = end + 1;
    }
    return false;
}

int sbx_e2b_quantity(const char *s, double *ret)
{
    static const struct {
        const char *suffix;
        double factor;
    } units[] = {
        {"", 1},        {"m", 1e-3},    {"k", 1e3},     {"M", 1e6},     {"G", 1e9},
        {"T", 1e12},    {"P", 1e15},    {"E", 1e18},    {"Ki", 0x1p10}, {"Mi", 0x1p20},
        {"Gi", 0x1p30}, {"Ti", 0x1p40}, {"Pi", 0x1p50}, {"Ei", 0x1p60},
    };
    char *end;
    double v;

    /* strtod alone would take "inf", "nan", hex and a sign */
    if (!s || !((*s >= '0' && *s <= '9') || *s == '.') || strpbrk(s, "xX"))
        return -EINVAL;
    v = strtod(s, &end);
    if (end == s || !isfinite(v))
        return -EINVAL;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcmp(end, units[i].suffix) == 0) {
            *ret = v * units[i].factor;
            return isfinite(*ret) ? 0 : -EINVAL;
        }
    return -EINVAL;
}
