#include "controller.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "cleanup.h"
#include "log.h"
#include "object.h"

char *sbx_queue_key(char *buf, size_t size, const char *kind, const char *ns, const char *name)
{
    int n = snprintf(buf, size, "%s:%s/%s", kind, ns ? ns : "", name);

    return n > 0 && (size_t)n < size ? buf : NULL;
}

/* The registered reconciler of key's kind, or NULL. */
static const struct sbx_reconciler *reconciler_of(struct sbx_ctrl *c, const char *key)
{
    const char *colon = strchr(key, ':');
    size_t n = colon ? (size_t)(colon - key) : 0;

    for (size_t i = 0; colon && i < c->nkinds; i++)
        if (!strncmp(c->kinds[i].kind, key, n) && c->kinds[i].kind[n] == '\0')
            return &c->kinds[i];
    return NULL;
}

void sbx_ctrl_enqueue(struct sbx_ctrl *c, const char *key, uint64_t delay_ms)
{
    const struct sbx_reconciler *r = reconciler_of(c, key);

    sbx_wq_add_after(r && r->claim_queue ? c->claim_queue : c->queue, key, delay_ms);
}

static void enqueue(struct sbx_ctrl *c, const char *kind, const char *ns, const char *name)
{
    char key[700];

    if (name && sbx_queue_key(key, sizeof(key), kind, ns, name))
        sbx_ctrl_enqueue(c, key, 0);
}

#define STALE_WAIT_MS 5000

void sbx_ctrl_wrote(struct sbx_ctrl *c, const char *qkey, uint64_t rv)
{
    if (!rv)
        return;
    pthread_mutex_lock(&c->mu);
    json_object_set_new(c->wrote, qkey,
                        json_pack("[I, I]", (json_int_t)rv, (json_int_t)sbx_now_ns()));
    pthread_mutex_unlock(&c->mu);
}

bool sbx_ctrl_cache_behind(struct sbx_ctrl *c, const char *qkey, json_t *cached)
{
    uint64_t now = sbx_now_ns(), rv = sbx_object_rv(cached);
    bool behind = false;

    pthread_mutex_lock(&c->mu);
    json_t *w = json_object_get(c->wrote, qkey);
    if (w) {
        uint64_t wrv = (uint64_t)json_integer_value(json_array_get(w, 0));
        uint64_t at = (uint64_t)json_integer_value(json_array_get(w, 1));
        behind = rv && rv < wrv && now - at < STALE_WAIT_MS * 1000000ull;
        if (!behind)
            json_object_del(c->wrote, qkey);
    }
    pthread_mutex_unlock(&c->mu);
    if (behind)
        sbx_ctrl_enqueue(c, qkey, STALE_WAIT_MS);
    return behind;
}

/* The object is gone: forgets a write of ours to it. A write the cache has caught up with is
 * forgotten by the reconcile that sees it caught up (sbx_ctrl_cache_behind), not here: a
 * reconcile that read the object just before this event still holds the older copy, and must
 * still be told it is behind. */
static void seen(struct sbx_ctrl *c, const char *kind, enum sbx_event ev, json_t *obj)
{
    char qk[700];

    if (ev != SBX_EVENT_DELETED ||
        !sbx_queue_key(qk, sizeof(qk), kind, sbx_meta_str(obj, "namespace"),
                       sbx_meta_str(obj, "name") ?: ""))
        return;
    pthread_mutex_lock(&c->mu);
    json_object_del(c->wrote, qk);
    pthread_mutex_unlock(&c->mu);
}

/* A Pod, Service or PersistentVolumeClaim changed: its Sandbox reconciles. */
static void on_child(enum sbx_event ev, json_t *obj, void *arg)
{
    struct sbx_ctrl *c = arg;
    json_t *ref = sbx_controller_ref(obj);
    const char *kind = json_string_value(json_object_get(ref, "kind"));
    const char *api = json_string_value(json_object_get(ref, "apiVersion"));

    (void)ev;
    if (kind && api && !strcmp(kind, "Sandbox") && !strcmp(api, SBX_API_VERSION))
        enqueue(c, "sandbox", sbx_meta_str(obj, "namespace"),
                json_string_value(json_object_get(ref, "name")));
}

/* A Sandbox changed: it reconciles, and so does the pool or claim that controls it. */
static void on_sandbox(enum sbx_event ev, json_t *obj, void *arg)
{
    struct sbx_ctrl *c = arg;
    const char *ns = sbx_meta_str(obj, "namespace");
    json_t *ref = sbx_controller_ref(obj);
    const char *kind = json_string_value(json_object_get(ref, "kind"));
    const char *owner = json_string_value(json_object_get(ref, "name"));
    char key[600];

    enqueue(c, "sandbox", ns, sbx_meta_str(obj, "name"));
    seen(c, "sandbox", ev, obj);
    if (sbx_object_key(obj, key, sizeof(key))) {
        pthread_mutex_lock(&c->mu);
        json_object_del(c->expected, key); /* the cache has it now */
        if (ev == SBX_EVENT_DELETED)
            json_object_del(c->held, key);
        if (ev == SBX_EVENT_DELETED || !kind || strcmp(kind, "SandboxWarmPool") != 0)
            json_object_del(c->taken, key);
        pthread_mutex_unlock(&c->mu);
    }
    if (kind && !strcmp(kind, "SandboxWarmPool"))
        enqueue(c, "pool", ns, owner);
    else if (kind && !strcmp(kind, "SandboxClaim"))
        enqueue(c, "claim", ns, owner);
}

static void on_pool(enum sbx_event ev, json_t *obj, void *arg)
{
    (void)ev;
    enqueue(arg, "pool", sbx_meta_str(obj, "namespace"), sbx_meta_str(obj, "name"));
}

static void on_claim(enum sbx_event ev, json_t *obj, void *arg)
{
    struct sbx_ctrl *c = arg;
    char key[600];

    seen(c, "claim", ev, obj);
    if (sbx_object_key(obj, key, sizeof(key))) {
        pthread_mutex_lock(&c->mu);
        if (ev == SBX_EVENT_DELETED)
            json_object_del(c->claim_seen, key);
        else if (!sbx_is_ready(obj) && !json_object_get(c->claim_seen, key))
            json_object_set_new(c->claim_seen, key, json_integer((json_int_t)sbx_now_ns()));
        pthread_mutex_unlock(&c->mu);
    }
    enqueue(c, "claim", sbx_meta_str(obj, "namespace"), sbx_meta_str(obj, "name"));
}

void sbx_ctrl_claim_ready(struct sbx_ctrl *c, const char *key, bool warm)
{
    json_int_t seen;

    pthread_mutex_lock(&c->mu);
    seen = json_integer_value(json_object_get(c->claim_seen, key));
    json_object_del(c->claim_seen, key);
    pthread_mutex_unlock(&c->mu);
    if (seen > 0)
        sbx_histogram_observe(&c->claim_ready[warm], sbx_now_ns() - (uint64_t)seen);
}

/* A template changed: the pools of its namespace that use it reconcile. */
static void on_template(enum sbx_event ev, json_t *obj, void *arg)
{
    struct sbx_ctrl *c = arg;
    json_auto_t *pools = c->pools ? sbx_informer_list(c->pools) : NULL;
    const char *ns = sbx_meta_str(obj, "namespace"), *name = sbx_meta_str(obj, "name");
    json_t *p;
    size_t i;

    (void)ev;
    enqueue(c, "template", ns, name);
    json_array_foreach(pools, i, p)
    {
        const char *ref = json_string_value(json_object_get(
            json_object_get(json_object_get(p, "spec"), "sandboxTemplateRef"), "name"));
        const char *pns = sbx_meta_str(p, "namespace");
        if (ref && name && !strcmp(ref, name) && pns && ns && !strcmp(pns, ns))
            enqueue(c, "pool", pns, sbx_meta_str(p, "name"));
    }
}

static int worker(const char *key, void *arg)
{
    struct sbx_ctrl *c = arg;
    struct sbx_error err = {0};
    const struct sbx_reconciler *rec = reconciler_of(c, key);
    uint64_t t0 = sbx_now_ns();
    int r;

    /* Before the first lists, a missing object only means "not seen yet". */
    if (!sbx_ctrl_synced(c)) {
        sbx_ctrl_enqueue(c, key, 100);
        return 0;
    }
    if (!rec)
        return 0;
    r = rec->reconcile(c, strchr(key, ':') + 1, &err);
    if (r == -ECANCELED) /* the controller is stopping */
        log_debug("%s: %s", key, err.msg);
    else if (r < 0)
        log_warn(0, "%s: %s", key, err.msg);
    log_debug("%s: reconciled in %.1f ms", key, (double)(sbx_now_ns() - t0) / 1e6);
    return r;
}

static const char *const child_meta[] = {"name",
                                         "namespace",
                                         "uid",
                                         "resourceVersion",
                                         "creationTimestamp",
                                         "deletionTimestamp",
                                         "labels",
                                         "ownerReferences",
                                         "generation",
                                         NULL};

/* Of a Pod the controller reads its identity and owner, spec.nodeName, and status.phase,
 * conditions and podIPs (sandbox.c, pool.c); the rest is most of the object. */
static void project_pod(json_t *pod)
{
    static const char *const top[] = {"metadata", "spec", "status", NULL};
    static const char *const spec[] = {"nodeName", NULL};
    static const char *const status[] = {"phase", "conditions", "podIPs", NULL};

    sbx_json_keep(pod, top);
    sbx_json_keep(json_object_get(pod, "metadata"), child_meta);
    sbx_json_keep(json_object_get(pod, "spec"), spec);
    sbx_json_keep(json_object_get(pod, "status"), status);
}

/* Of a Sandbox, all but its pod template (the bulk of it, read only to make its Pod: then it is
 * fetched, see sandbox.c), its annotations and finalizers. */
static void project_sandbox(json_t *sb)
{
    static const char *const top[] = {"metadata", "spec", "status", NULL};

    sbx_json_keep(sb, top);
    sbx_json_keep(json_object_get(sb, "metadata"), child_meta);
    json_object_del(json_object_get(sb, "spec"), "podTemplate");
    /* Of its volume claim templates, the names (volumes.c looks their claims up by them). */
    json_t *vcts = json_object_get(json_object_get(sb, "spec"), "volumeClaimTemplates"), *v;
    size_t i;
    json_array_foreach(vcts, i, v)
    {
        static const char *const keep[] = {"metadata", NULL};
        static const char *const name[] = {"name", NULL};
        sbx_json_keep(v, keep);
        sbx_json_keep(json_object_get(v, "metadata"), name);
    }
}

/* Of a PersistentVolumeClaim, whose it is and whether it is bound. */
static void project_pvc(json_t *pvc)
{
    static const char *const top[] = {"metadata", "status", NULL};
    static const char *const status[] = {"phase", NULL};

    sbx_json_keep(pvc, top);
    sbx_json_keep(json_object_get(pvc, "metadata"), child_meta);
    sbx_json_keep(json_object_get(pvc, "status"), status);
}

/* Of a Service, only that it exists and whose it is. */
static void project_service(json_t *svc)
{
    static const char *const top[] = {"metadata", NULL};

    sbx_json_keep(svc, top);
    sbx_json_keep(json_object_get(svc, "metadata"), child_meta);
}

static int start_informer(struct sbx_ctrl *c, const char *name, const char *group_path,
                          const char *resource, const char *selector, sbx_informer_fn fn,
                          struct sbx_informer **ret, struct sbx_error *err)
{
    char path[512];

    if (c->opts.namespace)
        snprintf(path, sizeof(path), "%s/namespaces/%s/%s", group_path, c->opts.namespace,
                 resource);
    else
        snprintf(path, sizeof(path), "%s/%s", group_path, resource);
    struct sbx_informer_opts o = {
        .name = name, .path = path, .label_selector = selector, .fn = fn, .arg = c};
    if (!strcmp(resource, "pods"))
        o.project = project_pod;
    else if (!strcmp(resource, "sandboxes"))
        o.project = project_sandbox;
    else if (!strcmp(resource, "services"))
        o.project = project_service;
    else if (!strcmp(resource, "persistentvolumeclaims"))
        o.project = project_pvc;
    return sbx_informer_start(c->kube, &o, ret, err);
}

/* A lookup ended: the sandbox waiting on it reconciles. */
static void lookup_done(const char *qkey, void *arg)
{
    sbx_ctrl_enqueue(arg, qkey, 0);
}

static int start_lookups(struct sbx_ctrl *c, struct sbx_error *err)
{
    struct sbx_lookups_opts lo = {.threads = c->opts.lookup_threads,
                                  .queue_max = 1024,
                                  .failures_max = 4096,
                                  .done = lookup_done,
                                  .arg = c};
    int r;

    if ((r = sbx_registry_new(&c->opts.registry, &c->registry, err)) < 0)
        return r;
    return sbx_lookups_new(c->registry, &lo, &c->lookups, err);
}

int sbx_ctrl_new(struct sbx_kube *kube, const struct sbx_ctrl_opts *opts, struct sbx_ctrl **ret,
                 struct sbx_error *err)
{
    struct sbx_ctrl *c = calloc(1, sizeof(*c));
    /* Retries back off from 5 ms to 30 s: an API server restart must not park keys for long. */
    struct sbx_wq_opts qo = {.retry_base_ms = 5, .retry_max_ms = 30000};
    int r;

    if (!c)
        return sbx_error_set(err, ENOMEM, "controller");
    c->kube = kube;
    c->opts = *opts;
    if (c->opts.pool_batch < 1)
        c->opts.pool_batch = 1;
    pthread_mutex_init(&c->mu, NULL);
    sbx_bucket_init(&c->refill, opts->pool_refill_rate, c->opts.pool_batch, sbx_now_ns());
    c->expected = json_object();
    c->taken = json_object();
    c->claim_seen = json_object();
    c->held = json_object();
    c->wrote = json_object();
    c->adopted = json_object();
    if (!c->expected || !c->taken || !c->claim_seen || !c->held || !c->wrote || !c->adopted) {
        r = sbx_error_set(err, ENOMEM, "controller");
        goto fail;
    }
    if ((r = sbx_wq_new(&qo, &c->queue, err)) < 0 ||
        (r = sbx_wq_new(&qo, &c->claim_queue, err)) < 0)
        goto fail;
    if (opts->image_lookup && (r = start_lookups(c, err)) < 0)
        goto fail;
    *ret = c;
    return 0;
fail:
    sbx_ctrl_free(c);
    return r;
}

int sbx_ctrl_register(struct sbx_ctrl *c, const struct sbx_reconciler *rec, struct sbx_error *err)
{
    /* Workers and informer handlers read the table unlocked: it is complete before they start. */
    if (c->started)
        return sbx_error_set(err, EBUSY, "kind \"%s\": the controller has started", rec->kind);
    for (size_t i = 0; i < c->nkinds; i++)
        if (!strcmp(c->kinds[i].kind, rec->kind))
            return sbx_error_set(err, EEXIST, "kind \"%s\" registered twice", rec->kind);
    if (c->nkinds == SBX_CTRL_KINDS_MAX)
        return sbx_error_set(err, ENOSPC, "kind \"%s\": more than %d kinds", rec->kind,
                             SBX_CTRL_KINDS_MAX);
    c->kinds[c->nkinds++] = *rec;
    return 0;
}

int sbx_ctrl_start(struct sbx_ctrl *c, struct sbx_error *err)
{
    int r;

    c->started = true;
    /* Children are cached only when they carry our label: the informers hold what we own. */
    if ((r = start_informer(c, "sandboxes", "/apis/" SBX_API_VERSION, "sandboxes", NULL, on_sandbox,
                            &c->sandboxes, err)) < 0 ||
        (r = start_informer(c, "pods", "/api/v1", "pods", SBX_LABEL_MANAGED "=" SBX_MANAGER,
                            on_child, &c->pods, err)) < 0 ||
        (r = start_informer(c, "services", "/api/v1", "services", SBX_LABEL_MANAGED "=" SBX_MANAGER,
                            on_child, &c->services, err)) < 0 ||
        /* Claims carry the reference's labels only: the sandbox label marks ours. */
        (r = start_informer(c, "persistentvolumeclaims", "/api/v1", "persistentvolumeclaims",
                            SBX_LABEL_HASH, on_child, &c->pvcs, err)) < 0 ||
        (r = start_informer(c, "sandboxwarmpools", "/apis/" SBX_EXT_API_VERSION, "sandboxwarmpools",
                            NULL, on_pool, &c->pools, err)) < 0 ||
        (r = start_informer(c, "sandboxtemplates", "/apis/" SBX_EXT_API_VERSION, "sandboxtemplates",
                            NULL, on_template, &c->templates, err)) < 0 ||
        (r = start_informer(c, "sandboxclaims", "/apis/" SBX_EXT_API_VERSION, "sandboxclaims", NULL,
                            on_claim, &c->claims, err)) < 0)
        return r;
    if ((r = sbx_wq_start(c->queue, c->opts.workers, worker, c, err)) < 0 ||
        (r = sbx_wq_start(c->claim_queue, c->opts.claim_workers > 0 ? c->opts.claim_workers : 1,
                          worker, c, err)) < 0)
        return r;
    return 0;
}

int sbx_ctrl_delete_sandboxes_of(struct sbx_ctrl *c, const char *ns, const char *kind,
                                 const char *name, struct sbx_error *err)
{
    json_auto_t *all = sbx_informer_list(c->sandboxes);
    char path[700];
    json_t *sb;
    size_t i;

    json_array_foreach(all, i, sb)
    {
        json_t *ref = sbx_controller_ref(sb);
        const char *k = json_string_value(json_object_get(ref, "kind"));
        const char *n = json_string_value(json_object_get(ref, "name"));
        const char *sns = sbx_meta_str(sb, "namespace");
        if (!k || strcmp(k, kind) || !n || strcmp(n, name) || !sns || strcmp(sns, ns) ||
            json_object_get(json_object_get(sb, "metadata"), "deletionTimestamp"))
            continue;
        snprintf(path, sizeof(path), "/apis/%s/namespaces/%s/sandboxes/%s", SBX_API_VERSION, ns,
                 sbx_meta_str(sb, "name"));
        int r = sbx_api_delete(c->kube, path, err);
        if (r < 0)
            return r;
    }
    return 0;
}

bool sbx_ctrl_synced(struct sbx_ctrl *c)
{
    return sbx_informer_synced(c->sandboxes) && sbx_informer_synced(c->pods) &&
           sbx_informer_synced(c->services) && sbx_informer_synced(c->pvcs) &&
           sbx_informer_synced(c->templates) && sbx_informer_synced(c->pools) &&
           sbx_informer_synced(c->claims);
}

void sbx_ctrl_free(struct sbx_ctrl *c)
{
    if (!c)
        return;
    struct sbx_informer *infs[] = {c->sandboxes, c->pods,  c->services, c->pvcs,
                                   c->templates, c->pools, c->claims};
    /* Workers read the informers' caches and queue into both queues until they return: they
     * go first. They take no new key; requests in flight end at once; the informers' threads
     * stop meanwhile. */
    sbx_wq_shutdown(c->queue);
    sbx_wq_shutdown(c->claim_queue);
    for (size_t i = 0; i < SBX_ARRAY_SIZE(infs); i++)
        sbx_informer_stop(infs[i]);
    sbx_kube_cancel(c->kube, true);
    sbx_wq_join(c->queue);
    sbx_wq_join(c->claim_queue);
    /* Lookup threads queue keys when they end: gone before the queues. */
    sbx_lookups_free(c->lookups);
    sbx_registry_free(c->registry);
    /* Handlers read other informers' caches and queue work: every thread ends before any
     * cache or queue goes. */
    for (size_t i = 0; i < SBX_ARRAY_SIZE(infs); i++)
        sbx_informer_join(infs[i]);
    sbx_kube_cancel(c->kube, false);
    for (size_t i = 0; i < SBX_ARRAY_SIZE(infs); i++)
        sbx_informer_free(infs[i]);
    sbx_wq_free(c->queue);
    sbx_wq_free(c->claim_queue);
    sbx_bucket_release(&c->refill);
    json_decref(c->expected);
    json_decref(c->taken);
    json_decref(c->claim_seen);
    json_decref(c->held);
    json_decref(c->wrote);
    json_decref(c->adopted);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
