#include "podcache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "object.h"

#define SANDBOX_GROUP "agents.x-k8s.io"
#define SUMMARY       "sbx.router/entry" /* what a projected Pod keeps of its spec and status */

struct sbx_podcache {
    pthread_rwlock_t lock;
    json_t *by_uid;  /* uid -> {"ip", "ns", "name", "g", "h", "u"} */
    json_t *by_name; /* "ns/name" -> uid */
};

/* ------------------------------------------------------------------------------------------ */
/* A Pod read */

static const char *str(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

/* "agents.x-k8s.io" or "agents.x-k8s.io/<version>". */
static bool in_sandbox_group(const char *api_version)
{
    size_t n = strlen(SANDBOX_GROUP);

    return api_version && !strncmp(api_version, SANDBOX_GROUP, n) &&
           (api_version[n] == '\0' || api_version[n] == '/');
}

/* The UID of the Pod's controller ownerReference when it is a Sandbox, or NULL. */
static const char *sandbox_uid(json_t *pod)
{
    json_t *ref;
    size_t i;

    json_array_foreach(json_object_get(json_object_get(pod, "metadata"), "ownerReferences"), i, ref)
    {
        const char *kind = str(ref, "kind");
        if (!json_is_true(json_object_get(ref, "controller")) || !kind || strcmp(kind, "Sandbox") ||
            !in_sandbox_group(str(ref, "apiVersion")))
            continue;
        return str(ref, "uid");
    }
    return NULL;
}

/* The container port named name in any container, or 0. */
static int named_port(json_t *pod, const char *name)
{
    json_t *c, *p;
    size_t i, j;

    json_array_foreach(json_object_get(json_object_get(pod, "spec"), "containers"), i, c)
    {
        json_array_foreach(json_object_get(c, "ports"), j, p)
        {
            const char *n = str(p, "name");
            json_int_t v = json_integer_value(json_object_get(p, "containerPort"));
            if (n && !strcmp(n, name) && v > 0 && v < 65536)
                return (int)v;
        }
    }
    return 0;
}

static bool copy(char *dst, size_t size, const char *s)
{
    return s && *s && snprintf(dst, size, "%s", s) < (int)size;
}

/* A Pod as the API gives it. */
static enum sbx_pod_kind read_pod(json_t *pod, struct sbx_pod_entry *e)
{
    json_t *meta = json_object_get(pod, "metadata");
    const char *ip = str(json_object_get(pod, "status"), "podIP");

    memset(e, 0, sizeof(*e));
    if (!copy(e->uid, sizeof(e->uid), sandbox_uid(pod)))
        return SBX_POD_OTHER;
    if (!sbx_is_ready(pod) || !copy(e->ip, sizeof(e->ip), ip) ||
        !copy(e->ns, sizeof(e->ns), str(meta, "namespace")) ||
        !copy(e->name, sizeof(e->name), str(meta, "name")))
        return SBX_POD_UNROUTABLE;
    e->grpc_port = named_port(pod, SBX_PORT_NAME_GRPC);
    e->http_port = named_port(pod, SBX_PORT_NAME_HTTP);
    e->unclaimed = json_object_get(json_object_get(meta, "labels"), SBX_POD_LABEL_POOL) != NULL;
    return SBX_POD_ROUTABLE;
}

/* A projected Pod: its metadata and SUMMARY, "<kind> <uid> <ip> <grpc> <http> <unclaimed>" ("-"
 * for an empty string). */
static enum sbx_pod_kind read_summary(json_t *pod, const char *sum, struct sbx_pod_entry *e)
{
    json_t *meta = json_object_get(pod, "metadata");
    int kind, unclaimed;

    memset(e, 0, sizeof(*e));
    if (sscanf(sum, "%d %63s %47s %d %d %d", &kind, e->uid, e->ip, &e->grpc_port, &e->http_port,
               &unclaimed) != 6 ||
        kind < SBX_POD_OTHER || kind > SBX_POD_ROUTABLE)
        return SBX_POD_OTHER;
    if (!strcmp(e->uid, "-"))
        e->uid[0] = '\0';
    if (!strcmp(e->ip, "-"))
        e->ip[0] = '\0';
    e->unclaimed = unclaimed;
    copy(e->ns, sizeof(e->ns), str(meta, "namespace"));
    copy(e->name, sizeof(e->name), str(meta, "name"));
    return (enum sbx_pod_kind)kind;
}

enum sbx_pod_kind sbx_pod_entry_from(json_t *pod, struct sbx_pod_entry *e)
{
    const char *sum = str(pod, SUMMARY);

    return sum ? read_summary(pod, sum, e) : read_pod(pod, e);
}

void sbx_pod_project(json_t *pod)
{
    static const char *const top[] = {"metadata", SUMMARY, NULL};
    static const char *const meta_keep[] = {"name", "namespace", "resourceVersion", NULL};
    struct sbx_pod_entry e;
    enum sbx_pod_kind kind;
    char sum[160];

    if (json_object_get(pod, SUMMARY))
        return; /* projected already */
    kind = read_pod(pod, &e);
    snprintf(sum, sizeof(sum), "%d %s %s %d %d %d", (int)kind, *e.uid ? e.uid : "-",
             *e.ip ? e.ip : "-", e.grpc_port, e.http_port, (int)e.unclaimed);
    json_object_set_new(pod, SUMMARY, json_string(sum));
    sbx_json_keep(pod, top);
    sbx_json_keep(json_object_get(pod, "metadata"), meta_keep);
}

/* ------------------------------------------------------------------------------------------ */
/* The map */

struct sbx_podcache *sbx_podcache_new(void)
{
    struct sbx_podcache *pc = calloc(1, sizeof(*pc));

    if (!pc)
        return NULL;
    pc->by_uid = json_object();
    pc->by_name = json_object();
    if (!pc->by_uid || !pc->by_name) {
        sbx_podcache_free(pc);
        return NULL;
    }
    pthread_rwlock_init(&pc->lock, NULL);
    return pc;
}

void sbx_podcache_free(struct sbx_podcache *pc)
{
    if (!pc)
        return;
    json_decref(pc->by_uid);
    json_decref(pc->by_name);
    pthread_rwlock_destroy(&pc->lock);
    free(pc);
}

static void name_key(char buf[136], const char *ns, const char *name)
{
    snprintf(buf, 136, "%s/%s", ns, name);
}

/* Drops the entry of uid and its name key when that still names uid. Under the write lock. */
static bool remove_locked(struct sbx_podcache *pc, const char *uid)
{
    json_t *prev = json_object_get(pc->by_uid, uid);
    char k[136];

    if (!prev)
        return false;
    name_key(k, str(prev, "ns"), str(prev, "name"));
    if (str(pc->by_name, k) && !strcmp(str(pc->by_name, k), uid))
        json_object_del(pc->by_name, k);
    json_object_del(pc->by_uid, uid);
    return true;
}

void sbx_podcache_upsert(struct sbx_podcache *pc, const struct sbx_pod_entry *e)
{
    json_t *v = json_pack("{s:s, s:s, s:s, s:i, s:i, s:b}", "ip", e->ip, "ns", e->ns, "name",
                          e->name, "g", e->grpc_port, "h", e->http_port, "u", e->unclaimed);
    char k[136];

    if (!v)
        return;
    name_key(k, e->ns, e->name);
    pthread_rwlock_wrlock(&pc->lock);
    remove_locked(pc, e->uid);
    json_object_set_new(pc->by_uid, e->uid, v);
    if (!e->unclaimed)
        json_object_set_new(pc->by_name, k, json_string(e->uid));
    pthread_rwlock_unlock(&pc->lock);
}

bool sbx_podcache_remove(struct sbx_podcache *pc, const char *uid)
{
    bool had;

    pthread_rwlock_wrlock(&pc->lock);
    had = remove_locked(pc, uid);
    pthread_rwlock_unlock(&pc->lock);
    return had;
}

void sbx_podcache_apply(struct sbx_podcache *pc, enum sbx_event ev, json_t *pod)
{
    struct sbx_pod_entry e;
    enum sbx_pod_kind kind = sbx_pod_entry_from(pod, &e);

    if (kind == SBX_POD_OTHER)
        return;
    if (ev == SBX_EVENT_DELETED || kind == SBX_POD_UNROUTABLE)
        sbx_podcache_remove(pc, e.uid);
    else
        sbx_podcache_upsert(pc, &e);
}

/* Reads the stored value v of uid into ret. */
static void entry_of(const char *uid, json_t *v, struct sbx_pod_entry *ret)
{
    memset(ret, 0, sizeof(*ret));
    copy(ret->uid, sizeof(ret->uid), uid);
    copy(ret->ip, sizeof(ret->ip), str(v, "ip"));
    copy(ret->ns, sizeof(ret->ns), str(v, "ns"));
    copy(ret->name, sizeof(ret->name), str(v, "name"));
    ret->grpc_port = (int)json_integer_value(json_object_get(v, "g"));
    ret->http_port = (int)json_integer_value(json_object_get(v, "h"));
    ret->unclaimed = json_is_true(json_object_get(v, "u"));
}

bool sbx_podcache_get(struct sbx_podcache *pc, const char *uid, struct sbx_pod_entry *ret)
{
    json_t *v;

    pthread_rwlock_rdlock(&pc->lock);
    v = json_object_get(pc->by_uid, uid);
    if (v)
        entry_of(uid, v, ret);
    pthread_rwlock_unlock(&pc->lock);
    return v != NULL;
}

bool sbx_podcache_get_by_name(struct sbx_podcache *pc, const char *ns, const char *name,
                              struct sbx_pod_entry *ret)
{
    const char *uid;
    json_t *v = NULL;
    char k[136];

    name_key(k, ns, name);
    pthread_rwlock_rdlock(&pc->lock);
    uid = str(pc->by_name, k);
    if (uid && (v = json_object_get(pc->by_uid, uid)))
        entry_of(uid, v, ret);
    pthread_rwlock_unlock(&pc->lock);
    return v != NULL;
}

bool sbx_podcache_invalidate_by_name(struct sbx_podcache *pc, const char *ns, const char *name,
                                     const char *ip)
{
    const char *uid;
    json_t *v;
    bool done = false;
    char k[136], u[64] = "";

    name_key(k, ns, name);
    pthread_rwlock_wrlock(&pc->lock);
    uid = str(pc->by_name, k);
    if (uid && (v = json_object_get(pc->by_uid, uid)) && !strcmp(str(v, "ip"), ip)) {
        copy(u, sizeof(u), uid); /* uid is the index's, which the removal frees */
        done = remove_locked(pc, u);
    } else if (uid && !v) {
        json_object_del(pc->by_name, k); /* a dangling key (never made): fail fast to DNS */
    }
    pthread_rwlock_unlock(&pc->lock);
    return done;
}

size_t sbx_podcache_len(struct sbx_podcache *pc)
{
    size_t n;

    pthread_rwlock_rdlock(&pc->lock);
    n = json_object_size(pc->by_uid);
    pthread_rwlock_unlock(&pc->lock);
    return n;
}
