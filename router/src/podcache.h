/* The router's map from sandboxes to the pods that serve them, kept by a Pod informer as the
 * reference router's cache is: an entry per Sandbox UID (the UID of the Pod's controller
 * ownerReference of kind Sandbox, group agents.x-k8s.io) for a Pod that is Ready and has an IP,
 * and an index by "namespace/name" (the Pod's name is its Sandbox's) that leaves unclaimed
 * warm-pool Pods out: those are reachable by UID only. Entries also carry sandboxd's ports, by
 * the names the controller gives them. Thread-safe; no API calls. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "informer.h"

#define SBX_POD_LABEL_POOL "agents.x-k8s.io/warm-pool-sandbox"
#define SBX_POD_LABEL_HASH "agents.x-k8s.io/sandbox-name-hash"
#define SBX_PORT_NAME_GRPC "sandboxd-grpc"
#define SBX_PORT_NAME_HTTP "sandboxd-http"

struct sbx_pod_entry {
    char uid[64]; /* the Sandbox's */
    char ns[64], name[64];
    char ip[48];
    int grpc_port, http_port; /* the container ports named above; 0 when none is */
    bool unclaimed;           /* a warm-pool Pod not yet adopted: by UID only */
};

enum sbx_pod_kind {
    SBX_POD_OTHER = -1, /* not a Sandbox's Pod */
    SBX_POD_UNROUTABLE, /* a Sandbox's, not Ready or without an IP: e->uid set */
    SBX_POD_ROUTABLE,   /* e filled */
};

/* Reads a Pod object (borrowed; as the API gives it, or projected) into e. */
enum sbx_pod_kind sbx_pod_entry_from(json_t *pod, struct sbx_pod_entry *e);

/* An informer's projection: the Pod becomes its metadata (name, namespace, resourceVersion) and
 * one string that sums up what sbx_pod_entry_from reads, a few hundred bytes where the
 * projected Pod's fields were kilobytes. Idempotent. */
void sbx_pod_project(json_t *pod);

struct sbx_podcache;

struct sbx_podcache *sbx_podcache_new(void);
void sbx_podcache_free(struct sbx_podcache *pc);

/* An informer's event for a Pod: the entry stored, refreshed or removed. */
void sbx_podcache_apply(struct sbx_podcache *pc, enum sbx_event ev, json_t *pod);

/* Stores e under its UID; indexed by name unless unclaimed. A name another UID holds goes to
 * the last writer; a stale name of this UID is dropped. */
void sbx_podcache_upsert(struct sbx_podcache *pc, const struct sbx_pod_entry *e);

/* Removes the entry of uid, and its name when it still names this UID. True when there was one. */
bool sbx_podcache_remove(struct sbx_podcache *pc, const char *uid);

/* The entry of a Sandbox UID, or by namespace and name; false when none. */
bool sbx_podcache_get(struct sbx_podcache *pc, const char *uid, struct sbx_pod_entry *ret);
bool sbx_podcache_get_by_name(struct sbx_podcache *pc, const char *ns, const char *name,
                              struct sbx_pod_entry *ret);

/* Removes the entry a name resolves to, only while it still holds ip (the address a failed
 * dial used: a Pod recreated meanwhile keeps its fresh entry). True when removed. */
bool sbx_podcache_invalidate_by_name(struct sbx_podcache *pc, const char *ns, const char *name,
                                     const char *ip);

size_t sbx_podcache_len(struct sbx_podcache *pc);
