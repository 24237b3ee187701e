/* A client of OCI registries (the distribution API v2) over libcurl that finds what an image
 * runs: the manifest of a reference (an index or manifest list narrowed to one platform), then
 * the image config, whose Entrypoint and Cmd it returns. Knows nothing of Kubernetes: the caller
 * hands it the reference, the platform and the credentials to try.
 *
 * Mirrors: an image is asked at each mirror of its registry (mirrors.h) in the order given, then
 * at the registry itself, as containerd does with a hosts.toml: any failure at a mirror (it
 * lacks the image, cannot be reached, refuses, answers badly) passes to the next host; the
 * lookup fails only when the registry itself fails too, and its message then names each mirror's
 * failure before the registry's. A whole lookup (manifest, index, config) is made at one host.
 * Digests are the same wherever an image is found, so the caches below serve all of them.
 *
 * Authentication: anonymous first; a 401's WWW-Authenticate challenge is answered as it asks,
 * Bearer (a token from its realm for its service and the repository's pull scope, asked
 * anonymously or with the credentials) or Basic (the credentials). Each credential given is
 * tried in turn until one is let in; at each host only the credentials given for it (their
 * host, the mirror's or "" for the image's registry).
 *
 * Bounds: every request has the timeout, a manifest and a config their size limits, redirects
 * at most 5 (credentials never follow one to another host). Everything fetched is checked
 * against its digest.
 *
 * Caches: a config by its digest (content-addressed, so one fetch serves every tag and sandbox
 * naming it), and what a reference resolved to (its config digest) for tag_ttl_ms, keyed by the
 * reference, platform and credentials (a private image's result never serves a caller without
 * them). Each holds at most cache_max entries; the oldest goes first. Thread-safe. */
#pragma once

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "imageref.h"
#include "mirrors.h"
#include "registry_auth.h"

#define SBX_REGISTRY_CREDS_MAX 16 /* credentials a query may give, for all its hosts */

struct sbx_registry_opts {
    long timeout_ms;      /* one request, connecting included */
    size_t manifest_max;  /* bytes */
    size_t config_max;    /* bytes */
    uint64_t tag_ttl_ms;  /* a reference's resolution is reused this long */
    size_t cache_max;     /* entries in each cache */
    const char *insecure; /* comma-separated host[:port] reached over plain HTTP; may be NULL */
    const char *ca_file;  /* CA bundle for HTTPS; NULL: the system's */
    const struct sbx_mirrors *mirrors; /* copied; NULL: none */
    const char *user_agent;
};

struct sbx_registry_query {
    const struct sbx_image_ref *ref;
    const char *os, *arch;                  /* "linux", "amd64" (or "arm64/v8") */
    const struct sbx_registry_creds *creds; /* tried in turn at their host; none: anonymous */
    size_t ncreds;
};

struct sbx_registry_stats {
    uint64_t resolved, hits, manifests, configs, tokens, failures;
    uint64_t mirror_hits;   /* lookups resolved at a mirror */
    uint64_t mirror_misses; /* mirrors that failed a lookup, which passed to the next host */
};

struct sbx_registry;

int sbx_registry_new(const struct sbx_registry_opts *opts, struct sbx_registry **ret,
                     struct sbx_error *err);
/* Accepts NULL. No request may be in flight (see sbx_registry_cancel). */
void sbx_registry_free(struct sbx_registry *r);

/* Ends requests in flight with -ECANCELED and fails later ones: a stopping controller gets its
 * lookup threads back at once. */
void sbx_registry_cancel(struct sbx_registry *r);

/* The hosts ref is asked at, in order (sbx_mirrors_endpoints): whose credentials a query for it
 * should give. */
size_t sbx_registry_endpoints(struct sbx_registry *r, const struct sbx_image_ref *ref,
                              struct sbx_registry_endpoint *out, size_t max);

/* The cached result of q, without any request: 1 with *ret (a new {"entrypoint", "cmd",
 * "workingDir"?, "digest"}), 0 when not cached. */
int sbx_registry_cached(struct sbx_registry *r, const struct sbx_registry_query *q, json_t **ret);

/* Resolves q, from the caches where it can, else from the registry (blocking, each request
 * bounded). *ret as sbx_registry_cached's. Failures: -ECONNREFUSED, -ETIMEDOUT, -EHOSTUNREACH
 * (the registry cannot be reached), -EACCES (refused: no or wrong credentials), -ENOENT (no such
 * repository, tag or platform), -EFBIG (over a size limit), -EBADMSG (content not matching its
 * digest), -ENOTSUP (a kind of manifest not served), -EPROTO (a bad answer), -ECANCELED; the
 * message names the image. */
int sbx_registry_resolve(struct sbx_registry *r, const struct sbx_registry_query *q, json_t **ret,
                         struct sbx_error *err);

/* The key q's result is cached under: the reference, the platform and a hash of the credentials
 * (so a result serves only callers who gave the same). */
void sbx_registry_query_key(const struct sbx_registry_query *q, char *buf, size_t size);

void sbx_registry_stats(struct sbx_registry *r, struct sbx_registry_stats *ret);
