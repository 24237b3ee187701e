/* The E2B API's state in the cluster, through the API server (kube/): API keys from one Secret,
 * sandboxes as SandboxClaims on warm pools. An E2B sandbox is the claim named by its ID, in the
 * API key's namespace, labelled SBX_E2B_LABEL_ID; what E2B's API says of it that a claim has no
 * field for (template ID, metadata, env vars) is kept in annotations. Its end (the timeout) is
 * the claim's lifecycle.shutdownTime with shutdownPolicy Delete, which the claim hands its
 * Sandbox: the controller deletes the Sandbox then, and a claim past its end is gone to E2B (the
 * store deletes it when it sees it). Thread-safe. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "error.h"

#define SBX_E2B_LABEL_ID     "e2b.sandboxd.dev/sandbox-id"
#define SBX_E2B_ANN_TEMPLATE "e2b.sandboxd.dev/template-id"
#define SBX_E2B_ANN_METADATA "e2b.sandboxd.dev/metadata" /* a JSON object of strings */
#define SBX_E2B_ANN_ENV      "e2b.sandboxd.dev/env-vars" /* likewise: for the sandbox's /init */

struct sbx_kube;
struct e2b_store;

struct e2b_store_opts {
    struct sbx_kube *kube; /* borrowed */
    const char *keys_ns;   /* the API keys' Secret */
    const char *keys_name;
    const char *lookup_ns; /* where sandboxes are looked for by ID alone (NULL: all) */
    uint64_t keys_ttl_ms;  /* the Secret is read again after this long */
};

int e2b_store_new(struct e2b_store **ret, const struct e2b_store_opts *o, struct sbx_error *err);
void e2b_store_free(struct e2b_store *s);

/* The namespace an API key stands for (the Secret's data: key -> namespace): 0, -EACCES for a
 * key not there, other < 0 when the Secret could not be read. */
int e2b_store_key_ns(struct e2b_store *s, const char *key, size_t len, char ns[64],
                     struct sbx_error *err);

/* The SandboxWarmPool a template ID names in ns: the pool of that name, else the one pool of
 * the SandboxTemplate of that name. 0 with pool set, -ENOENT when none. */
int e2b_store_pool(struct e2b_store *s, const char *ns, const char *tmpl, char pool[254],
                   struct sbx_error *err);

/* Creates the claim (obj's metadata.name is the ID). 1 created, 0 the name was taken. */
int e2b_store_create(struct e2b_store *s, const char *ns, json_t *obj, struct sbx_error *err);

/* The claim of id in ns when it is an E2B sandbox not past its end: 1 with *ret, 0 when none. */
int e2b_store_get(struct e2b_store *s, const char *ns, const char *id, json_t **ret,
                  struct sbx_error *err);

/* The E2B sandboxes of ns (an array of claims, new reference), at most max. */
int e2b_store_list(struct e2b_store *s, const char *ns, size_t max, json_t **ret,
                   struct sbx_error *err);

/* Deletes the claim (and so its Sandbox): 1, or 0 when it was not there. */
int e2b_store_delete(struct e2b_store *s, const char *ns, const char *id, struct sbx_error *err);

/* Moves the claim's end to `end`, and its Sandbox's when it has one. */
int e2b_store_set_end(struct e2b_store *s, json_t *claim, time_t end, struct sbx_error *err);

/* Waits, at most timeout_ms, for the claim to be Ready with a sandbox (and with need_ip, its pod
 * IP in its status): 1 with *ret (the claim), 0 when it was not in time, -ENOENT when it went. */
int e2b_store_wait_ready(struct e2b_store *s, const char *ns, const char *id, bool need_ip,
                         uint64_t timeout_ms, json_t **ret, struct sbx_error *err);

/* The token of the claim's sandbox (its Secret <sandbox>-sandboxd-token), malloc'ed; -ENOENT
 * when there is none. */
int e2b_store_token(struct e2b_store *s, const char *ns, const char *sandbox, char **ret,
                    struct sbx_error *err);

/* Where the sandbox of an ID is, for its traffic (no API key comes with it): its namespace and
 * the Sandbox's name. Cached a few seconds. 0, -ENOENT when no E2B sandbox has that ID. */
int e2b_store_locate(struct e2b_store *s, const char *id, char ns[64], char sandbox[64],
                     struct sbx_error *err);

/* The Sandboxes of ns by name (an object, new reference; at most 1,000), or with name the one
 * Sandbox as {name: sandbox} ({} when it is not there): what the answers read of their pods. */
int e2b_store_sandboxes(struct e2b_store *s, const char *ns, const char *name, json_t **ret,
                        struct sbx_error *err);

/* When the claim ends (its lifecycle.shutdownTime), or 0. */
time_t e2b_claim_end(json_t *claim);
/* The claim's Sandbox's name (status.sandbox.name), or NULL. */
const char *e2b_claim_sandbox(json_t *claim);
