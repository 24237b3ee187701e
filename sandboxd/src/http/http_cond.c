/* Conditional requests on a file's entity tag and modification time (http_cond.h). */
#define _GNU_SOURCE
#include "http_cond.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void sbx_http_etag(const struct stat *st, char ret[SBX_HTTP_ETAG_MAX])
{
    snprintf(ret, SBX_HTTP_ETAG_MAX, "\"%" PRIx64 "-%" PRIx64 "-%" PRIx64 ".%09ld\"",
             (uint64_t)st->st_ino, (uint64_t)st->st_size, (uint64_t)st->st_mtim.tv_sec,
             (long)st->st_mtim.tv_nsec);
}

int sbx_http_parse_date(const char *s, time_t *ret)
{
    /* IMF-fixdate, RFC 850, asctime (RFC 9110 §5.6.7). */
    static const char *const formats[] = {"%a, %d %b %Y %H:%M:%S GMT", "%A, %d-%b-%y %H:%M:%S GMT",
                                          "%a %b %e %H:%M:%S %Y"};

    for (size_t i = 0; s && i < sizeof(formats) / sizeof(formats[0]); i++) {
        struct tm tm = {0};
        const char *end = strptime(s, formats[i], &tm);
        if (end && *end == '\0') {
            *ret = timegm(&tm);
            return 0;
        }
    }
    return -EINVAL;
}

void sbx_http_format_date(time_t t, char ret[SBX_HTTP_DATE_MAX])
{
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(ret, SBX_HTTP_DATE_MAX, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

static const char *skip_ows(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* An entity-tag at p ([W/] DQUOTE *etagc DQUOTE): its opaque part (quotes included) in
 * [*tag, *tag + *len), *weak; returns what follows it, or NULL when malformed. */
static const char *entity_tag(const char *p, const char **tag, size_t *len, bool *weak)
{
    const char *q;

    *weak = p[0] == 'W' && p[1] == '/';
    if (*weak)
        p += 2;
    if (*p != '"')
        return NULL;
    for (q = p + 1; *q && *q != '"'; q++)
        if ((unsigned char)*q < 0x21 || *q == 0x7f)
            return NULL;
    if (*q != '"')
        return NULL;
    *tag = p;
    *len = (size_t)(q + 1 - p);
    return q + 1;
}

static bool same_tag(const char *tag, size_t len, const char *etag)
{
    return strlen(etag) == len && memcmp(tag, etag, len) == 0;
}

/* Whether the list h ("*" or #entity-tag) holds etag by weak comparison. */
static bool none_match_hit(const char *h, const char *etag)
{
    const char *p = skip_ows(h);

    if (*p == '*')
        return *skip_ows(p + 1) == '\0';
    for (;;) {
        const char *tag;
        size_t len;
        bool weak;
        while (*p == ',' || *p == ' ' || *p == '\t')
            p++;
        if (*p == '\0')
            return false;
        p = entity_tag(p, &tag, &len, &weak);
        if (!p)
            return false;
        if (same_tag(tag, len, etag))
            return true;
        p = skip_ows(p);
        if (*p != ',' && *p != '\0')
            return false;
    }
}

bool sbx_http_not_modified(const char *if_none_match, const char *if_modified_since,
                           const char *etag, time_t mtime)
{
    time_t since;

    /* RFC 9110 §13.2.2: If-Modified-Since counts only without If-None-Match. */
    if (if_none_match)
        return none_match_hit(if_none_match, etag);
    if (if_modified_since && sbx_http_parse_date(if_modified_since, &since) == 0)
        return mtime <= since;
    return false;
}

bool sbx_http_if_range(const char *if_range, const char *etag, time_t mtime, time_t now)
{
    const char *p, *tag;
    size_t len;
    bool weak;
    time_t when;

    if (!if_range)
        return true;
    p = skip_ows(if_range);
    if (*p == '"' || (p[0] == 'W' && p[1] == '/')) {
        p = entity_tag(p, &tag, &len, &weak);
        return p && *skip_ows(p) == '\0' && !weak && same_tag(tag, len, etag);
    }
    return sbx_http_parse_date(p, &when) == 0 && when == mtime && mtime < now;
}
