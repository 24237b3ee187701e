/* Image references as Kubernetes and the container runtimes read them: [host[:port]/]path
 * [:tag][@digest]. A name without a host is Docker Hub's ("docker.io"), and one there without a
 * "/" is under "library/"; a name without tag or digest means ":latest". Pure: no I/O. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define SBX_DOCKER_HUB "docker.io"

struct sbx_image_ref {
    char registry[256];   /* "docker.io", "ghcr.io", "127.0.0.1:5000" */
    char repository[256]; /* "library/busybox" */
    char tag[129];        /* "" when only a digest is given */
    char digest[160];     /* "sha256:<64 hex>" or "sha512:<128 hex>", or "" */
};

/* Parses s. -EINVAL with the reason when it is not a reference (upper case in the path, an empty
 * component, a bad tag or digest, an unsupported digest algorithm, too long). */
int sbx_image_ref_parse(const char *s, struct sbx_image_ref *ret, struct sbx_error *err);

/* The host that serves the registry's API: Docker Hub's API is "registry-1.docker.io". */
const char *sbx_image_ref_endpoint(const struct sbx_image_ref *ref);

/* What the manifest is asked for by: the digest when there is one, else the tag. */
const char *sbx_image_ref_reference(const struct sbx_image_ref *ref);

/* True when s is host[:port] or [v6]:port: letters, digits, "-" and "." in the name. */
bool sbx_image_host_valid(const char *s);

/* True when s is a repository path: "/"-separated components of lower-case letters and digits
 * joined by ".", "_", "__" or runs of "-". */
bool sbx_image_path_valid(const char *s);

/* True when host is one of Docker Hub's names: "docker.io", "index.docker.io",
 * "registry-1.docker.io". */
bool sbx_image_is_hub(const char *host);

/* True when s is "sha256:" and 64 lower-case hex digits, or "sha512:" and 128. */
bool sbx_digest_valid(const char *s);
