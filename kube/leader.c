#include "leader.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "bucket.h"
#include "log.h"
#include "object.h"

struct sbx_leader {
    struct sbx_kube *kube;
    char *ns, *name, *identity;
    int duration_s, deadline_s, retry_s;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool stop, started;
    atomic_int state;
    char observed_rv[64]; /* the Lease as last seen, and when (monotonic) */
    uint64_t observed_ns;
    uint64_t renewed_ns; /* our last successful renewal */
};

static void micro_time(char buf[40])
{
    struct timeval tv;
    struct tm tm;
    char base[32];

    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, 40, "%s.%06ldZ", base, (long)tv.tv_usec);
}

static void lease_path(struct sbx_leader *l, char *buf, size_t size, bool item)
{
    snprintf(buf, size, "/apis/coordination.k8s.io/v1/namespaces/%s/leases%s%s", l->ns,
             item ? "/" : "", item ? l->name : "");
}

/* The spec we write as holder; `acquire` when taking it from someone else (or no one). */
static json_t *holder_spec(struct sbx_leader *l, json_t *old_spec, bool acquire, bool release)
{
    char now[40];
    json_int_t transitions = json_integer_value(json_object_get(old_spec, "leaseTransitions"));
    const char *acquired = json_string_value(json_object_get(old_spec, "acquireTime"));

    micro_time(now);
    if (acquire)
        transitions++;
    return json_pack("{s:s, s:i, s:s, s:s, s:I}", "holderIdentity", release ? "" : l->identity,
                     "leaseDurationSeconds", release ? 1 : l->duration_s, "acquireTime",
                     acquire || !acquired ? now : acquired, "renewTime", now, "leaseTransitions",
                     transitions);
}

/* One round: returns 1 when we hold the lease after it, 0 when someone else does, < 0 on an
 * error (the API server unreachable...). */
static int try_acquire_or_renew(struct sbx_leader *l, struct sbx_error *err)
{
    char path[600];
    json_auto_t *lease = NULL;
    long status;
    int r;

    lease_path(l, path, sizeof(path), true);
    if ((r = sbx_kube_request(l->kube, "GET", path, NULL, NULL, &status, &lease, err)) < 0)
        return r;
    if (status == 404) {
        json_auto_t *obj =
            json_pack("{s:s, s:s, s:{s:s, s:s}, s:o}", "apiVersion", "coordination.k8s.io/v1",
                      "kind", "Lease", "metadata", "name", l->name, "namespace", l->ns, "spec",
                      holder_spec(l, NULL, true, false));
        lease_path(l, path, sizeof(path), false);
        r = sbx_api_create(l->kube, path, obj, err);
        return r < 0 ? r : r; /* 1 created: ours; 0: someone was faster */
    }
    if (status != 200)
        return sbx_error_set(err, EIO, "GET %s: HTTP %ld", path, status);
    json_t *spec = json_object_get(lease, "spec");
    const char *holder = json_string_value(json_object_get(spec, "holderIdentity"));
    const char *rv = sbx_meta_str(lease, "resourceVersion");
    json_int_t dur = json_integer_value(json_object_get(spec, "leaseDurationSeconds"));
    uint64_t now = sbx_now_ns();
    bool mine = holder && !strcmp(holder, l->identity);

    if (rv && strcmp(rv, l->observed_rv) != 0) {
        snprintf(l->observed_rv, sizeof(l->observed_rv), "%s", rv);
        l->observed_ns = now;
    }
    bool expired = !holder || !*holder ||
                   now - l->observed_ns > (uint64_t)(dur > 0 ? dur : l->duration_s) * 1000000000u;
    if (!mine && !expired)
        return 0;
    json_object_set_new(lease, "spec", holder_spec(l, spec, !mine, false));
    if ((r = sbx_kube_request(l->kube, "PUT", path, lease, NULL, &status, NULL, err)) < 0)
        return r;
    if (status == 409)
        return 0; /* someone else wrote first */
    if (status != 200)
        return sbx_error_set(err, EIO, "PUT %s: HTTP %ld", path, status);
    return 1;
}

static void release(struct sbx_leader *l)
{
    struct sbx_error err = {0};
    char path[600];
    json_auto_t *lease = NULL;
    long status;

    lease_path(l, path, sizeof(path), true);
    if (sbx_kube_request(l->kube, "GET", path, NULL, NULL, &status, &lease, &err) < 0 ||
        status != 200)
        return;
    json_t *spec = json_object_get(lease, "spec");
    const char *holder = json_string_value(json_object_get(spec, "holderIdentity"));
    if (!holder || strcmp(holder, l->identity) != 0)
        return;
    json_object_set_new(lease, "spec", holder_spec(l, spec, false, true));
    if (sbx_kube_request(l->kube, "PUT", path, lease, NULL, &status, NULL, &err) == 0 &&
        status == 200)
        log_info("released the lease %s/%s", l->ns, l->name);
}

/* Waits s seconds unless stopped; returns true when stopped. */
static bool pause_s(struct sbx_leader *l, int s)
{
    struct timespec ts = sbx_deadline_in((uint64_t)s * 1000000000u);
    bool stop;

    pthread_mutex_lock(&l->mu);
    while (!l->stop && pthread_cond_timedwait(&l->cond, &l->mu, &ts) == 0)
        ;
    stop = l->stop;
    pthread_mutex_unlock(&l->mu);
    return stop;
}

static void *run(void *p)
{
    struct sbx_leader *l = p;

    do {
        struct sbx_error err = {0};
        int r = try_acquire_or_renew(l, &err);
        uint64_t now = sbx_now_ns();
        if (r == 1) {
            l->renewed_ns = now;
            if (atomic_exchange(&l->state, 1) == 0)
                log_info("became the leader (lease %s/%s, identity \"%s\")", l->ns, l->name,
                         l->identity);
            continue;
        }
        if (r < 0 && r != -ECANCELED) /* cancelled: the controller is stopping */
            log_warn(0, "leader election: %s", err.msg);
        if (atomic_load(&l->state) == 1 &&
            (r == 0 || now - l->renewed_ns > (uint64_t)l->deadline_s * 1000000000u)) {
            log_error(0, "lost the lease %s/%s", l->ns, l->name);
            atomic_store(&l->state, -1);
            return NULL;
        }
    } while (!pause_s(l, l->retry_s));
    if (atomic_load(&l->state) == 1)
        release(l);
    return NULL;
}

int sbx_leader_start(struct sbx_kube *k, const struct sbx_leader_opts *o, struct sbx_leader **ret,
                     struct sbx_error *err)
{
    struct sbx_leader *l = calloc(1, sizeof(*l));
    int r;

    if (!l)
        return sbx_error_set(err, ENOMEM, "leader election");
    l->kube = k;
    l->ns = strdup(o->namespace);
    l->name = strdup(o->name);
    l->identity = strdup(o->identity);
    l->duration_s = o->lease_duration_s > 0 ? o->lease_duration_s : 15;
    l->deadline_s = o->renew_deadline_s > 0 ? o->renew_deadline_s : 10;
    l->retry_s = o->retry_period_s > 0 ? o->retry_period_s : 2;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cond, NULL);
    if (!l->ns || !l->name || !l->identity) {
        sbx_leader_free(l);
        return sbx_error_set(err, ENOMEM, "leader election");
    }
    if ((r = pthread_create(&l->thread, NULL, run, l)) != 0) {
        sbx_leader_free(l);
        return sbx_error_set(err, r, "leader election thread");
    }
    l->started = true;
    *ret = l;
    return 0;
}

int sbx_leader_state(struct sbx_leader *l)
{
    return atomic_load(&l->state);
}

void sbx_leader_free(struct sbx_leader *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->mu);
    if (l->started)
        pthread_join(l->thread, NULL);
    pthread_cond_destroy(&l->cond);
    pthread_mutex_destroy(&l->mu);
    free(l->ns);
    free(l->name);
    free(l->identity);
    free(l);
}
