/* Kubernetes objects as every client of the API reads and writes them: metadata fields, owner
 * references, conditions, resourceVersions and RFC 3339 times; create, delete, patch and status
 * updates with the answers that count as done. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "error.h"
#include "kube.h"

/* Splits "ns/name": copies ns into buf, points *name into key. Returns 0 or -EINVAL. */
int sbx_split_key(const char *key, char *ns, size_t nssz, const char **name);

/* metadata.<field> as a string, or NULL. */
const char *sbx_meta_str(json_t *obj, const char *field);

/* The ownerReference of obj with controller: true, or NULL (borrowed). */
json_t *sbx_controller_ref(json_t *obj);

/* True when obj's controller reference has this kind (and uid, when uid is not NULL). */
bool sbx_controlled_by(json_t *obj, const char *kind, const char *uid);

/* The condition of obj's status with this type, or NULL (borrowed). */
json_t *sbx_condition(json_t *obj, const char *type);

/* True when obj's Ready condition is True. */
bool sbx_is_ready(json_t *obj);

/* POSTs obj to path. Returns 1 when created, 0 when it already existed (409), < 0 on failure
 * (-EINVAL when the server refused it as invalid). */
int sbx_api_create(struct sbx_kube *k, const char *path, json_t *obj, struct sbx_error *err);

/* DELETEs path; returns 1 when deleted, 0 when it was not there. */
int sbx_api_delete(struct sbx_kube *k, const char *path, struct sbx_error *err);

/* GETs path: 1 with *ret (new) when found, 0 with *ret NULL when not (404), < 0 on failure
 * (-EACCES when forbidden). */
int sbx_api_get(struct sbx_kube *k, const char *path, json_t **ret, struct sbx_error *err);

/* Merge-patches path; returns the HTTP status (200, 404, 409...) or < 0. With ret_rv, a 200's
 * new resourceVersion goes there (0 when it is not a number). */
long sbx_api_patch(struct sbx_kube *k, const char *path, json_t *patch, uint64_t *ret_rv,
                   struct sbx_error *err);

/* Brings the status of /apis/<api_version>/namespaces/<ns>/<plural>/<name> from old to want
 * with one merge patch of its status subresource, fields gone from want set to null. Writes
 * nothing when they are equal. A missing object (deleted meanwhile) counts as done. Returns 1
 * when it wrote (the object's new resourceVersion into *ret_rv when not NULL, 0 when unknown),
 * 0 when there was nothing to write, < 0 on failure. */
int sbx_api_update_status(struct sbx_kube *k, const char *api_version, const char *ns,
                          const char *plural, const char *name, json_t *old, json_t *want,
                          uint64_t *ret_rv, struct sbx_error *err);

/* metadata.resourceVersion of obj as a number (etcd's revision), or 0. */
uint64_t sbx_object_rv(json_t *obj);

/* n random characters of [a-z0-9] and a NUL into buf (size n + 1). */
void sbx_random_suffix(char *buf, size_t n);

/* Parses an RFC 3339 UTC time ("2026-01-02T03:04:05Z", a fraction allowed). 0 or -EINVAL. */
int sbx_parse_rfc3339(const char *s, time_t *ret);

/* The current UTC time as RFC 3339 ("2026-01-02T03:04:05Z"). */
void sbx_now_rfc3339(char buf[32]);

/* t as RFC 3339 UTC. */
void sbx_rfc3339(time_t t, char buf[32]);

/* A condition of type; ltt_from is an object whose old condition of that type keeps its
 * lastTransitionTime when the status is unchanged (may be NULL). A new reference. */
json_t *sbx_new_condition(const char *type, const char *status, const char *reason,
                          const char *message, json_t *ltt_from, json_t *generation);

/* A Ready condition; ltt_from is an object whose old Ready condition keeps its
 * lastTransitionTime when the status is unchanged (may be NULL). A new reference. */
json_t *sbx_ready_condition(const char *status, const char *reason, const char *message,
                            json_t *ltt_from, json_t *generation);
