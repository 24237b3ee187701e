/* What a registry client needs to authenticate, as pure functions: the WWW-Authenticate
 * challenge of a 401 (RFC 7235; the Docker token flow's Bearer realm, service and scope, or
 * Basic), and the credentials a Docker config (.dockerconfigjson or the older .dockercfg) holds
 * for a registry host. No I/O. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "error.h"

enum sbx_auth_scheme { SBX_AUTH_BASIC = 1, SBX_AUTH_BEARER };

struct sbx_challenge {
    enum sbx_auth_scheme scheme;
    char realm[512];
    char service[256];
    char scope[512];
};

/* The Bearer challenge of header (a WWW-Authenticate value, which may list several challenges),
 * else its Basic one. Parameter names are case-insensitive; values are tokens or quoted strings
 * with backslash escapes. -EINVAL when the header is malformed, -ENOTSUP when it offers neither
 * scheme, -ENAMETOOLONG when a parameter does not fit. A Bearer challenge without a realm is
 * -EINVAL. */
int sbx_challenge_parse(const char *header, struct sbx_challenge *ret, struct sbx_error *err);

struct sbx_registry_creds {
    char user[256]; /* "" for anonymous */
    char pass[1024];
    char host[256]; /* the registry host they are for (a mirror's, or "" for the image's own);
                       sbx_dockercfg_find leaves it "" */
};

/* The credentials that the Docker config cfg (a parsed .dockerconfigjson, {"auths": {...}}, or
 * .dockercfg, the map alone) holds for registry host (as in an image reference, "docker.io" for
 * Docker Hub). Keys match by host: a scheme and a path in the key are ignored, Docker Hub's
 * names ("docker.io", "index.docker.io", "registry-1.docker.io", "https://index.docker.io/v1/")
 * are one, and "*.example.com" matches one more label. An entry gives "auth" (base64 of
 * user:password) or "username" and "password". Returns 1 and fills *ret when found, 0 when not;
 * -EINVAL naming the key when the matching entry is malformed. */
int sbx_dockercfg_find(json_t *cfg, const char *host, struct sbx_registry_creds *ret,
                       struct sbx_error *err);
