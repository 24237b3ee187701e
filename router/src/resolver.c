#include "resolver.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bucket.h"
#include "informer.h"
#include "kube.h"
#include "log.h"
#include "object.h"
#include "podcache.h"

#define SANDBOX_API  "agents.x-k8s.io/v1beta1"
#define MAX_WAKES    256 /* sandboxes being woken at once */
#define DEFAULT_GRPC 9090
#define DEFAULT_HTTP 8080
#define KEY_SIZE     136              /* "ns/name" of two labels */
#define MAX_WAKE_MS  (3600 * 1000ull) /* the longest --wake-timeout */
#define PAGE_SIZE    50               /* objects per list page: what one page parses stays small */

enum source { SRC_POD_IP, SRC_CACHE, SRC_CACHE_NAME, SRC_DNS, N_SRC };
static const char *const source_name[N_SRC] = {"pod-ip", "cache", "cache-name", "dns"};

/* A sandbox being woken: the requests waiting for it share one patch. */
struct wake {
    struct wake *next;
    char key[KEY_SIZE];
    int waiters;
    bool patched;
    int error; /* the patch's, told to every waiter */
    char msg[sizeof(((struct sbx_error *)0)->msg)];
};

struct sbx_resolver {
    struct sbx_resolver_opts o;
    char *domain, *ns;
    struct sbx_kube *kube;
    struct sbx_informer *pods, *sandboxes;
    struct sbx_podcache *cache;
    pthread_mutex_t apply; /* one change of the cache at a time: an event's, or the resync's */
    pthread_t resync;
    bool resyncing, stopping; /* the resync thread runs; it is asked to stop (under mu) */
    pthread_mutex_t mu;       /* guards wakes, n_wakes, cancelled, stopping */
    pthread_cond_t changed;   /* an informer's event, or cancel: waiters look again */
    pthread_cond_t tick;      /* the resync's wait; stop ends it */
    struct wake *wakes;
    unsigned n_wakes;
    bool cancelled;
    bool draining;             /* cancel_at is set */
    struct timespec cancel_at; /* waits end then (a drain's grace) */
    atomic_uint waiting;       /* requests in a wake: the informers wake them on change */
    atomic_uint_fast64_t by_source[N_SRC], invalidations, wakes_sent, wake_timeouts;
};

/* ------------------------------------------------------------------------------------------ */
/* The informers */

static void notify(struct sbx_resolver *r)
{
    if (!atomic_load(&r->waiting))
        return;
    pthread_mutex_lock(&r->mu);
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->mu);
}

static void on_pod(enum sbx_event ev, json_t *pod, void *arg)
{
    struct sbx_resolver *r = arg;

    pthread_mutex_lock(&r->apply);
    sbx_podcache_apply(r->cache, ev, pod);
    pthread_mutex_unlock(&r->apply);
    notify(r);
}

/* Every Pod the informer holds, applied again: an entry evicted after a failed dial comes back
 * (the reference's informer resyncs as often), to be evicted again if its address is still
 * dead. Each is read from the informer when applied, under the lock events take: a Pod deleted
 * meanwhile is not brought back. */
static void resync(struct sbx_resolver *r)
{
    json_auto_t *pods = sbx_informer_list(r->pods);
    json_t *pod;
    size_t i;
    char key[SBX_KEY_MAX];

    json_array_foreach(pods, i, pod)
    {
        json_t *now;
        if (!sbx_object_key(pod, key, sizeof(key)))
            continue;
        pthread_mutex_lock(&r->apply);
        if ((now = sbx_informer_get(r->pods, key))) {
            sbx_podcache_apply(r->cache, SBX_EVENT_MODIFIED, now);
            json_decref(now);
        }
        pthread_mutex_unlock(&r->apply);
    }
}

static void *resync_thread(void *arg)
{
    struct sbx_resolver *r = arg;

    pthread_mutex_lock(&r->mu);
    while (!r->stopping) {
        struct timespec until = sbx_deadline_in(r->o.resync_ms * 1000000u);
        while (!r->stopping && pthread_cond_timedwait(&r->tick, &r->mu, &until) != ETIMEDOUT)
            ;
        if (r->stopping)
            break;
        pthread_mutex_unlock(&r->mu);
        resync(r);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static void on_sandbox(enum sbx_event ev, json_t *sb, void *arg)
{
    (void)ev;
    (void)sb;
    notify(arg);
}

/* Leaves in obj's status.conditions the condition of this type alone, with its type and status
 * (an empty list when there is none). */
static void keep_condition(json_t *obj, const char *type)
{
    static const char *const cond_keep[] = {"type", "status", NULL};
    json_t *status = json_object_get(obj, "status"), *cond = json_incref(sbx_condition(obj, type));

    if (cond)
        sbx_json_keep(cond, cond_keep);
    /* A new array holds it alone (json_pack steals the reference). */
    json_object_set_new(status, "conditions", cond ? json_pack("[o]", cond) : json_array());
}

/* What the resolver reads of a Sandbox: its names, the warm-pool label, operatingMode, Ready. */
static void project_sandbox(json_t *sb)
{
    static const char *const top[] = {"metadata", "spec", "status", NULL};
    static const char *const meta_keep[] = {"name",   "namespace",       "uid",
                                            "labels", "resourceVersion", NULL};
    static const char *const label_keep[] = {SBX_POD_LABEL_POOL, NULL};
    static const char *const spec_keep[] = {"operatingMode", NULL};
    static const char *const status_keep[] = {"conditions", NULL};
    json_t *meta = json_object_get(sb, "metadata");

    sbx_json_keep(sb, top);
    sbx_json_keep(meta, meta_keep);
    if (json_is_object(json_object_get(meta, "labels")))
        sbx_json_keep(json_object_get(meta, "labels"), label_keep);
    if (json_is_object(json_object_get(sb, "spec")))
        sbx_json_keep(json_object_get(sb, "spec"), spec_keep);
    if (json_is_object(json_object_get(sb, "status"))) {
        sbx_json_keep(json_object_get(sb, "status"), status_keep);
        keep_condition(sb, "Ready");
    }
}

static int start_cache(struct sbx_resolver *r, struct sbx_error *err)
{
    char pods[256], sandboxes[256];
    int rc;

    r->kube = r->o.kube;
    if (r->ns) {
        snprintf(pods, sizeof(pods), "/api/v1/namespaces/%s/pods", r->ns);
        snprintf(sandboxes, sizeof(sandboxes), "/apis/%s/namespaces/%s/sandboxes", SANDBOX_API,
                 r->ns);
    } else {
        snprintf(pods, sizeof(pods), "/api/v1/pods");
        snprintf(sandboxes, sizeof(sandboxes), "/apis/%s/sandboxes", SANDBOX_API);
    }
    struct sbx_informer_opts po = {.name = "router pods",
                                   .path = pods,
                                   .label_selector = SBX_POD_LABEL_HASH,
                                   .fn = on_pod,
                                   .arg = r,
                                   .project = sbx_pod_project,
                                   .page_size = PAGE_SIZE};
    struct sbx_informer_opts so = {.name = "router sandboxes",
                                   .path = sandboxes,
                                   .fn = on_sandbox,
                                   .arg = r,
                                   .project = project_sandbox,
                                   .page_size = PAGE_SIZE};
    if ((rc = sbx_informer_start(r->kube, &po, &r->pods, err)) < 0 ||
        (rc = sbx_informer_start(r->kube, &so, &r->sandboxes, err)) < 0)
        return rc;
    if ((rc = pthread_create(&r->resync, NULL, resync_thread, r)) != 0)
        return sbx_error_set(err, rc, "the cache's resync thread");
    r->resyncing = true;
    log_info("router: cache on (%s): watching sandboxes' pods and sandboxes",
             r->ns ? r->ns : "every namespace");
    return 0;
}

int sbx_resolver_new(struct sbx_resolver **ret, const struct sbx_resolver_opts *o,
                     struct sbx_error *err)
{
    struct sbx_resolver *r = calloc(1, sizeof(*r));
    int rc;

    if (!r)
        return sbx_error_set(err, ENOMEM, "allocate resolver");
    r->o = *o;
    if (!r->o.wake_timeout_ms || r->o.wake_timeout_ms > MAX_WAKE_MS)
        r->o.wake_timeout_ms = MAX_WAKE_MS;
    if (!r->o.resync_ms)
        r->o.resync_ms = 10 * 60 * 1000;
    r->domain =
        strdup(o->cluster_domain && *o->cluster_domain ? o->cluster_domain : "cluster.local");
    r->ns = o->cache_namespace && *o->cache_namespace ? strdup(o->cache_namespace) : NULL;
    r->cache = sbx_podcache_new();
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->changed, NULL);
    pthread_cond_init(&r->tick, NULL);
    pthread_mutex_init(&r->apply, NULL);
    if (!r->domain || !r->cache || (o->cache_namespace && *o->cache_namespace && !r->ns)) {
        sbx_resolver_free(r);
        return sbx_error_set(err, ENOMEM, "allocate resolver");
    }
    if (r->ns && strspn(r->ns, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(r->ns)) {
        sbx_resolver_free(r);
        return sbx_error_set(err, EINVAL, "--cache-namespace \"%s\" is not a namespace",
                             o->cache_namespace);
    }
    if (o->kube && (rc = start_cache(r, err)) < 0) {
        sbx_resolver_free(r);
        return rc;
    }
    *ret = r;
    return 0;
}

void sbx_resolver_free(struct sbx_resolver *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    pthread_cond_broadcast(&r->tick);
    pthread_mutex_unlock(&r->mu);
    if (r->resyncing)
        pthread_join(r->resync, NULL);
    sbx_informer_stop(r->pods);
    sbx_informer_stop(r->sandboxes);
    sbx_informer_free(r->pods);
    sbx_informer_free(r->sandboxes);
    sbx_podcache_free(r->cache);
    pthread_cond_destroy(&r->changed);
    pthread_cond_destroy(&r->tick);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->apply);
    free(r->domain);
    free(r->ns);
    free(r);
}

bool sbx_resolver_ready(struct sbx_resolver *r)
{
    return !r->pods || (sbx_informer_synced(r->pods) && sbx_informer_synced(r->sandboxes));
}

/* ------------------------------------------------------------------------------------------ */
/* Resolving */

static void set_host(struct sbx_target *t, const char *ip)
{
    snprintf(t->host, sizeof(t->host), strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, t->port);
}

/* The Sandbox of t as the cache holds it (a new reference), or NULL. */
static json_t *sandbox_of(struct sbx_resolver *r, const struct sbx_target *t)
{
    char key[KEY_SIZE];

    if (!r->sandboxes)
        return NULL;
    snprintf(key, sizeof(key), "%s/%s", t->ns, t->id);
    return sbx_informer_get(r->sandboxes, key);
}

static bool unclaimed(json_t *sb)
{
    return json_object_get(json_object_get(json_object_get(sb, "metadata"), "labels"),
                           SBX_POD_LABEL_POOL) != NULL;
}

static bool suspended(json_t *sb)
{
    const char *m =
        json_string_value(json_object_get(json_object_get(sb, "spec"), "operatingMode"));

    return m && !strcmp(m, "Suspended");
}

/* The cache's entry for t, in the reference's order (UID, then name: an unclaimed warm-pool
 * sandbox's by UID only, whether its Pod or its Sandbox says so). */
static enum source lookup(struct sbx_resolver *r, const struct sbx_target *t, json_t *sb,
                          struct sbx_pod_entry *e)
{
    if (*t->uid && sbx_podcache_get(r->cache, t->uid, e))
        return SRC_CACHE;
    if (sbx_podcache_get_by_name(r->cache, t->ns, t->id, e) && !(sb && unclaimed(sb)))
        return SRC_CACHE_NAME;
    return SRC_DNS;
}

/* A wake applies to a Suspended sandbox the request may reach: named by a UID that is the
 * Sandbox's when it gives one, and by UID when the sandbox is an unclaimed warm one. */
static bool wants_wake(const struct sbx_target *t, json_t *sb)
{
    const char *uid = sbx_meta_str(sb, "uid");

    if (!sb || !suspended(sb))
        return false;
    if (*t->uid)
        return uid && !strcmp(uid, t->uid);
    return !unclaimed(sb);
}

/* Woken: the Sandbox is no longer Suspended, is Ready, and its Pod is in the cache. */
static bool awake(struct sbx_resolver *r, const struct sbx_target *t)
{
    json_auto_t *sb = sandbox_of(r, t);
    struct sbx_pod_entry e;

    return sb && !suspended(sb) && sbx_is_ready(sb) &&
           sbx_podcache_get(r->cache, sbx_meta_str(sb, "uid") ? sbx_meta_str(sb, "uid") : "", &e);
}

static int patch_running(struct sbx_resolver *r, const struct sbx_target *t, const char *uid,
                         struct sbx_error *err)
{
    json_auto_t *p =
        json_pack("{s:{s:s}, s:{s:s}}", "metadata", "uid", uid, "spec", "operatingMode", "Running");
    char path[256];
    long st;

    if (!p)
        return sbx_error_set(err, ENOMEM, "wake patch");
    snprintf(path, sizeof(path), "/apis/%s/namespaces/%s/sandboxes/%s", SANDBOX_API, t->ns, t->id);
    st = sbx_api_patch(r->kube, path, p, NULL, err);
    if (st < 0)
        return (int)st;
    if (st == 200)
        return 0;
    if (st == 404 || st == 409)
        return sbx_error_set(err, ENOENT, "sandbox \"%s/%s\" is gone", t->ns, t->id);
    if (st == 401 || st == 403)
        return sbx_error_set(err, EACCES, "the router may not wake sandbox \"%s/%s\" (HTTP %ld)",
                             t->ns, t->id, st);
    return sbx_error_set(err, EIO, "waking sandbox \"%s/%s\": HTTP %ld", t->ns, t->id, st);
}

static bool before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static struct wake *wake_get(struct sbx_resolver *r, const char *key)
{
    struct wake *w;

    for (w = r->wakes; w; w = w->next)
        if (!strcmp(w->key, key))
            return w;
    if (r->n_wakes >= MAX_WAKES || !(w = calloc(1, sizeof(*w))))
        return NULL;
    snprintf(w->key, sizeof(w->key), "%s", key);
    w->next = r->wakes;
    r->wakes = w;
    r->n_wakes++;
    return w;
}

static void wake_put(struct sbx_resolver *r, struct wake *w)
{
    if (--w->waiters)
        return;
    for (struct wake **p = &r->wakes; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            break;
        }
    }
    r->n_wakes--;
    free(w);
}

/* Patches the Sandbox (of uid; NULL: joins a wake under way) to Running unless a request for
 * it already did, then waits until it is awake, up to wait_ms. Under r->mu. */
static int wake_and_wait(struct sbx_resolver *r, const struct sbx_target *t, const char *uid,
                         uint64_t wait_ms, struct sbx_error *err)
{
    struct timespec until;
    char key[KEY_SIZE];
    struct wake *w;
    int rc = 0;

    snprintf(key, sizeof(key), "%s/%s", t->ns, t->id);
    if (!(w = wake_get(r, key)))
        return sbx_error_set(err, EBUSY, "too many sandboxes are waking up");
    w->waiters++;
    if (uid && !w->patched) {
        w->patched = true;
        pthread_mutex_unlock(&r->mu); /* the patch is an API call */
        rc = patch_running(r, t, uid, err);
        pthread_mutex_lock(&r->mu);
        if (rc < 0) {
            w->error = rc; /* its waiters fail with it; the next request tries again */
            snprintf(w->msg, sizeof(w->msg), "%s", err->msg);
        } else {
            atomic_fetch_add(&r->wakes_sent, 1);
        }
        if (rc == 0)
            log_info("router: waking sandbox %s (operatingMode Suspended)", key);
    }
    until = sbx_deadline_in(wait_ms * 1000000u);
    while (rc == 0 && !awake(r, t)) {
        struct timespec now, u = until;
        bool capped = r->draining && before(&r->cancel_at, &until);
        clock_gettime(CLOCK_REALTIME, &now);
        if (capped)
            u = r->cancel_at; /* a drain ends the wait first */
        if (w->error)
            rc = sbx_error_set(err, -w->error, "%s", w->msg);
        else if (r->cancelled || (r->draining && !before(&now, &r->cancel_at)))
            rc = sbx_error_set(err, ECANCELED, "the router is shutting down");
        else if (pthread_cond_timedwait(&r->changed, &r->mu, &u) == ETIMEDOUT && !capped &&
                 !awake(r, t))
            rc = sbx_error_set(err, ETIMEDOUT,
                               "sandbox \"%s\" is waking up: not ready after %llu ms", key,
                               (unsigned long long)wait_ms);
    }
    if (rc == -ETIMEDOUT)
        atomic_fetch_add(&r->wake_timeouts, 1);
    wake_put(r, w);
    return rc;
}

static bool waking(struct sbx_resolver *r, const struct sbx_target *t)
{
    char key[KEY_SIZE];
    bool found = false;

    snprintf(key, sizeof(key), "%s/%s", t->ns, t->id);
    pthread_mutex_lock(&r->mu);
    for (struct wake *w = r->wakes; w && !found; w = w->next)
        found = !strcmp(w->key, key);
    pthread_mutex_unlock(&r->mu);
    return found;
}

/* Wakes t's sandbox when it is Suspended, or joins the requests waiting for its wake (its
 * Sandbox is no longer Suspended once patched, and not Ready yet), and waits. 1 when it was
 * woken (look again), 0 when no wake applies. */
static int maybe_wake(struct sbx_resolver *r, const struct sbx_target *t, json_t *sb,
                      uint64_t wait_ms, struct sbx_error *err)
{
    bool want = wants_wake(t, sb);
    char uid[64];
    int rc;

    if (!want && (!sb || !waking(r, t)))
        return 0;
    if (wait_ms == 0)
        return -EWOULDBLOCK;
    if (wait_ms > r->o.wake_timeout_ms)
        wait_ms = r->o.wake_timeout_ms;
    snprintf(uid, sizeof(uid), "%s", sbx_meta_str(sb, "uid") ? sbx_meta_str(sb, "uid") : "");
    atomic_fetch_add(&r->waiting, 1);
    pthread_mutex_lock(&r->mu);
    rc = r->cancelled ? sbx_error_set(err, ECANCELED, "the router is shutting down")
                      : wake_and_wait(r, t, want ? uid : NULL, wait_ms, err);
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_sub(&r->waiting, 1);
    return rc < 0 ? rc : 1;
}

int sbx_resolver_resolve(struct sbx_resolver *r, struct sbx_target *t, bool grpc, uint64_t wait_ms,
                         struct sbx_error *err)
{
    int def = grpc ? DEFAULT_GRPC : DEFAULT_HTTP;
    struct sbx_pod_entry e;
    enum source src = SRC_DNS;

    if (t->port_defaulted)
        t->port = def;
    if (*t->pod_ip) {
        set_host(t, t->pod_ip);
        atomic_fetch_add(&r->by_source[SRC_POD_IP], 1);
        return 0;
    }
    if (r->pods) {
        json_auto_t *sb = sandbox_of(r, t);
        int rc = maybe_wake(r, t, sb, wait_ms, err);
        if (rc < 0)
            return rc;
        if (rc > 0) { /* woken: its Sandbox changed */
            json_decref(sb);
            sb = sandbox_of(r, t);
        }
        src = lookup(r, t, sb, &e);
    }
    if (src != SRC_DNS) {
        int named = grpc ? e.grpc_port : e.http_port;
        if (t->port_defaulted && named)
            t->port = named;
        set_host(t, e.ip);
    } else {
        snprintf(t->host, sizeof(t->host), "%s.%s.svc.%s:%d", t->id, t->ns, r->domain, t->port);
    }
    atomic_fetch_add(&r->by_source[src], 1);
    return 0;
}

/* The address part of host ("ip:port" or "[ip6]:port") into ip; false for a name. */
static bool host_ip(const char *host, char ip[48])
{
    const char *start = host, *end = strrchr(host, ':');
    unsigned char buf[16];

    if (*host == '[') {
        start = host + 1;
        end = strchr(host, ']');
    }
    if (!end || end - start >= 48)
        return false;
    memcpy(ip, start, (size_t)(end - start));
    ip[end - start] = '\0';
    return inet_pton(AF_INET, ip, buf) == 1 || inet_pton(AF_INET6, ip, buf) == 1;
}

bool sbx_resolver_dial_failed(struct sbx_resolver *r, const struct sbx_target *t, int errnum)
{
    struct sbx_pod_entry e;
    char ip[48];
    bool gone = false;

    if (!r->pods || errnum == -ECONNREFUSED || *t->pod_ip || !host_ip(t->host, ip))
        return false; /* not the cache's address, or a live host refusing */
    if (*t->uid && sbx_podcache_get(r->cache, t->uid, &e) && !strcmp(e.ip, ip))
        gone = sbx_podcache_remove(r->cache, t->uid);
    else
        gone = sbx_podcache_invalidate_by_name(r->cache, t->ns, t->id, ip);
    if (gone) {
        atomic_fetch_add(&r->invalidations, 1);
        log_info("router: %s/%s: %s did not answer (%s): cache entry evicted", t->ns, t->id, ip,
                 strerror(-errnum));
    }
    return gone;
}

void sbx_resolver_cancel(struct sbx_resolver *r, uint64_t after_ms)
{
    struct timespec at = sbx_deadline_in(after_ms * 1000000u);

    pthread_mutex_lock(&r->mu);
    if (!after_ms)
        r->cancelled = true;
    else if (!r->draining || before(&at, &r->cancel_at))
        r->cancel_at = at;
    r->draining = true;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->mu);
}

char *sbx_resolver_metrics(struct sbx_resolver *r)
{
    char *out = NULL;
    unsigned long long s[N_SRC];

    for (int i = 0; i < N_SRC; i++)
        s[i] = atomic_load(&r->by_source[i]);
    if (asprintf(&out,
                 "# HELP sandbox_router_resolutions_total Upstreams resolved, by how.\n"
                 "# TYPE sandbox_router_resolutions_total counter\n"
                 "sandbox_router_resolutions_total{source=\"%s\"} %llu\n"
                 "sandbox_router_resolutions_total{source=\"%s\"} %llu\n"
                 "sandbox_router_resolutions_total{source=\"%s\"} %llu\n"
                 "sandbox_router_resolutions_total{source=\"%s\"} %llu\n"
                 "# HELP sandbox_router_cache_synced Whether the pod cache has listed (1), "
                 "or is off (-1).\n"
                 "# TYPE sandbox_router_cache_synced gauge\n"
                 "sandbox_router_cache_synced %d\n"
                 "# HELP sandbox_router_cache_entries Sandboxes' pods in the cache.\n"
                 "# TYPE sandbox_router_cache_entries gauge\n"
                 "sandbox_router_cache_entries %zu\n"
                 "# HELP sandbox_router_cache_invalidations_total Pod-IP cache entries evicted "
                 "after a dial-class failure on a cached IP.\n"
                 "# TYPE sandbox_router_cache_invalidations_total counter\n"
                 "sandbox_router_cache_invalidations_total %llu\n"
                 "# HELP sandbox_router_wakes_total Suspended sandboxes resumed by a request.\n"
                 "# TYPE sandbox_router_wakes_total counter\n"
                 "sandbox_router_wakes_total %llu\n"
                 "# HELP sandbox_router_wake_timeouts_total Requests refused because their "
                 "sandbox was not Ready within the wake timeout.\n"
                 "# TYPE sandbox_router_wake_timeouts_total counter\n"
                 "sandbox_router_wake_timeouts_total %llu\n",
                 source_name[0], s[0], source_name[1], s[1], source_name[2], s[2], source_name[3],
                 s[3],
                 !r->pods                ? -1
                 : sbx_resolver_ready(r) ? 1
                                         : 0,
                 sbx_podcache_len(r->cache), (unsigned long long)atomic_load(&r->invalidations),
                 (unsigned long long)atomic_load(&r->wakes_sent),
                 (unsigned long long)atomic_load(&r->wake_timeouts)) < 0)
        return NULL;
    return out;
}
