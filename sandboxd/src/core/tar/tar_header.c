/* The ustar header block with its GNU and pax extensions: numbers (octal and GNU base-256),
 * checksums, names split over name and prefix, and pax extended header records, written and
 * read. No I/O. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tar_internal.h"

/* Writes v as n - 1 octal digits and a NUL; false if it does not fit. */
bool sbx_tar_put_octal(char *f, size_t n, int64_t v)
{
    uint64_t u = (uint64_t)v;

    f[n - 1] = '\0';
    for (size_t i = n - 1; i-- > 0; u >>= 3)
        f[i] = (char)('0' + (u & 7));
    return v >= 0 && u == 0;
}

/* GNU base-256: a 0x80 marker (0xff when negative), then big-endian two's complement. */
static void put_base256(char *f, size_t n, int64_t v)
{
    uint64_t u = (uint64_t)v;

    for (size_t i = n - 1, k = 0; i > 0; i--, k++)
        f[i] = (char)(k < 8 ? (u >> (8 * k)) & 0xff : (v < 0 ? 0xff : 0));
    f[0] = (char)(v < 0 ? 0xff : 0x80);
}

/* Octal when it fits, else base-256; false when a pax record should carry the value too. */
bool sbx_tar_put_num(char *f, size_t n, int64_t v)
{
    if (sbx_tar_put_octal(f, n, v))
        return true;
    put_base256(f, n, v);
    return false;
}

/* Reads an octal (space or NUL terminated, possibly empty) or base-256 field. */
int sbx_tar_get_num(const char *f, size_t n, int64_t *ret)
{
    const unsigned char *b = (const unsigned char *)f;
    uint64_t v = 0;
    size_t i = 0;

    if (b[0] == 0x80 || b[0] == 0xff) {
        v = b[0] == 0xff ? UINT64_MAX : 0;
        for (i = 1; i < n; i++) {
            if (v >> 55 != 0 && v >> 55 != 0x1ff)
                return -EINVAL;
            v = v << 8 | b[i];
        }
        if ((b[0] == 0xff) != ((int64_t)v < 0))
            return -EINVAL;
        *ret = (int64_t)v;
        return 0;
    }
    while (i < n && b[i] == ' ')
        i++;
    for (; i < n && b[i] >= '0' && b[i] <= '7'; i++) {
        if (v >> 60)
            return -EINVAL;
        v = v << 3 | (uint64_t)(b[i] - '0');
    }
    if (i < n && b[i] != ' ' && b[i] != '\0')
        return -EINVAL;
    *ret = (int64_t)v;
    return 0;
}

/* The header's byte sum with the checksum field counted as spaces (unsigned, and the signed
 * variant some old tars wrote). */
static void header_sums(const uint8_t *b, int64_t *usum, int64_t *ssum)
{
    const size_t at = offsetof(struct tar_header, chksum);

    *usum = *ssum = 0;
    for (size_t i = 0; i < BLOCK; i++) {
        bool in = i >= at && i < at + sizeof(((struct tar_header *)0)->chksum);
        *usum += in ? ' ' : b[i];
        *ssum += in ? ' ' : (signed char)b[i];
    }
}

void sbx_tar_seal_header(struct tar_header *h)
{
    int64_t usum, ssum;

    header_sums((const uint8_t *)h, &usum, &ssum);
    sbx_tar_put_octal(h->chksum, 7, usum);
    h->chksum[7] = ' ';
}

bool sbx_tar_checksum_ok(const uint8_t *b)
{
    const struct tar_header *h = (const struct tar_header *)b;
    int64_t want, usum, ssum;

    if (sbx_tar_get_num(h->chksum, sizeof(h->chksum), &want) < 0)
        return false;
    header_sums(b, &usum, &ssum);
    return want == usum || want == ssum;
}

void sbx_tar_init_header(struct tar_header *h, char type, int64_t mode)
{
    memset(h, 0, sizeof(*h));
    h->typeflag = type;
    sbx_tar_put_octal(h->mode, sizeof(h->mode), mode);
    memcpy(h->magic, "ustar", 6);
    memcpy(h->version, "00", 2);
    sbx_tar_put_octal(h->devmajor, sizeof(h->devmajor), 0);
    sbx_tar_put_octal(h->devminor, sizeof(h->devminor), 0);
}

/* Fills name and prefix the ustar way; false when path does not fit them. */
bool sbx_tar_split_name(struct tar_header *h, const char *path, size_t len)
{
    if (len <= sizeof(h->name)) {
        memcpy(h->name, path, len);
        return true;
    }
    /* The prefix is path[0, i), the name path[i + 1, len), at a '/'. */
    for (size_t i = len - sizeof(h->name) - 1; i <= sizeof(h->prefix) && i + 1 < len; i++) {
        if (path[i] != '/')
            continue;
        memcpy(h->prefix, path, i);
        memcpy(h->name, path + i + 1, len - i - 1);
        return true;
    }
    return false;
}

char *sbx_tar_header_name(const struct tar_header *h)
{
    size_t nlen = strnlen(h->name, sizeof(h->name)), plen = 0;
    char *s;

    if (memcmp(h->magic, "ustar", 6) == 0) /* POSIX; GNU's "ustar  " has no prefix */
        plen = strnlen(h->prefix, sizeof(h->prefix));
    s = malloc(plen + nlen + 2);
    if (!s)
        return NULL;
    memcpy(s, h->prefix, plen);
    if (plen)
        s[plen++] = '/';
    memcpy(s + plen, h->name, nlen);
    s[plen + nlen] = '\0';
    return s;
}

/* ---- writing pax records ---- */

bool sbx_tar_pax_add(struct tar_pax *x, const char *key, const char *val, size_t vlen)
{
    size_t base = strlen(key) + vlen + 3, total = base + 1;
    char num[24];
    int d;

    for (;;) {
        d = snprintf(num, sizeof(num), "%zu", total);
        if (base + (size_t)d == total)
            break;
        total = base + (size_t)d;
    }
    if (x->len + total > x->cap)
        return false;
    x->len += (size_t)sprintf(x->buf + x->len, "%s %s=", num, key);
    memcpy(x->buf + x->len, val, vlen);
    x->len += vlen;
    x->buf[x->len++] = '\n';
    return true;
}

bool sbx_tar_pax_add_num(struct tar_pax *x, const char *key, int64_t v)
{
    char s[24];

    return sbx_tar_pax_add(x, key, s, (size_t)snprintf(s, sizeof(s), "%" PRId64, v));
}

/* ---- reading pax records ---- */

void sbx_tar_pending_clear(struct tar_pending *pd)
{
    free(pd->path);
    free(pd->linkpath);
    free(pd->longname);
    free(pd->longlink);
    memset(pd, 0, sizeof(*pd));
}

bool sbx_tar_pending_any(const struct tar_pending *pd)
{
    return pd->path || pd->linkpath || pd->longname || pd->longlink || pd->has_size ||
           pd->has_mtime || pd->sparse;
}

int sbx_tar_set_str(char **dst, const char *val, size_t len)
{
    free(*dst);
    *dst = NULL;
    if (len == 0)
        return 0;
    if (memchr(val, '\0', len))
        return -EINVAL;
    *dst = strndup(val, len);
    return *dst ? 0 : -ENOMEM;
}

/* A pax decimal: digits, with an optional '-' and fraction when ts is given. */
static int parse_decimal(const char *s, size_t len, uint64_t *ret, struct timespec *ts)
{
    size_t i = 0, digits = 0;
    bool neg = ts && len > 0 && s[0] == '-';
    uint64_t v = 0;
    long nsec = 0;

    for (i = neg; i < len && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -EINVAL;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (ts && i < len && s[i] == '.')
        for (long scale = 100000000; ++i < len && s[i] >= '0' && s[i] <= '9'; scale /= 10)
            nsec += (s[i] - '0') * scale;
    if (digits == 0 || i != len || (ts && v > INT64_MAX))
        return -EINVAL;
    *ret = v;
    if (ts) {
        ts->tv_sec = neg ? -(time_t)v - (nsec > 0) : (time_t)v;
        ts->tv_nsec = neg && nsec > 0 ? 1000000000 - nsec : nsec;
    }
    return 0;
}

static int pax_record(struct tar_pending *pd, const char *key, size_t klen, const char *val,
                      size_t vlen)
{
#define KEY_IS(k) (klen == sizeof(k) - 1 && memcmp(key, k, klen) == 0)
    uint64_t v;

    if (KEY_IS("path"))
        return sbx_tar_set_str(&pd->path, val, vlen);
    if (KEY_IS("linkpath"))
        return sbx_tar_set_str(&pd->linkpath, val, vlen);
    if (KEY_IS("size")) {
        pd->has_size = vlen > 0;
        return vlen ? parse_decimal(val, vlen, &pd->size, NULL) : 0;
    }
    if (KEY_IS("mtime")) {
        pd->has_mtime = vlen > 0;
        return vlen ? parse_decimal(val, vlen, &v, &pd->mtime) : 0;
    }
    if (klen > 11 && memcmp(key, "GNU.sparse.", 11) == 0)
        pd->sparse = true;
    return 0;
#undef KEY_IS
}

int sbx_tar_pax_parse(struct tar_pending *pd, const char *buf, size_t len, uint64_t offset,
                      struct sbx_error *err)
{
    const char *p = buf, *end = buf + len;

    while (p < end) {
        const char *rec = p, *key, *eq, *last;
        size_t rlen = 0;
        int r;

        for (; p < end && *p >= '0' && *p <= '9' && rlen <= META_MAX; p++)
            rlen = rlen * 10 + (size_t)(*p - '0');
        if (p == end || *p != ' ' || rlen > (size_t)(end - rec) || rec + rlen <= p + 1 ||
            rec[rlen - 1] != '\n')
            return sbx_error_set(err, EINVAL, "bad pax header record before offset %" PRIu64,
                                 offset);
        key = p + 1;
        last = rec + rlen - 1;
        eq = memchr(key, '=', (size_t)(last - key));
        if (!eq)
            return sbx_error_set(err, EINVAL, "bad pax header record before offset %" PRIu64,
                                 offset);
        r = pax_record(pd, key, (size_t)(eq - key), eq + 1, (size_t)(last - eq - 1));
        if (r < 0)
            return sbx_error_set(err, -r, "bad pax record '%.*s' before offset %" PRIu64,
                                 (int)(eq - key), key, offset);
        p = rec + rlen;
    }
    return 0;
}
