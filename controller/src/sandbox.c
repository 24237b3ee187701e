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

#include "cleanup.h"
#include "controller.h"
#include "log.h"

struct ready {
    const char *status, *reason;
    char message[256];
};

static const char *meta_str(json_t *obj, const char *field)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), field));
}

/* Splits "ns/name". */
static int split_key(const char *key, char *ns, size_t nssz, const char **name)
{
    const char *slash = strchr(key, '/');

    if (!slash || (size_t)(slash - key) >= nssz)
        return -EINVAL;
    memcpy(ns, key, (size_t)(slash - key));
    ns[slash - key] = '\0';
    *name = slash + 1;
    return 0;
}

/* Parses an RFC 3339 UTC time ("2026-01-02T03:04:05Z", fraction allowed). */
static int parse_time(const char *s, time_t *ret)
{
    struct tm tm = {0};
    const char *end = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;

    if (!end)
        return -EINVAL;
    if (*end == '.')
        for (end++; *end >= '0' && *end <= '9'; end++)
            ;
    if (strcmp(end, "Z") != 0)
        return -EINVAL;
    *ret = timegm(&tm);
    return 0;
}

static void format_now(char buf[32])
{
    time_t t = time(NULL);
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static bool controlled_by(json_t *child, json_t *sandbox)
{
    json_t *ref;
    size_t i;
    const char *uid = meta_str(sandbox, "uid");

    json_array_foreach(json_object_get(json_object_get(child, "metadata"), "ownerReferences"), i,
                       ref)
    {
        const char *u = json_string_value(json_object_get(ref, "uid"));
        if (json_is_true(json_object_get(ref, "controller")) && u && uid && !strcmp(u, uid))
            return true;
    }
    return false;
}

/* DELETE path; 404 counts as done. */
static int delete (struct sbx_ctrl *c, const char *path, struct sbx_error *err)
{
    long status;
    int r = sbx_kube_request(c->kube, "DELETE", path, NULL, NULL, &status, NULL, err);

    if (r < 0)
        return r;
    if (status != 200 && status != 202 && status != 404)
        return sbx_error_set(err, EIO, "DELETE %s: HTTP %ld", path, status);
    if (status != 404)
        log_info("deleted %s", path);
    return 0;
}

/* POST obj to path; 409 (already there, our cache lags) counts as done. */
static int create(struct sbx_ctrl *c, const char *path, json_t *obj, struct sbx_error *err)
{
    json_auto_t *body = NULL;
    long status;
    int r = sbx_kube_request(c->kube, "POST", path, obj, NULL, &status, &body, err);

    if (r < 0)
        return r;
    if (status == 201 || status == 200) {
        log_info("created %s/%s", path, meta_str(obj, "name"));
        return 0;
    }
    if (status == 409)
        return 0;
    return sbx_error_set(err, status == 422 || status == 400 ? EINVAL : EIO,
                         "POST %s: HTTP %ld: %s", path, status,
                         json_string_value(json_object_get(body, "message")));
}

/* Removes the Pod and Service of a sandbox that is gone, suspended or expired. */
static int remove_children(struct sbx_ctrl *c, const char *key, const char *ns, const char *name,
                           json_t *sandbox, bool secret_too, struct sbx_error *err)
{
    char path[700], secret[300];
    json_auto_t *pod = sbx_informer_get(c->pods, key);
    json_auto_t *svc = sbx_informer_get(c->services, key);
    int r;

    if (pod && (!sandbox || controlled_by(pod, sandbox)) &&
        !json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp")) {
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
        if ((r = delete (c, path, err)) < 0)
            return r;
    }
    if (svc && (!sandbox || controlled_by(svc, sandbox))) {
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/services/%s", ns, name);
        if ((r = delete (c, path, err)) < 0)
            return r;
    }
    if (secret_too && (pod || svc) && sbx_token_secret_name(name, secret, sizeof(secret))) {
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets/%s", ns, secret);
        if ((r = delete (c, path, err)) < 0)
            return r;
    }
    return 0;
}

static int ensure_running(struct sbx_ctrl *c, json_t *sb, json_t *pod, json_t *svc, const char *ns,
                          struct sbx_error *err)
{
    char path[700];
    int r;

    if (!pod) {
        json_auto_t *want = NULL, *secret = NULL;
        unsigned char raw[32];
        char token[65];
        if ((r = sbx_sandbox_pod(sb, &c->opts.inject, &want, err)) < 0)
            return r;
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
            return sbx_error_set(err, errno, "getrandom");
        for (size_t i = 0; i < sizeof(raw); i++)
            snprintf(token + 2 * i, 3, "%02x", raw[i]);
        /* An existing Secret (409) keeps its token: clients may hold it already. */
        if (!(secret = sbx_sandbox_secret(sb, token)))
            return sbx_error_set(err, ENOMEM, "secret");
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets", ns);
        if ((r = create(c, path, secret, err)) < 0)
            return r;
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", ns);
        if ((r = create(c, path, want, err)) < 0)
            return r;
    }
    if (!svc && json_is_true(json_object_get(json_object_get(sb, "spec"), "service"))) {
        json_auto_t *want = sbx_sandbox_service(sb, &c->opts.inject);
        if (!want)
            return sbx_error_set(err, ENOMEM, "service");
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/services", ns);
        if ((r = create(c, path, want, err)) < 0)
            return r;
    }
    return 0;
}

static json_t *pod_condition(json_t *pod, const char *type)
{
    json_t *cond;
    size_t i;

    json_array_foreach(json_object_get(json_object_get(pod, "status"), "conditions"), i, cond)
    {
        const char *t = json_string_value(json_object_get(cond, "type"));
        if (t && !strcmp(t, type))
            return cond;
    }
    return NULL;
}

static void pod_ready(json_t *pod, struct ready *rd)
{
    const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
    json_t *cond = pod_condition(pod, "Ready");

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

/* The status the sandbox should have. Conditions keep their lastTransitionTime while their
 * status holds. */
static json_t *desired_status(struct sbx_ctrl *c, json_t *sb, json_t *pod, json_t *svc,
                              const struct ready *rd)
{
    json_t *old = json_object_get(sb, "status"), *cond, *ips = json_array();
    const char *ltt = NULL, *ns = meta_str(sb, "namespace"), *name = meta_str(sb, "name");
    char now[32], hash[9], selector[64];
    size_t i;

    json_array_foreach(json_object_get(old, "conditions"), i, cond)
    {
        const char *t = json_string_value(json_object_get(cond, "type"));
        const char *s = json_string_value(json_object_get(cond, "status"));
        if (t && s && !strcmp(t, "Ready") && !strcmp(s, rd->status))
            ltt = json_string_value(json_object_get(cond, "lastTransitionTime"));
    }
    format_now(now);
    json_array_foreach(json_object_get(json_object_get(pod, "status"), "podIPs"), i, cond)
    {
        const char *ip = json_string_value(json_object_get(cond, "ip"));
        if (ip)
            json_array_append_new(ips, json_string(ip));
    }
    sbx_name_hash(name, hash);
    snprintf(selector, sizeof(selector), "%s=%s", SBX_LABEL_HASH, hash);
    json_t *st = json_pack("{s:[{s:s, s:s, s:s, s:s, s:s, s:O?}], s:s}", "conditions", "type",
                           "Ready", "status", rd->status, "reason", rd->reason, "message",
                           rd->message, "lastTransitionTime", ltt ? ltt : now, "observedGeneration",
                           json_object_get(json_object_get(sb, "metadata"), "generation"),
                           "selector", selector);
    if (!st) {
        json_decref(ips);
        return NULL;
    }
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

/* Merge-patches the status when it differs from what the object has. */
static int update_status(struct sbx_ctrl *c, json_t *sb, json_t *want, const char *ns,
                         const char *name, struct sbx_error *err)
{
    json_t *old = json_object_get(sb, "status");
    char path[700];
    long status;
    int r;

    if (json_equal(old, want))
        return 0;
    /* Fields we no longer set must be removed explicitly in a merge patch. */
    json_auto_t *patch_status = json_deep_copy(want);
    const char *k;
    json_t *v;
    json_object_foreach(old, k, v)
    {
        if (!json_object_get(want, k))
            json_object_set_new(patch_status, k, json_null());
    }
    json_auto_t *patch = json_pack("{s:O}", "status", patch_status);
    snprintf(path, sizeof(path), "/apis/%s/namespaces/%s/sandboxes/%s/status", SBX_API_VERSION, ns,
             name);
    r = sbx_kube_request(c->kube, "PATCH", path, patch, "application/merge-patch+json", &status,
                         NULL, err);
    if (r < 0)
        return r;
    if (status == 404)
        return 0; /* deleted meanwhile */
    if (status != 200)
        return sbx_error_set(err, EIO, "PATCH %s: HTTP %ld", path, status);
    return 0;
}

/* Expiry: returns 1 when expired, 0 when not (and queues the key for shutdownTime). */
static int check_expiry(struct sbx_ctrl *c, json_t *sb, const char *key)
{
    const char *when =
        json_string_value(json_object_get(json_object_get(sb, "spec"), "shutdownTime"));
    time_t t, now = time(NULL);

    if (!when || parse_time(when, &t) < 0)
        return 0;
    if (t <= now)
        return 1;
    sbx_wq_add_after(c->queue, key, (uint64_t)(t - now) * 1000 + 100);
    return 0;
}

/* A stopped sandbox reports no Pod or Service, even while they terminate. */
static void drop(json_t **pod, json_t **svc)
{
    json_decref(*pod);
    json_decref(*svc);
    *pod = *svc = NULL;
}

int sbx_sandbox_reconcile(struct sbx_ctrl *c, const char *key, struct sbx_error *err)
{
    json_auto_t *sb = sbx_informer_get(c->sandboxes, key);
    json_auto_t *pod = NULL, *svc = NULL, *st = NULL;
    struct ready rd;
    char ns[300], path[700];
    const char *name;
    int r;

    if (split_key(key, ns, sizeof(ns), &name) < 0)
        return sbx_error_set(err, EINVAL, "bad key");
    if (!sb) /* gone: the garbage collector would do this, but may not run */
        return remove_children(c, key, ns, name, NULL, true, err);
    if (json_object_get(json_object_get(sb, "metadata"), "deletionTimestamp"))
        return 0;
    pod = sbx_informer_get(c->pods, key);
    svc = sbx_informer_get(c->services, key);
    if (pod && !controlled_by(pod, sb))
        return sbx_error_set(err, EEXIST, "pod \"%s\" exists and is not this sandbox's", key);

    json_t *spec = json_object_get(sb, "spec");
    const char *mode = json_string_value(json_object_get(spec, "operatingMode"));
    const char *policy = json_string_value(json_object_get(spec, "shutdownPolicy"));
    if (check_expiry(c, sb, key)) {
        if (policy && !strcmp(policy, "Delete")) {
            snprintf(path, sizeof(path), "/apis/%s/namespaces/%s/sandboxes/%s", SBX_API_VERSION, ns,
                     name);
            return delete (c, path, err);
        }
        if ((r = remove_children(c, key, ns, name, sb, false, err)) < 0)
            return r;
        rd = (struct ready){"False", "SandboxExpired", "shutdownTime has passed"};
        drop(&pod, &svc);
    } else if (mode && !strcmp(mode, "Suspended")) {
        if ((r = remove_children(c, key, ns, name, sb, false, err)) < 0)
            return r;
        rd = (struct ready){"False", "SandboxSuspended", "operatingMode is Suspended"};
        drop(&pod, &svc);
    } else {
        r = ensure_running(c, sb, pod, svc, ns, err);
        if (r == -EINVAL) { /* the spec cannot be run as it is: say so, do not retry */
            rd = (struct ready){"False", "InvalidSpec", ""};
            snprintf(rd.message, sizeof(rd.message), "%s", err->msg);
        } else if (r < 0) {
            return r;
        } else {
            pod_ready(pod, &rd);
        }
    }
    if (!(st = desired_status(c, sb, pod, svc, &rd)))
        return sbx_error_set(err, ENOMEM, "status");
    return update_status(c, sb, st, ns, name, err);
}
