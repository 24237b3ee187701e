/* Decoding what an OCI registry serves for an image, as pure functions the fuzz target feeds:
 * manifests (an OCI index or Docker manifest list, an OCI or Docker v2 image manifest) and the
 * image config, whose Entrypoint, Cmd and WorkingDir a container runs by. No I/O. */
#pragma once

#include <jansson.h>
#include <stddef.h>

#include "error.h"

#define SBX_MT_OCI_INDEX    "application/vnd.oci.image.index.v1+json"
#define SBX_MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define SBX_MT_DOCKER_LIST  "application/vnd.docker.distribution.manifest.list.v2+json"
#define SBX_MT_DOCKER_IMAGE "application/vnd.docker.distribution.manifest.v2+json"
#define SBX_MANIFEST_ACCEPT                                                                        \
    SBX_MT_OCI_INDEX ", " SBX_MT_OCI_MANIFEST ", " SBX_MT_DOCKER_LIST ", " SBX_MT_DOCKER_IMAGE

/* The digest a manifest leads to. */
struct sbx_manifest_next {
    int is_index;     /* 1: digest names the platform's manifest; 0: the image's config */
    char digest[160]; /* "sha256:..." */
};

/* Decodes the manifest body (len bytes; content_type, the response's, may be NULL: then the
 * body's mediaType, else its shape, tells the kind). Of an index, the entry for os/arch (an
 * "arm64/v8" arch also names the variant; a variant the entry leaves out matches any); of an
 * image manifest, its config. -ENOENT when the index has no such platform, -ENOTSUP for
 * another kind (a schema 1 manifest), -EINVAL when malformed. */
int sbx_manifest_decode(const char *body, size_t len, const char *content_type, const char *os,
                        const char *arch, struct sbx_manifest_next *ret, struct sbx_error *err);

/* The image config body: *ret a new {"entrypoint": [..] or null, "cmd": [..] or null,
 * "workingDir": "..." (when set)} from its config's Entrypoint, Cmd and WorkingDir. -EINVAL
 * when malformed (not JSON, a field of the wrong type). */
int sbx_image_config_decode(const char *body, size_t len, json_t **ret, struct sbx_error *err);

/* Checks that body hashes to digest (sha256 or sha512). -EBADMSG when it does not. */
int sbx_digest_check(const char *digest, const void *body, size_t len, struct sbx_error *err);
