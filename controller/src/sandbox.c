/* Reconciling one Sandbox: its token Secret, Pod and Service exist while it runs, are gone
 * while it is suspended or expired, and its status mirrors the Pod. Reads come from the
 * informers' caches; writes are skipped when nothing would change. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "api.h"
#include "cleanup.h"
#include "controller.h"
#include "log.h"
#include "object.h"
#include "reconcilers.h"

struct ready {
    const char *status, *reason;
    char message[256];
};

/* Removes the Pod and Service of a sandbox that is gone, suspended or expired. */
static int remove_children(struct sbx_ctrl *c, const char *key, const char *ns, const char *name,
                           json_t *sandbox, bool secret_too, struct sbx_error *err)
{
    char path[700], secret[300];
    json_auto_t *pod = sbx_informer_get(c->pods, key);
    json_auto_t *svc = sbx_informer_get(c->services, key);
    int r;

    if (pod && (!sandbox || sbx_controlled_by(pod, "Sandbox", sbx_meta_str(sandbox, "uid"))) &&
        !json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp")) {
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
        if ((r = sbx_api_delete(c->kube, path, err)) < 0)
            return r;
    }
    if (svc && (!sandbox || sbx_controlled_by(svc, "Sandbox", sbx_meta_str(sandbox, "uid")))) {
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/services/%s", ns, name);
        if ((r = sbx_api_delete(c->kube, path, err)) < 0)
            return r;
    }
    if (secret_too && (pod || svc) && sbx_token_secret_name(name, secret, sizeof(secret))) {
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets/%s", ns, secret);
        if ((r = sbx_api_delete(c->kube, path, err)) < 0)
            return r;
    }
    return 0;
}

/* The token Secret and the Pod of sandbox whole (as read from the API server: the cache keeps
 * no pod template). */
static int create_pod(struct sbx_ctrl *c, json_t *whole, const char *ns, struct sbx_error *err)
{
    json_auto_t *want = NULL, *secret = NULL;
    unsigned char raw[32];
    char token[65], path[700];
    int r;

    json_auto_t *image = NULL;
    if ((r = sbx_sandbox_image(c, whole, ns, &image, err)) < 0 ||
        (r = sbx_sandbox_pod_image(whole, &c->opts.inject, image, &want, err)) < 0)
        return r;
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        return sbx_error_set(err, errno, "getrandom");
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(token + 2 * i, 3, "%02x", raw[i]);
    /* An existing Secret (409) keeps its token: clients may hold it already. */
    if (!(secret = sbx_sandbox_secret(whole, token)))
        return sbx_error_set(err, ENOMEM, "secret");
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets", ns);
    if ((r = sbx_api_create(c->kube, path, secret, err)) < 0)
        return r;
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", ns);
    return sbx_api_create(c->kube, path, want, err);
}

/* The Service of sandbox whole: sandboxd's ports in it follow its pod template. */
static int create_service(struct sbx_ctrl *c, json_t *whole, const char *ns, struct sbx_error *err)
{
    json_auto_t *want = sbx_sandbox_service(whole, &c->opts.inject);
    char path[700];

    if (!want)
        return sbx_error_set(err, ENOMEM, "service");
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/services", ns);
    return sbx_api_create(c->kube, path, want, err);
}

static int ensure_running(struct sbx_ctrl *c, json_t *sb, json_t *pod, json_t *svc, const char *ns,
                          struct sbx_error *err)
{
    json_auto_t *whole = NULL;
    bool want_svc = !svc && json_is_true(json_object_get(json_object_get(sb, "spec"), "service"));
    int r;

    if (pod && !want_svc)
        return 0;
    if ((r = sbx_sandbox_fetch(c, sb, ns, &whole, err)) < 0)
        return r;
    if (!whole) /* deleted meanwhile: its event comes */
        return 0;
    if (!pod && (r = create_pod(c, whole, ns, err)) < 0)
        return r;
    if (want_svc && (r = create_service(c, whole, ns, err)) < 0)
        return r;
    return 0;
}

static void pod_ready(json_t *pod, struct ready *rd)
{
    const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
    json_t *cond = sbx_condition(pod, "Ready");

    if (!pod) {
        *rd = (struct ready){"False", "DependenciesNotReady", "Pod does not exist yet"};
        return;
    }
    if (json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp")) {
        *rd = (struct ready){"False", "DependenciesNotReady", "Pod is terminating"};
        return;
    }
    if (cond && !strcmp(json_string_value(json_object_get(cond, "status")) ?: "", "True")) {
        *rd = (struct ready){"True", "DependenciesReady", "Pod is Ready"};
        return;
    }
    *rd = (struct ready){"False", "DependenciesNotReady", ""};
    snprintf(rd->message, sizeof(rd->message), "Pod is not Ready (phase %s)",
             phase ? phase : "unknown");
}

/* A Pod not Ready while a claim of the sandbox is not bound waits on that volume: the scheduler
 * holds a Pod whose claims are unbound. */
static void volumes_ready(const struct sbx_volumes *vol, struct ready *rd)
{
    if (!strcmp(rd->status, "True") || !vol->unbound[0])
        return;
    *rd = (struct ready){"False", "VolumeClaimNotBound", ""};
    snprintf(rd->message, sizeof(rd->message),
             "PersistentVolumeClaim \"%.180s\" is not bound (phase %.20s)", vol->unbound,
             vol->phase);
}

/* The status the sandbox should have. Conditions keep their lastTransitionTime while their
 * status holds. */
static json_t *desired_status(struct sbx_ctrl *c, json_t *sb, json_t *pod, json_t *svc,
                              const struct ready *rd)
{
    const char *ns = sbx_meta_str(sb, "namespace"), *name = sbx_meta_str(sb, "name");
    json_t *ip, *ips = json_array();
    char hash[9], selector[64];
    size_t i;

    json_array_foreach(json_object_get(json_object_get(pod, "status"), "podIPs"), i, ip)
    {
        const char *v = json_string_value(json_object_get(ip, "ip"));
        if (v)
            json_array_append_new(ips, json_string(v));
    }
    sbx_name_hash(name, hash);
    snprintf(selector, sizeof(selector), "%s=%s", SBX_LABEL_HASH, hash);
    json_t *st = json_pack(
        "{s:[o], s:s}", "conditions",
        sbx_ready_condition(rd->status, rd->reason, rd->message, sb,
                            json_object_get(json_object_get(sb, "metadata"), "generation")),
        "selector", selector);
    if (!st) {
        json_decref(ips);
        return NULL;
    }
    /* Finished, only while the Pod is in a terminal phase (claims expire by it). */
    const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
    bool ok = phase && !strcmp(phase, "Succeeded");
    if (ok || (phase && !strcmp(phase, "Failed")))
        json_array_append_new(
            json_object_get(st, "conditions"),
            sbx_new_condition("Finished", "True", ok ? "PodSucceeded" : "PodFailed",
                              ok ? "Pod completed successfully" : "Pod failed", sb,
                              json_object_get(json_object_get(sb, "metadata"), "generation")));
    if (json_array_size(ips))
        json_object_set(st, "podIPs", ips);
    json_decref(ips);
    const char *node = json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
    if (node)
        json_object_set_new(st, "nodeName", json_string(node));
    if (svc) {
        char fqdn[600];
        snprintf(fqdn, sizeof(fqdn), "%s.%s.svc.%s", name, ns, c->opts.cluster_domain);
        json_object_set_new(st, "service", json_string(name));
        json_object_set_new(st, "serviceFQDN", json_string(fqdn));
    }
    return st;
}

/* Write-behind: a status change that leaves the Ready condition's status and reason as they are
 * (a Pending Pod got its node, its message changed) is progress nobody acts on; it waits up to
 * --sandbox-write-behind-window so that the changes of that window go out in one write, or in
 * the write of the next Ready transition, which is never held. Returns true when this write is
 * held (the key is queued for the end of the window). */
static bool hold_write(struct sbx_ctrl *c, const char *key, json_t *old, json_t *want)
{
    json_t *oc = NULL, *wc = json_array_get(json_object_get(want, "conditions"), 0), *cond;
    uint64_t now = sbx_now_ns(), window = c->opts.write_behind_ms * 1000000;
    bool hold = false;
    size_t i;

    json_array_foreach(json_object_get(old, "conditions"), i, cond)
    {
        const char *t = json_string_value(json_object_get(cond, "type"));
        if (t && !strcmp(t, "Ready"))
            oc = cond;
    }
    bool progress = window && oc &&
                    json_equal(json_object_get(oc, "status"), json_object_get(wc, "status")) &&
                    json_equal(json_object_get(oc, "reason"), json_object_get(wc, "reason"));
    pthread_mutex_lock(&c->mu);
    json_t *since = json_object_get(c->held, key);
    if (!progress) {
        json_object_del(c->held, key);
    } else if (!since) {
        json_object_set_new(c->held, key, json_integer((json_int_t)now));
        hold = true;
    } else {
        hold = now - (uint64_t)json_integer_value(since) < window;
        if (!hold)
            json_object_del(c->held, key);
    }
    pthread_mutex_unlock(&c->mu);
    if (hold && !since) {
        char qk[700];
        if (snprintf(qk, sizeof(qk), "sandbox:%s", key) < (int)sizeof(qk))
            sbx_ctrl_enqueue(c, qk, c->opts.write_behind_ms + 1);
        atomic_fetch_add(&c->sandbox_status_held, 1);
    }
    return hold;
}

/* Expiry: returns 1 when expired, 0 when not (and queues the key for shutdownTime). */
static int check_expiry(struct sbx_ctrl *c, json_t *sb, const char *key)
{
    const char *when =
        json_string_value(json_object_get(json_object_get(sb, "spec"), "shutdownTime"));
    time_t t, now = time(NULL);

    if (!when || sbx_parse_rfc3339(when, &t) < 0)
        return 0;
    if (t <= now)
        return 1;
    char qk[700];
    if (snprintf(qk, sizeof(qk), "sandbox:%s", key) < (int)sizeof(qk))
        sbx_ctrl_enqueue(c, qk, (uint64_t)(t - now) * 1000 + 100);
    return 0;
}

/* A stopped sandbox reports no Pod or Service, even while they terminate. */
static void drop(json_t **pod, json_t **svc)
{
    json_decref(*pod);
    json_decref(*svc);
    *pod = *svc = NULL;
}

/* Writes the status rd and the pod and service make when it differs from the cached one. */
static int write_status(struct sbx_ctrl *c, const char *key, json_t *sb, json_t *pod, json_t *svc,
                        const struct ready *rd, struct sbx_error *err)
{
    json_auto_t *st = desired_status(c, sb, pod, svc, rd);
    json_t *old = json_object_get(sb, "status");
    uint64_t rv = 0;
    char qk[700];

    if (!st)
        return sbx_error_set(err, ENOMEM, "status");
    snprintf(qk, sizeof(qk), "sandbox:%s", key);
    if (json_equal(old, st) || sbx_ctrl_cache_behind(c, qk, sb) || hold_write(c, key, old, st))
        return 0;
    int r = sbx_api_update_status(c->kube, SBX_API_VERSION, sbx_meta_str(sb, "namespace"),
                                  "sandboxes", sbx_meta_str(sb, "name"), old, st, &rv, err);
    if (r > 0) {
        atomic_fetch_add(&c->sandbox_status_writes, 1);
        sbx_ctrl_wrote(c, qk, rv);
    }
    return r < 0 ? r : 0;
}

/* The Ready reason of a Sandbox whose Pod cannot be made, by why. */
static const char *blocked_reason(int r)
{
    switch (r) {
    case -EINVAL:
        return "InvalidSpec";
    case -EEXIST:
        return "VolumeClaimConflict";
    case -EINPROGRESS:
        return "EntrypointPending"; /* the image's entrypoint being looked up */
    default:
        return "EntrypointUnresolved"; /* the lookup failed; retried */
    }
}

static int sandbox_reconcile(struct sbx_ctrl *c, const char *key, struct sbx_error *err)
{
    json_auto_t *sb = sbx_informer_get(c->sandboxes, key);
    json_auto_t *pod = NULL, *svc = NULL;
    struct ready rd;
    struct sbx_volumes vol;
    char ns[300], path[700];
    const char *name;
    int r;

    if (sbx_split_key(key, ns, sizeof(ns), &name) < 0)
        return sbx_error_set(err, EINVAL, "bad key");
    if (!sb) /* gone: the garbage collector would do this, but may not run (its claims are left
              * to it: a workspace is data) */
        return remove_children(c, key, ns, name, NULL, true, err);
    if (json_object_get(json_object_get(sb, "metadata"), "deletionTimestamp"))
        return 0;
    pod = sbx_informer_get(c->pods, key);
    svc = sbx_informer_get(c->services, key);
    if (pod && !sbx_controlled_by(pod, "Sandbox", sbx_meta_str(sb, "uid")))
        return sbx_error_set(err, EEXIST, "pod \"%s\" exists and is not this sandbox's", key);

    json_t *spec = json_object_get(sb, "spec");
    const char *mode = json_string_value(json_object_get(spec, "operatingMode"));
    const char *policy = json_string_value(json_object_get(spec, "shutdownPolicy"));
    if (check_expiry(c, sb, key)) {
        if (policy && !strcmp(policy, "Delete")) {
            snprintf(path, sizeof(path), "/apis/%s/namespaces/%s/sandboxes/%s", SBX_API_VERSION, ns,
                     name);
            return sbx_api_delete(c->kube, path, err);
        }
        if ((r = remove_children(c, key, ns, name, sb, false, err)) < 0)
            return r;
        rd = (struct ready){"False", "SandboxExpired", "shutdownTime has passed"};
        drop(&pod, &svc);
    } else if (mode && !strcmp(mode, "Suspended")) {
        /* Its claims stay, and are made as they would be running: the Pod comes back to them. */
        if ((r = remove_children(c, key, ns, name, sb, false, err)) < 0 ||
            ((r = sbx_sandbox_volumes(c, sb, ns, &vol, err)) < 0 && r != -EINVAL))
            return r;
        rd = (struct ready){"False", "SandboxSuspended", "operatingMode is Suspended"};
        drop(&pod, &svc);
    } else {
        r = sbx_sandbox_volumes(c, sb, ns, &vol, err);
        if (r >= 0)
            r = ensure_running(c, sb, pod, svc, ns, err);
        if (r == -EINVAL || r == -EEXIST || r == -EINPROGRESS || r == -EAGAIN) {
            /* the spec cannot be run as it is, or not yet: say so */
            rd = (struct ready){"False", blocked_reason(r), ""};
            snprintf(rd.message, sizeof(rd.message), "%s", err->msg);
        } else if (r < 0) {
            return r;
        } else {
            pod_ready(pod, &rd);
            volumes_ready(&vol, &rd);
        }
    }
    r = write_status(c, key, sb, pod, svc, &rd, err);
    /* A claim in the way: said, and looked at again (it may go; no event of it reaches us). */
    if (r >= 0 && !strcmp(rd.reason, "VolumeClaimConflict"))
        return sbx_error_set(err, EEXIST, "%s", rd.message);
    return r;
}

const struct sbx_reconciler sbx_sandbox_reconciler = {.kind = "sandbox",
                                                      .reconcile = sandbox_reconcile};
