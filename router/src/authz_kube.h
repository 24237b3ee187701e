/* What the authorizer asks the API server: a TokenReview of a bearer token, and the token in a
 * sandbox's token Secret. On the kube/ client; blocking, each bounded by its request timeout. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "authz_cache.h"
#include "error.h"

struct sbx_kube;

/* POSTs a TokenReview of token[0..len) (audiences: comma-separated, or NULL). 0 when the API
 * server authenticated it, -EACCES when not; else the request failed (-EIO, -ETIMEDOUT, ...; a
 * refusal of the review itself, such as 403 for a router without the right, is -EIO). */
int sbx_authz_tokenreview(struct sbx_kube *k, const char *token, size_t len, const char *audiences,
                          struct sbx_error *err);

/* The name of sandbox `name`'s token Secret, as the controller names it (controller/src/
 * podspec.c: "<name>-sandboxd-token"; a router's sandbox name, a DNS-1123 label, always fits). */
#define SBX_SANDBOX_TOKEN_SECRET_SUFFIX "-sandboxd-token"
#define SBX_SANDBOX_TOKEN_KEY           "token"

/* GETs sandbox (ns, name)'s token Secret: 0 with the SHA-256 of its token in digest, -ENOENT when
 * there is no such Secret or it holds no token; else the request failed. */
int sbx_authz_sandbox_secret(struct sbx_kube *k, const char *ns, const char *name,
                             uint8_t digest[SBX_DIGEST_LEN], struct sbx_error *err);
