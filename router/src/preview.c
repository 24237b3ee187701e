#define _GNU_SOURCE
#include "preview.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int copy(char *dst, size_t size, const char *s, size_t len)
{
    if (len == 0 || len >= size)
        return -EINVAL;
    memcpy(dst, s, len);
    dst[len] = '\0';
    return 0;
}

long sbx_host_under(const char *host, size_t len, const char *domain)
{
    size_t dlen = domain ? strlen(domain) : 0, n = len;

    if (dlen == 0)
        return -1;
    for (size_t i = len; i > 0; i--) /* a port after the name (not inside an IPv6 literal) */
        if (host[i - 1] == ':') {
            n = i - 1;
            break;
        } else if (host[i - 1] < '0' || host[i - 1] > '9') {
            break;
        }
    if (n > 0 && host[n - 1] == '.')
        n--; /* the root's dot */
    if (n <= dlen + 1 || host[n - dlen - 1] != '.' || strncasecmp(host + n - dlen, domain, dlen))
        return -1;
    return (long)(n - dlen - 1);
}

int sbx_preview_from_host(const char *host, size_t len, const char *domain, struct sbx_preview *p)
{
    long under = sbx_host_under(host, len, domain);
    size_t n = under > 0 ? (size_t)under : 0;
    const char *dot, *dash;

    memset(p, 0, sizeof(*p));
    if (under < 0)
        return 0;
    /* "<port>-<name>.<namespace>" */
    if (!(dot = memchr(host, '.', n)) || memchr(dot + 1, '.', n - (size_t)(dot + 1 - host)))
        return -EINVAL;
    if (!(dash = memchr(host, '-', (size_t)(dot - host))))
        return -EINVAL;
    if (copy(p->port, sizeof(p->port), host, (size_t)(dash - host)) < 0 ||
        copy(p->id, sizeof(p->id), dash + 1, (size_t)(dot - dash - 1)) < 0 ||
        copy(p->ns, sizeof(p->ns), dot + 1, n - (size_t)(dot + 1 - host)) < 0)
        return -EINVAL;
    return 1;
}

/* The next segment of s[*at, len): its start and length; the cursor moves past it and its slash. */
static int segment(const char *s, size_t len, size_t *at, const char **seg, size_t *seg_len)
{
    size_t i = *at;

    while (i < len && s[i] != '/' && s[i] != '?')
        i++;
    *seg = s + *at;
    *seg_len = i - *at;
    *at = i < len && s[i] == '/' ? i + 1 : i;
    return *seg_len ? 0 : -EINVAL;
}

int sbx_preview_from_path(const char *target, size_t len, struct sbx_preview *p)
{
    const char *ns, *id, *port;
    size_t at = 3, ns_len, id_len, port_len;

    memset(p, 0, sizeof(*p));
    if (len < 3 || strncmp(target, "/s/", 3) != 0)
        return 0;
    if (segment(target, len, &at, &ns, &ns_len) < 0 || target[at - 1] != '/' ||
        segment(target, len, &at, &id, &id_len) < 0 || target[at - 1] != '/' ||
        segment(target, len, &at, &port, &port_len) < 0)
        return -EINVAL;
    if (copy(p->ns, sizeof(p->ns), ns, ns_len) < 0 || copy(p->id, sizeof(p->id), id, id_len) < 0 ||
        copy(p->port, sizeof(p->port), port, port_len) < 0)
        return -EINVAL;
    if (at < len && target[at - 1] == '/') { /* "/s/ns/id/port/rest": "/rest" */
        p->path = target + at - 1;
        p->path_len = len - at + 1;
    } else if (at == len && target[len - 1] == '/') { /* "/s/ns/id/port/" */
        p->path = target + len - 1;
        p->path_len = 1;
    } /* "/s/ns/id/port" or "...port?q": no slash, redirected */
    return 1;
}
