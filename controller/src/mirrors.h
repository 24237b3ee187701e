/* Registry mirrors (--registry-mirror) as pure functions: the hosts an image is asked at, in
 * order, and the repository it has at each. A mirror is host[:port][/path-prefix]: repository
 * "library/python" of docker.io is "<prefix>/library/python" at the mirror, so one registry (a
 * Harbor proxy-cache project, a distribution pull-through cache, an air-gapped copy) can serve
 * several origins side by side under a prefix each. registry.c says when a mirror's failure
 * passes to the next host. No I/O. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "imageref.h"

#define SBX_MIRRORS_MAX 32

struct sbx_mirror {
    char registry[256]; /* the registry mirrored, "docker.io" for every Docker Hub name */
    char host[256];     /* the mirror's host[:port] */
    char prefix[256];   /* "" or a repository path put before the image's repository */
};

struct sbx_mirrors {
    struct sbx_mirror m[SBX_MIRRORS_MAX];
    size_t n;
};

/* Parses spec, "REGISTRY=MIRROR[,REGISTRY=MIRROR...]" (NULL or "": none); a registry named
 * again gets another mirror, asked after the earlier ones. -EINVAL naming the entry and why when
 * an entry is not REGISTRY=MIRROR, a host is not host[:port] (a scheme is refused: plain-HTTP
 * hosts are named by --insecure-registries), a prefix is not a repository path, a part is too
 * long, or there are more than SBX_MIRRORS_MAX entries. */
int sbx_mirrors_parse(const char *spec, struct sbx_mirrors *ret, struct sbx_error *err);

/* One host an image is asked at. */
struct sbx_registry_endpoint {
    char host[256];       /* connected to: the mirror, or the registry's API host */
    char name[256];       /* whose credentials apply: the mirror's host, or ref->registry */
    char repository[520]; /* the repository there: the mirror's prefix, then ref's */
    bool mirror;
};

/* The endpoints ref is asked at, in order, into out (room for max; SBX_MIRRORS_MAX + 1 always
 * suffice): the mirrors of its registry (matched without regard to case, Docker Hub's names as
 * one) as given, then the registry itself. Returns how many. */
size_t sbx_mirrors_endpoints(const struct sbx_mirrors *m, const struct sbx_image_ref *ref,
                             struct sbx_registry_endpoint *out, size_t max);
