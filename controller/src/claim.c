/* Claims: a SandboxClaim gets a Sandbox of its warm pool's template. A ready warm sandbox is
 * adopted with one optimistic-concurrency write (its controller reference moves from the pool to
 * the claim, its labels change, the claim's lifecycle is copied, all in one merge patch carrying
 * the resourceVersion it was chosen at), then the claim's status is written: two writes a claim.
 * With no ready sandbox, or when the claim asks for env or pod metadata that a running pod
 * cannot take, a Sandbox is created for it (a cold start). The choice among ready sandboxes
 * spreads claims across nodes. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "cleanup.h"
#include "controller.h"
#include "log.h"
#include "object.h"
#include "reconcilers.h"

#define ADOPT_TRIES 3

static json_t *claim_ref(json_t *claim)
{
    return json_pack("{s:s, s:s, s:s?, s:s?, s:b, s:b}", "apiVersion", SBX_EXT_API_VERSION, "kind",
                     "SandboxClaim", "name", sbx_meta_str(claim, "name"), "uid",
                     sbx_meta_str(claim, "uid"), "controller", 1, "blockOwnerDeletion", 1);
}

static void count_write(struct sbx_ctrl *c)
{
    atomic_fetch_add(&c->claim_writes, 1);
}

/* The lifecycle fields a claim hands its sandbox. */
static json_t *lifecycle(json_t *claim)
{
    json_t *lc = json_object_get(json_object_get(claim, "spec"), "lifecycle");
    const char *when = json_string_value(json_object_get(lc, "shutdownTime"));
    const char *policy = json_string_value(json_object_get(lc, "shutdownPolicy"));
    json_t *out = json_object();

    if (when)
        json_object_set_new(out, "shutdownTime", json_string(when));
    if (when && policy)
        json_object_set_new(out, "shutdownPolicy",
                            json_string(!strcmp(policy, "Retain") ? "Retain" : "Delete"));
    return out;
}

/* True when the claim needs its own pod: env, volumes or pod metadata only a new pod can take. */
static bool needs_cold(json_t *claim)
{
    json_t *spec = json_object_get(claim, "spec");
    json_t *md = json_object_get(spec, "additionalPodMetadata");

    return json_array_size(json_object_get(spec, "env")) > 0 ||
           json_array_size(json_object_get(spec, "volumeClaimTemplates")) > 0 ||
           json_object_size(json_object_get(md, "labels")) > 0 ||
           json_object_size(json_object_get(md, "annotations")) > 0;
}

/* Picks a ready sandbox of the pool, on the node holding the fewest claimed sandboxes, and
 * marks it taken. Returns a new reference or NULL. */
static json_t *choose(struct sbx_ctrl *c, json_t *pool, const char *claim_key)
{
    json_auto_t *all = sbx_informer_list(c->sandboxes);
    json_auto_t *per_node = json_object();
    const char *uid = sbx_meta_str(pool, "uid"), *ns = sbx_meta_str(pool, "namespace");
    json_t *sb, *best = NULL;
    json_int_t best_load = 0;
    size_t i;

    json_array_foreach(all, i, sb)
    {
        const char *node =
            json_string_value(json_object_get(json_object_get(sb, "status"), "nodeName"));
        if (node && sbx_controlled_by(sb, "SandboxClaim", NULL)) {
            json_int_t n = json_integer_value(json_object_get(per_node, node));
            json_object_set_new(per_node, node, json_integer(n + 1));
        }
    }
    pthread_mutex_lock(&c->mu);
    json_array_foreach(all, i, sb)
    {
        char k[600];
        const char *sns = sbx_meta_str(sb, "namespace");
        if (!sns || strcmp(sns, ns) != 0 || !sbx_controlled_by(sb, "SandboxWarmPool", uid) ||
            !sbx_is_ready(sb) ||
            json_object_get(json_object_get(sb, "metadata"), "deletionTimestamp") ||
            !sbx_object_key(sb, k, sizeof(k)) || json_object_get(c->taken, k))
            continue;
        const char *node =
            json_string_value(json_object_get(json_object_get(sb, "status"), "nodeName"));
        json_int_t load = node ? json_integer_value(json_object_get(per_node, node)) : 0;
        if (!best || load < best_load) {
            best = sb;
            best_load = load;
        }
    }
    if (best) {
        char k[600];
        sbx_object_key(best, k, sizeof(k));
        json_object_set_new(c->taken, k, json_string(claim_key));
        json_incref(best);
    }
    pthread_mutex_unlock(&c->mu);
    return best;
}

static void release(struct sbx_ctrl *c, json_t *sb)
{
    char k[600];

    if (!sbx_object_key(sb, k, sizeof(k)))
        return;
    pthread_mutex_lock(&c->mu);
    json_object_del(c->taken, k);
    pthread_mutex_unlock(&c->mu);
}

/* The one write that moves a warm sandbox to the claim. Returns 1 when adopted, 0 when someone
 * else changed it first (409), < 0 on failure. */
static int adopt(struct sbx_ctrl *c, json_t *claim, json_t *sb, struct sbx_error *err)
{
    char path[700];
    json_auto_t *patch = json_pack(
        "{s:{s:s?, s:[o], s:{s:n, s:s?}}, s:o}", "metadata", "resourceVersion",
        sbx_meta_str(sb, "resourceVersion"), "ownerReferences", claim_ref(claim), "labels",
        SBX_LABEL_POOL, SBX_LABEL_CLAIM, sbx_meta_str(claim, "uid"), "spec", lifecycle(claim));

    if (!patch)
        return sbx_error_set(err, ENOMEM, "patch");
    if (json_object_size(json_object_get(patch, "spec")) == 0)
        json_object_del(patch, "spec");
    snprintf(path, sizeof(path), "/apis/%s/namespaces/%s/sandboxes/%s", SBX_API_VERSION,
             sbx_meta_str(sb, "namespace"), sbx_meta_str(sb, "name"));
    count_write(c);
    long st = sbx_api_patch(c->kube, path, patch, NULL, err);
    if (st < 0)
        return (int)st;
    if (st == 409 || st == 404)
        return 0;
    if (st != 200)
        return sbx_error_set(err, EIO, "PATCH %s: HTTP %ld", path, st);
    log_info("claim \"%s/%s\" adopted warm sandbox \"%s\"", sbx_meta_str(claim, "namespace"),
             sbx_meta_str(claim, "name"), sbx_meta_str(sb, "name"));
    return 1;
}

/* The claim's env entries: {name, value, containerName}, strings (value may be absent). */
static int check_env(json_t *env, struct sbx_error *err)
{
    json_t *e, *v;
    size_t i;

    if (!env || json_is_null(env))
        return 0;
    if (!json_is_array(env))
        return sbx_error_set(err, EPERM, "spec.env is not a list");
    json_array_foreach(env, i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        v = json_object_get(e, "value");
        if (!name || !*name || (v && !json_is_string(v) && !json_is_null(v)) ||
            (json_object_get(e, "containerName") &&
             !json_is_string(json_object_get(e, "containerName"))))
            return sbx_error_set(err, EPERM,
                                 "spec.env[%zu]: name, value and containerName "
                                 "must be strings",
                                 i);
    }
    return 0;
}

/* The variable named `name` in a container's env, or NULL (borrowed). */
static json_t *env_var(json_t *ct, const char *name)
{
    json_t *v;
    size_t i;

    json_array_foreach(json_object_get(ct, "env"), i, v)
    {
        const char *n = json_string_value(json_object_get(v, "name"));
        if (n && !strcmp(n, name))
            return v;
    }
    return NULL;
}

/* One variable of the claim into one container, as the policy allows. */
static int inject(json_t *ct, json_t *e, bool overrides, struct sbx_error *err)
{
    const char *name = json_string_value(json_object_get(e, "name")) ?: "";
    const char *cn = json_string_value(json_object_get(ct, "name")) ?: "";
    json_t *have = env_var(ct, name), *env = json_object_get(ct, "env");

    if (!overrides && json_array_size(json_object_get(ct, "envFrom")) > 0)
        return sbx_error_set(err, EPERM,
                             "container \"%s\" uses envFrom: with envVarsInjectionPolicy Allowed "
                             "a claim's variable could override one of its sources",
                             cn);
    if (have && !overrides)
        return sbx_error_set(err, EPERM,
                             "variable \"%s\" of container \"%s\" would be overridden: the "
                             "template's envVarsInjectionPolicy is Allowed, not Overrides",
                             name, cn);
    const char *value = json_string_value(json_object_get(e, "value"));
    json_t *v = json_pack("{s:s, s:s}", "name", name, "value", value ? value : "");
    if (!v)
        return sbx_error_set(err, ENOMEM, "env");
    if (have) {
        /* Replaced where it stands (a later $(VAR) may refer to it); a duplicate of the name
         * further down, which would win, goes. */
        size_t i = json_array_size(env);
        json_object_clear(have);
        json_object_update(have, v);
        json_decref(v);
        while (i-- > 0) {
            json_t *o = json_array_get(env, i);
            const char *n = json_string_value(json_object_get(o, "name"));
            if (o != have && n && !strcmp(n, name))
                json_array_remove(env, i);
        }
        return 0;
    }
    if (!json_is_array(env))
        json_object_set_new(ct, "env", env = json_array());
    json_array_append_new(env, v);
    return 0;
}

/* Env of the claim into the template's containers (all, or the one named), as the template's
 * envVarsInjectionPolicy allows: Disallowed (the default) takes none, Allowed adds variables a
 * container does not set (and none to a container with envFrom), Overrides also replaces its
 * values. Returns 0, or -EPERM with the reason in err. */
static int apply_env(json_t *sandbox, json_t *claim, json_t *tmpl, struct sbx_error *err)
{
    json_t *pspec =
        json_object_get(json_object_get(json_object_get(sandbox, "spec"), "podTemplate"), "spec");
    json_t *env = json_object_get(json_object_get(claim, "spec"), "env");
    const char *policy =
        json_string_value(json_object_get(json_object_get(tmpl, "spec"), "envVarsInjectionPolicy"));
    bool overrides = policy && !strcmp(policy, "Overrides");
    json_t *e, *ct;
    size_t i, j;
    int r;

    if (json_array_size(env) == 0)
        return 0;
    if (!overrides && (!policy || strcmp(policy, "Allowed") != 0))
        return sbx_error_set(err, EPERM,
                             "the claim sets env but the template's envVarsInjectionPolicy is %s",
                             policy ? policy : "Disallowed");
    json_array_foreach(env, i, e)
    {
        const char *only = json_string_value(json_object_get(e, "containerName"));
        bool found = false;
        json_array_foreach(json_object_get(pspec, "containers"), j, ct)
        {
            const char *cn = json_string_value(json_object_get(ct, "name"));
            if (!json_is_object(ct) || (only && (!cn || strcmp(cn, only) != 0)))
                continue;
            found = true;
            if ((r = inject(ct, e, overrides, err)) < 0)
                return r;
        }
        if (!found)
            return sbx_error_set(err, EPERM, "env names container \"%s\", which the template lacks",
                                 only ? only : "");
    }
    return 0;
}

/* The index of the volume claim template named `name` in list, or -1. */
static long vct_index(json_t *list, const char *name)
{
    json_t *v;
    size_t i;

    json_array_foreach(list, i, v)
    {
        const char *n = json_string_value(json_object_get(json_object_get(v, "metadata"), "name"));
        if (n && !strcmp(n, name))
            return (long)i;
    }
    return -1;
}

int sbx_claim_volumes(json_t *claim, json_t *tmpl, json_t **ret, struct sbx_error *err)
{
    json_t *tspec = json_object_get(tmpl, "spec");
    json_t *tv = json_object_get(tspec, "volumeClaimTemplates");
    json_t *cv = json_object_get(json_object_get(claim, "spec"), "volumeClaimTemplates"), *v;
    const char *policy = json_string_value(json_object_get(tspec, "volumeClaimTemplatesPolicy"));
    bool overrides = policy && !strcmp(policy, "Overrides");
    struct sbx_error e = {0};
    size_t i;

    *ret = NULL;
    if (sbx_check_claim_templates(tv, &e) < 0)
        return sbx_error_set(err, EPERM, "the template's %s", e.msg);
    json_auto_t *out = json_is_array(tv) ? json_deep_copy(tv) : json_array();
    if (!out)
        return sbx_error_set(err, ENOMEM, "volume claim templates");
    if (json_array_size(cv) > 0) {
        if (sbx_check_claim_templates(cv, &e) < 0)
            return sbx_error_set(err, EPERM, "the claim's %s", e.msg);
        if (!overrides && (!policy || strcmp(policy, "Allowed") != 0))
            return sbx_error_set(err, EPERM,
                                 "the claim sets volumeClaimTemplates but the template's "
                                 "volumeClaimTemplatesPolicy is %s",
                                 policy ? policy : "Disallowed");
    }
    json_array_foreach(cv, i, v)
    {
        const char *n = json_string_value(json_object_get(json_object_get(v, "metadata"), "name"));
        long at = vct_index(out, n);
        if (at >= 0 && !overrides)
            return sbx_error_set(err, EPERM,
                                 "the claim's volume claim template \"%.100s\" would override the "
                                 "template's: its volumeClaimTemplatesPolicy is Allowed, not "
                                 "Overrides",
                                 n);
        if ((at >= 0 ? json_array_set_new(out, (size_t)at, json_deep_copy(v))
                     : json_array_append_new(out, json_deep_copy(v))) < 0)
            return sbx_error_set(err, ENOMEM, "volume claim templates");
    }
    *ret = TAKE_PTR(out);
    return 0;
}

int sbx_claim_sandbox(json_t *claim, json_t *tmpl, json_t **ret, struct sbx_error *err)
{
    const char *ns = sbx_meta_str(claim, "namespace"), *name = sbx_meta_str(claim, "name");
    json_t *md = json_object_get(json_object_get(claim, "spec"), "additionalPodMetadata");
    json_auto_t *labels = json_pack("{s:s?}", SBX_LABEL_CLAIM, sbx_meta_str(claim, "uid"));
    json_auto_t *want = NULL;
    int r;

    if (!ns || !name || !labels)
        return sbx_error_set(err, !labels ? ENOMEM : EINVAL, "claim without a name");
    if ((r = check_env(json_object_get(json_object_get(claim, "spec"), "env"), err)) < 0)
        return r;
    if ((r = sbx_sandbox_from_template(tmpl, ns, name, claim_ref(claim), labels, &want, err)) < 0)
        return r;
    json_t *spec = json_object_get(want, "spec");
    json_auto_t *lc = lifecycle(claim);
    json_object_update(spec, lc);
    json_auto_t *vcts = NULL;
    if ((r = sbx_claim_volumes(claim, tmpl, &vcts, err)) < 0)
        return r;
    if (json_array_size(vcts) > 0)
        json_object_set(spec, "volumeClaimTemplates", vcts);
    json_t *pt = json_object_get(spec, "podTemplate");
    json_t *pmd = json_object_get(pt, "metadata");
    for (int i = 0; i < 2; i++) {
        const char *f = i ? "annotations" : "labels";
        json_t *add = json_object_get(md, f), *have = json_object_get(pmd, f), *v;
        const char *k;
        if (!json_is_object(add))
            continue;
        json_object_foreach(add, k, v)
        {
            if (!json_is_string(v))
                return sbx_error_set(err, EINVAL,
                                     "spec.additionalPodMetadata.%s: \"%.100s\" is "
                                     "not a string",
                                     f, k);
        }
        if (!json_is_object(have)) {
            have = json_object();
            json_object_set_new(pmd, f, have);
        }
        /* The template's label that its NetworkPolicy selects by stays. */
        json_t *keep = json_incref(json_object_get(have, SBX_LABEL_TEMPLATE));
        json_object_update(have, add);
        if (keep && !i)
            json_object_set(have, SBX_LABEL_TEMPLATE, keep);
        json_decref(keep);
    }
    if ((r = apply_env(want, claim, tmpl, err)) < 0)
        return r;
    *ret = TAKE_PTR(want);
    return 0;
}

static int claim_status(struct sbx_ctrl *c, json_t *claim, const char *sb_name, json_t *sb,
                        bool warm, const char *status, const char *reason, const char *message,
                        struct sbx_error *err);

/* The claim cannot be served as it asks (err says why): its status says so, with no retry. */
static int refuse(struct sbx_ctrl *c, json_t *claim, const char *reason, struct sbx_error *err)
{
    char why[sizeof(err->msg)];

    snprintf(why, sizeof(why), "%s", err->msg);
    return claim_status(c, claim, NULL, NULL, false, "False", reason, why, err);
}

/* A Sandbox for this claim alone, named like it. */
static int cold_start(struct sbx_ctrl *c, json_t *claim, json_t *tmpl, struct sbx_error *err)
{
    json_auto_t *want = NULL, *vcts = NULL;
    char path[600];
    int r = sbx_claim_volumes(claim, tmpl, &vcts, err);

    if (r == -EPERM) /* its volumes cannot be had as asked */
        return refuse(c, claim, "VolumeClaimTemplatesError", err);
    if (r < 0)
        return r;
    r = sbx_claim_sandbox(claim, tmpl, &want, err);
    if (r == -EPERM) /* its env cannot be served as it is */
        return refuse(c, claim, "EnvVarsInjectionRejected", err);
    if (r < 0)
        return r;
    snprintf(path, sizeof(path), "/apis/%s/namespaces/%s/sandboxes", SBX_API_VERSION,
             sbx_meta_str(claim, "namespace"));
    count_write(c);
    r = sbx_api_create(c->kube, path, want, err);
    if (r < 0)
        return r;
    if (r == 1) /* not when it existed already (our cache lagged) */
        atomic_fetch_add(&c->claims_cold, 1);
    return 0;
}

/* Writes the claim's status when it differs: the sandbox's name and IPs, Ready mirrored. */
static int claim_status(struct sbx_ctrl *c, json_t *claim, const char *sb_name, json_t *sb,
                        bool warm, const char *status, const char *reason, const char *message,
                        struct sbx_error *err)
{
    json_t *old = json_object_get(claim, "status");
    json_t *sst = json_object_get(sb, "status");

    if (sb) {
        json_t *rc = sbx_condition(sb, "Ready");
        status = json_string_value(json_object_get(rc, "status")) ?: "False";
        reason = json_string_value(json_object_get(rc, "reason")) ?: "DependenciesNotReady";
        message = json_string_value(json_object_get(rc, "message")) ?: "";
    }
    json_auto_t *want = json_pack(
        "{s:[o], s:{s:s?}}", "conditions",
        sbx_ready_condition(status, reason, message, claim,
                            json_object_get(json_object_get(claim, "metadata"), "generation")),
        "sandbox", "name", sb_name);
    if (!want)
        return sbx_error_set(err, ENOMEM, "status");
    if (json_array_size(json_object_get(sst, "podIPs")))
        json_object_set(json_object_get(want, "sandbox"), "podIPs", json_object_get(sst, "podIPs"));
    /* The sandbox's Finished condition, mirrored as it is. */
    json_t *fin = sbx_condition(sb, "Finished"), *ofin = sbx_condition(claim, "Finished");
    if (fin)
        json_array_append(json_object_get(want, "conditions"), fin);
    /* The message alone changing is not worth a write: claims are many. */
    json_t *oc = sbx_condition(claim, "Ready"),
           *wc = json_array_get(json_object_get(want, "conditions"), 0);
    if (oc && json_equal(json_object_get(old, "sandbox"), json_object_get(want, "sandbox")) &&
        (ofin == fin || json_equal(ofin, fin)) && /* json_equal(NULL, NULL) is 0 */
        json_equal(json_object_get(oc, "status"), json_object_get(wc, "status")) &&
        json_equal(json_object_get(oc, "reason"), json_object_get(wc, "reason")) &&
        json_equal(json_object_get(oc, "observedGeneration"),
                   json_object_get(wc, "observedGeneration")))
        return 0;
    char qk[700];
    uint64_t rv = 0;
    if (!sbx_queue_key(qk, sizeof(qk), "claim", sbx_meta_str(claim, "namespace"),
                       sbx_meta_str(claim, "name")))
        return sbx_error_set(err, ENAMETOOLONG, "claim key");
    if (sbx_ctrl_cache_behind(c, qk, claim))
        return 0;
    int r =
        sbx_api_update_status(c->kube, SBX_EXT_API_VERSION, sbx_meta_str(claim, "namespace"),
                              "sandboxclaims", sbx_meta_str(claim, "name"), old, want, &rv, err);
    if (r > 0) {
        char key[600];
        count_write(c);
        sbx_ctrl_wrote(c, qk, rv);
        /* Observed at the transition only: a later write of a Ready claim (its pod's IPs came)
         * would observe it again when a watch event older than the Ready write (the claim not
         * yet Ready) arrived after it and marked the claim as seen anew. */
        if (!strcmp(status, "True") && !sbx_is_ready(claim) &&
            sbx_object_key(claim, key, sizeof(key)))
            sbx_ctrl_claim_ready(c, key, warm);
    }
    return r < 0 ? r : 0;
}

/* The sandbox this claim controls, from the cache (a new reference), or NULL. */
static json_t *owned_sandbox(struct sbx_ctrl *c, json_t *claim)
{
    json_auto_t *all = sbx_informer_list(c->sandboxes);
    const char *uid = sbx_meta_str(claim, "uid");
    json_t *sb;
    size_t i;

    json_array_foreach(all, i, sb)
    {
        if (sbx_controlled_by(sb, "SandboxClaim", uid))
            return json_incref(sb);
    }
    return NULL;
}

/* lifecycle.ttlSecondsAfterFinished: that long after its sandbox's Finished condition turned
 * True the claim expires, as its shutdownPolicy says: Delete (and DeleteForeground) deletes the
 * claim, and with it its sandbox; Retain (the default) keeps the claim and has the sandbox
 * expire then (its spec.shutdownTime: Pod and Service removed, Ready False SandboxExpired).
 * Returns 1 when the claim was deleted, 0 when there is nothing (more) to do, or < 0. */
static int expire_finished(struct sbx_ctrl *c, json_t *claim, json_t *sb, const char *key,
                           struct sbx_error *err)
{
    json_t *lc = json_object_get(json_object_get(claim, "spec"), "lifecycle");
    json_t *ttl = json_object_get(lc, "ttlSecondsAfterFinished");
    json_t *fin = sbx_condition(sb, "Finished");
    const char *fs = json_string_value(json_object_get(fin, "status"));
    const char *ltt = json_string_value(json_object_get(fin, "lastTransitionTime"));
    const char *policy = json_string_value(json_object_get(lc, "shutdownPolicy"));
    time_t t, now = time(NULL);
    char path[800], when[32], qk[700];

    if (!json_is_integer(ttl) || json_integer_value(ttl) < 0 || !fs || strcmp(fs, "True") || !ltt ||
        sbx_parse_rfc3339(ltt, &t) < 0)
        return 0;
    time_t at =
        t + (time_t)(json_integer_value(ttl) > INT32_MAX ? INT32_MAX : json_integer_value(ttl));
    if (at > now) {
        if (snprintf(qk, sizeof(qk), "claim:%s", key) < (int)sizeof(qk))
            sbx_ctrl_enqueue(c, qk, (uint64_t)(at - now) * 1000 + 100);
        return 0;
    }
    const char *ns = sbx_meta_str(claim, "namespace");
    if (policy && strcmp(policy, "Retain")) {
        snprintf(path, sizeof(path), "/apis/%s/namespaces/%s/sandboxclaims/%s", SBX_EXT_API_VERSION,
                 ns, sbx_meta_str(claim, "name"));
        log_info("claim %s: its sandbox finished %lld s ago, deleting it", key,
                 (long long)(now - t));
        count_write(c);
        int r = sbx_api_delete(c->kube, path, err);
        return r < 0 ? r : 1;
    }
    json_t *spec = json_object_get(sb, "spec");
    const char *have = json_string_value(json_object_get(spec, "shutdownTime"));
    if (have && sbx_parse_rfc3339(have, &t) == 0 && t <= at)
        return 0; /* it expires on its own, no later */
    sbx_rfc3339(at, when);
    json_auto_t *patch =
        json_pack("{s:{s:s, s:s}}", "spec", "shutdownTime", when, "shutdownPolicy", "Retain");
    if (!patch)
        return sbx_error_set(err, ENOMEM, "patch");
    snprintf(path, sizeof(path), "/apis/%s/namespaces/%s/sandboxes/%s", SBX_API_VERSION, ns,
             sbx_meta_str(sb, "name"));
    count_write(c);
    long st = sbx_api_patch(c->kube, path, patch, NULL, err);
    if (st < 0)
        return (int)st;
    if (st != 200 && st != 404)
        return sbx_error_set(err, st == 409 ? EAGAIN : EIO, "PATCH %s: HTTP %ld", path, st);
    return 0;
}

static int claim_reconcile(struct sbx_ctrl *c, const char *key, struct sbx_error *err)
{
    json_auto_t *claim = sbx_informer_get(c->claims, key);
    char ns[300], pkey[600], tkey[600];
    const char *name;
    int r;

    if (sbx_split_key(key, ns, sizeof(ns), &name) < 0)
        return sbx_error_set(err, EINVAL, "bad key");
    if (!claim)
        return sbx_ctrl_delete_sandboxes_of(c, ns, "SandboxClaim", name, err);
    if (json_object_get(json_object_get(claim, "metadata"), "deletionTimestamp"))
        return 0;
    json_auto_t *mine = owned_sandbox(c, claim);
    if (mine && (r = expire_finished(c, claim, mine, key, err)) != 0)
        return r < 0 ? r : 0;
    if (mine)
        return claim_status(c, claim, sbx_meta_str(mine, "name"), mine, false, NULL, NULL, NULL,
                            err);
    const char *bound = json_string_value(
        json_object_get(json_object_get(json_object_get(claim, "status"), "sandbox"), "name"));
    if (bound) /* ours, but the cache has not caught up yet (or it was deleted) */
        return claim_status(c, claim, bound, NULL, false, "False", "SandboxNotFound",
                            "the claimed sandbox is not there (yet)", err);

    const char *pname = json_string_value(
        json_object_get(json_object_get(json_object_get(claim, "spec"), "warmPoolRef"), "name"));
    snprintf(pkey, sizeof(pkey), "%s/%s", ns, pname ? pname : "");
    json_auto_t *pool = sbx_informer_get(c->pools, pkey);
    if (!pool) {
        r = claim_status(c, claim, NULL, NULL, false, "False", "WarmPoolNotFound",
                         "spec.warmPoolRef names no SandboxWarmPool", err);
        return r < 0 ? r : sbx_error_set(err, ENOENT, "warm pool \"%s\" not found", pkey);
    }
    if (!needs_cold(claim)) {
        for (int i = 0; i < ADOPT_TRIES; i++) {
            json_auto_t *sb = choose(c, pool, key);
            if (!sb)
                break;
            r = adopt(c, claim, sb, err);
            if (r < 0 || r == 0)
                release(c, sb);
            if (r < 0)
                return r;
            if (r == 1) {
                char qk[700];
                /* The pool lost a sandbox: it refills (its events now reach the claim), at
                 * once or after --sandbox-warm-pool-replenish-delay. */
                if (c->opts.replenish_delay_ms) {
                    pthread_mutex_lock(&c->mu);
                    json_object_set_new(c->adopted, pkey, json_integer((json_int_t)sbx_now_ns()));
                    pthread_mutex_unlock(&c->mu);
                }
                if (sbx_queue_key(qk, sizeof(qk), "pool", ns, pname))
                    sbx_ctrl_enqueue(c, qk, 0);
                atomic_fetch_add(&c->claims_warm, 1);
                return claim_status(c, claim, sbx_meta_str(sb, "name"), sb, true, NULL, NULL, NULL,
                                    err);
            }
        }
    }
    const char *tname = json_string_value(json_object_get(
        json_object_get(json_object_get(pool, "spec"), "sandboxTemplateRef"), "name"));
    snprintf(tkey, sizeof(tkey), "%s/%s", ns, tname ? tname : "");
    json_auto_t *tmpl = sbx_informer_get(c->templates, tkey);
    if (!tmpl)
        return sbx_error_set(err, ENOENT, "template \"%s\" not found", tkey);
    /* Its status is written once the sandbox shows up in the cache (one write, not two). */
    return cold_start(c, claim, tmpl, err);
}

const struct sbx_reconciler sbx_claim_reconciler = {
    .kind = "claim", .reconcile = claim_reconcile, .claim_queue = true};
