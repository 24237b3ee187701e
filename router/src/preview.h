/* Preview URLs: how a browser names a port of a sandbox without headers, by the host
 * "<port>-<name>.<namespace>.<preview domain>" (wildcard DNS) or by the path
 * "/s/<namespace>/<name>/<port>/..." (any host). Knows no socket: it reads a Host value or a
 * request target and gives the routing keys and the path to forward. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct sbx_preview {
    char id[64], ns[64], port[8];
    const char *path; /* the path form: what follows the prefix, to forward */
    size_t path_len;  /* 0: the target needs its slash (the caller redirects) */
};

/* The length of the labels before ".<domain>" in host (without or with ":port", a root's dot
 * allowed; the domain in any case), or -1 when host is not under domain (or domain is empty). */
long sbx_host_under(const char *host, size_t len, const char *domain);

/* 1 when host (without or with ":port") is a preview host under domain, 0 when it is not under
 * it, -EINVAL when it is but does not name a port and a sandbox. */
int sbx_preview_from_host(const char *host, size_t len, const char *domain, struct sbx_preview *p);

/* 1 when the target begins "/s/": then ns, id and port are its next three segments and path the
 * rest ("/..." or "?..." after a slash); 0 when it does not; -EINVAL when a segment is missing or
 * too long. */
int sbx_preview_from_path(const char *target, size_t len, struct sbx_preview *p);
