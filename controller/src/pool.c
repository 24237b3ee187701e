/* Warm pools: keep spec.replicas Sandboxes of the pool's template, owned by the pool, ready for
 * claims to adopt. Creations are paced by a token bucket shared by all pools
 * (--sandbox-warm-pool-max-refill-rate) and go out in slow-start batches (1, 2, 4, ... up to
 * --sandbox-warm-pool-max-batch-size), stopping at the first failure, so a large refill neither
 * floods the API server nor repeats one error hundreds of times. Sandboxes created but not yet
 * seen by the informer are remembered (c->expected), so a pool never creates twice. */
#include <errno.h>
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

#define MAX_POOL_NAME 40 /* keeps "<pool>-<suffix>" within a label value */

int sbx_sandbox_from_template(json_t *tmpl, const char *ns, const char *name, json_t *owner,
                              json_t *labels, json_t **ret, struct sbx_error *err)
{
    json_auto_t *own = owner;
    json_t *tspec = json_object_get(tmpl, "spec");
    json_t *pt = json_object_get(tspec, "podTemplate");
    json_t *service = json_object_get(tspec, "service");
    json_auto_t *spec = NULL;
    char hash[9];

    if (!json_is_object(pt))
        return sbx_error_set(err, EINVAL, "template \"%s\": spec.podTemplate is not an object",
                             sbx_meta_str(tmpl, "name") ?: "");
    if (!owner || !(spec = json_pack("{s:o}", "podTemplate", json_deep_copy(pt))))
        return sbx_error_set(err, ENOMEM, "sandbox");
    pt = json_object_get(spec, "podTemplate");
    /* The template's NetworkPolicy selects its pods by this label. */
    json_t *md = json_object_get(pt, "metadata");
    if (!json_is_object(md)) {
        md = json_object();
        json_object_set_new(pt, "metadata", md);
    }
    json_t *pl = json_object_get(md, "labels");
    if (!json_is_object(pl)) {
        pl = json_object();
        json_object_set_new(md, "labels", pl);
    }
    sbx_name_hash(sbx_meta_str(tmpl, "name"), hash);
    json_object_set_new(pl, SBX_LABEL_TEMPLATE, json_string(hash));
    if (json_is_boolean(service))
        json_object_set(spec, "service", service);
    /* Its claims are made with the sandbox: a warm one has its volumes before a claim takes it. */
    json_t *vcts = json_object_get(tspec, "volumeClaimTemplates");
    if (json_array_size(vcts) > 0 &&
        json_object_set_new(spec, "volumeClaimTemplates", json_deep_copy(vcts)) < 0)
        return sbx_error_set(err, ENOMEM, "sandbox");
    json_t *ps = json_object_get(pt, "spec");
    if (sbx_template_default_policy(tmpl) && json_is_object(ps) &&
        !json_object_get(ps, "dnsPolicy") &&
        (json_object_set_new(ps, "dnsPolicy", json_string("None")) < 0 ||
         json_object_set_new(ps, "dnsConfig",
                             json_pack("{s:[s, s]}", "nameservers", "8.8.8.8", "1.1.1.1")) < 0))
        return sbx_error_set(err, ENOMEM, "sandbox");
    *ret = json_pack("{s:s, s:s, s:{s:s, s:s, s:O, s:[O]}, s:O}", "apiVersion", SBX_API_VERSION,
                     "kind", "Sandbox", "metadata", "name", name, "namespace", ns, "labels", labels,
                     "ownerReferences", own, "spec", spec);
    return *ret ? 0 : sbx_error_set(err, ENOMEM, "sandbox");
}

static json_t *pool_ref(json_t *pool)
{
    return json_pack("{s:s, s:s, s:s?, s:s?, s:b, s:b}", "apiVersion", SBX_EXT_API_VERSION, "kind",
                     "SandboxWarmPool", "name", sbx_meta_str(pool, "name"), "uid",
                     sbx_meta_str(pool, "uid"), "controller", 1, "blockOwnerDeletion", 1);
}

struct census {
    json_t *owned; /* array of the pool's sandboxes (cached) */
    int expected;  /* created, not in the cache yet */
    int ready;
};

/* The hash of what a template's sandboxes are made of (its pod template and volume claim
 * templates; not its metadata nor its policies), stamped on pool sandboxes (label
 * SBX_LABEL_BLUEPRINT) to tell the stale ones. False when it cannot be computed. */
static bool blueprint_hash(json_t *tmpl, char hash[9])
{
    json_t *spec = json_object_get(tmpl, "spec");
    json_auto_t *bp =
        json_pack("{s:O?, s:O?}", "podTemplate", json_object_get(spec, "podTemplate"),
                  "volumeClaimTemplates", json_object_get(spec, "volumeClaimTemplates"));
    _cleanup_free_ char *dump = bp ? json_dumps(bp, JSON_SORT_KEYS | JSON_COMPACT) : NULL;

    if (!dump)
        return false;
    sbx_name_hash(dump, hash);
    return true;
}

/* updateStrategy Recreate (the reference's): the pool's sandboxes made from another blueprint
 * than its template's now are deleted at once and leave the census, so the pool refills with
 * fresh ones in the same pass. OnReplenish (the default) leaves them to be claimed or deleted.
 * Claimed sandboxes are the claims', never the pool's: they are not in the census. */
static int drop_stale(struct sbx_ctrl *c, json_t *pool, json_t *tmpl, struct census *cs,
                      struct sbx_error *err)
{
    json_t *us = json_object_get(json_object_get(pool, "spec"), "updateStrategy");
    const char *type = json_string_value(json_object_get(us, "type"));
    char hash[9], path[700];
    json_t *sb;
    size_t i;

    if (!tmpl || !type || strcmp(type, "Recreate") || !blueprint_hash(tmpl, hash))
        return 0;
    json_array_foreach(cs->owned, i, sb)
    {
        const char *have = json_string_value(json_object_get(
            json_object_get(json_object_get(sb, "metadata"), "labels"), SBX_LABEL_BLUEPRINT));
        if (have && !strcmp(have, hash))
            continue;
        log_info("pool \"%s/%s\": replacing stale \"%s\" (updateStrategy Recreate)",
                 sbx_meta_str(pool, "namespace"), sbx_meta_str(pool, "name"),
                 sbx_meta_str(sb, "name"));
        snprintf(path, sizeof(path), "/apis/%s/namespaces/%s/sandboxes/%s", SBX_API_VERSION,
                 sbx_meta_str(sb, "namespace"), sbx_meta_str(sb, "name"));
        int r = sbx_api_delete(c->kube, path, err);
        if (r < 0)
            return r;
        if (sbx_is_ready(sb))
            cs->ready--;
        json_array_remove(cs->owned, i);
        i--;
    }
    return 0;
}

/* The pool's sandboxes: cached ones it controls and is not giving away, plus those it created
 * that the cache has not shown yet. */
static void count(struct sbx_ctrl *c, json_t *pool, const char *pool_key, struct census *out)
{
    json_auto_t *all = sbx_informer_list(c->sandboxes);
    const char *uid = sbx_meta_str(pool, "uid"), *ns = sbx_meta_str(pool, "namespace");
    json_t *sb, *v;
    const char *key;
    size_t i;

    out->owned = json_array();
    out->expected = out->ready = 0;
    pthread_mutex_lock(&c->mu);
    json_array_foreach(all, i, sb)
    {
        char k[600];
        const char *sns = sbx_meta_str(sb, "namespace");
        if (!sns || !ns || strcmp(sns, ns) != 0 || !sbx_controlled_by(sb, "SandboxWarmPool", uid) ||
            json_object_get(json_object_get(sb, "metadata"), "deletionTimestamp") ||
            !sbx_object_key(sb, k, sizeof(k)) || json_object_get(c->taken, k))
            continue;
        json_array_append(out->owned, sb);
        if (sbx_is_ready(sb))
            out->ready++;
    }
    json_object_foreach(c->expected, key, v)
    {
        if (!strcmp(json_string_value(v), pool_key))
            out->expected++;
    }
    pthread_mutex_unlock(&c->mu);
}

/* Creates up to n sandboxes in slow-start batches, as the refill bucket allows. Returns how
 * many were created, or < 0 on the first failure; *paced is set when the bucket ran dry. */
static int fill(struct sbx_ctrl *c, json_t *pool, json_t *tmpl, const char *pool_key, int n,
                bool *paced, struct sbx_error *err)
{
    const char *ns = sbx_meta_str(pool, "namespace"), *pname = sbx_meta_str(pool, "name");
    char path[600], hash[9], bp[9];
    int made = 0, batch = 1;

    sbx_name_hash(pname, hash);
    if (!blueprint_hash(tmpl, bp))
        return sbx_error_set(err, ENOMEM, "template hash");
    snprintf(path, sizeof(path), "/apis/%s/namespaces/%s/sandboxes", SBX_API_VERSION, ns);
    *paced = false;
    while (made < n) {
        for (int b = 0; b < batch && made < n; b++) {
            char name[64], suffix[6], key[600];
            if (!sbx_bucket_try(&c->refill, sbx_now_ns())) {
                *paced = true;
                return made;
            }
            sbx_random_suffix(suffix, 5);
            snprintf(name, sizeof(name), "%.*s-%s", MAX_POOL_NAME, pname, suffix);
            json_auto_t *labels =
                json_pack("{s:s, s:s}", SBX_LABEL_POOL, hash, SBX_LABEL_BLUEPRINT, bp);
            json_auto_t *want = NULL;
            int r = sbx_sandbox_from_template(tmpl, ns, name, pool_ref(pool), labels, &want, err);
            if (r < 0)
                return r;
            snprintf(key, sizeof(key), "%s/%s", ns, name);
            pthread_mutex_lock(&c->mu);
            json_object_set_new(c->expected, key, json_string(pool_key));
            pthread_mutex_unlock(&c->mu);
            r = sbx_api_create(c->kube, path, want, err);
            if (r <= 0) {
                pthread_mutex_lock(&c->mu);
                json_object_del(c->expected, key);
                pthread_mutex_unlock(&c->mu);
                return r < 0 ? r : made; /* a name clash: the next round picks another */
            }
            made++;
        }
        batch = batch * 2 > c->opts.pool_batch ? c->opts.pool_batch : batch * 2;
    }
    return made;
}

/* Deletes n of the pool's sandboxes, those not ready first. */
static int shrink(struct sbx_ctrl *c, json_t *owned, int n, struct sbx_error *err)
{
    char path[700];
    json_t *sb;
    size_t i;

    for (int pass = 0; pass < 2 && n > 0; pass++) {
        json_array_foreach(owned, i, sb)
        {
            if (n == 0)
                break;
            if (sbx_is_ready(sb) != (pass == 1))
                continue;
            snprintf(path, sizeof(path), "/apis/%s/namespaces/%s/sandboxes/%s", SBX_API_VERSION,
                     sbx_meta_str(sb, "namespace"), sbx_meta_str(sb, "name"));
            int r = sbx_api_delete(c->kube, path, err);
            if (r < 0)
                return r;
            n--;
        }
    }
    return 0;
}

static int pool_status(struct sbx_ctrl *c, json_t *pool, int replicas, int ready,
                       struct sbx_error *err)
{
    char hash[9], selector[80];
    json_t *old = json_object_get(pool, "status");

    sbx_name_hash(sbx_meta_str(pool, "name"), hash);
    snprintf(selector, sizeof(selector), "%s=%s", SBX_LABEL_POOL, hash);
    json_auto_t *want = json_pack("{s:i, s:i, s:s, s:O?}", "replicas", replicas, "readyReplicas",
                                  ready, "selector", selector, "observedGeneration",
                                  json_object_get(json_object_get(pool, "metadata"), "generation"));
    if (!want)
        return sbx_error_set(err, ENOMEM, "status");
    int r =
        sbx_api_update_status(c->kube, SBX_EXT_API_VERSION, sbx_meta_str(pool, "namespace"),
                              "sandboxwarmpools", sbx_meta_str(pool, "name"), old, want, NULL, err);
    return r < 0 ? r : 0;
}

static bool unschedulable(json_t *pod)
{
    json_t *cond = sbx_condition(pod, "PodScheduled");
    const char *st = json_string_value(json_object_get(cond, "status"));
    const char *reason = json_string_value(json_object_get(cond, "reason"));

    return st && !strcmp(st, "False") && reason && !strcmp(reason, "Unschedulable");
}

/* Pool sandboxes not Ready after the grace period are replaced (deleted: the next round refills),
 * except those whose Pod cannot be scheduled: a new one would fare no better, so they are held
 * and looked at again later. Queues the pool for the next such deadline. */
static int replace_stuck(struct sbx_ctrl *c, json_t *owned, const char *ns, const char *name,
                         struct sbx_error *err)
{
    uint64_t next_ms = 0;
    time_t now = time(NULL), created;
    char path[700], key[600], qk[700];
    json_t *sb;
    size_t i;

    json_array_foreach(owned, i, sb)
    {
        uint64_t wait_ms;
        if (sbx_is_ready(sb) ||
            sbx_parse_rfc3339(sbx_meta_str(sb, "creationTimestamp"), &created) < 0)
            continue;
        uint64_t age_ms = now > created ? (uint64_t)(now - created) * 1000 : 0;
        snprintf(key, sizeof(key), "%s/%s", ns, sbx_meta_str(sb, "name"));
        json_auto_t *pod = sbx_informer_get(c->pods, key);
        if (age_ms < c->opts.pool_grace_ms) {
            wait_ms = c->opts.pool_grace_ms - age_ms + 100;
        } else if (unschedulable(pod)) {
            log_info("pool \"%s/%s\": holding \"%s\": its pod is unschedulable", ns, name,
                     sbx_meta_str(sb, "name"));
            wait_ms = c->opts.pool_recheck_ms;
        } else {
            log_info("pool \"%s/%s\": replacing \"%s\": not ready after %llu s", ns, name,
                     sbx_meta_str(sb, "name"), (unsigned long long)(age_ms / 1000));
            snprintf(path, sizeof(path), "/apis/%s/namespaces/%s/sandboxes/%s", SBX_API_VERSION, ns,
                     sbx_meta_str(sb, "name"));
            int r = sbx_api_delete(c->kube, path, err);
            if (r < 0)
                return r;
            continue;
        }
        if (!next_ms || wait_ms < next_ms)
            next_ms = wait_ms;
    }
    if (next_ms && sbx_queue_key(qk, sizeof(qk), "pool", ns, name))
        sbx_ctrl_enqueue(c, qk, next_ms);
    return 0;
}

/* How long the pool still waits before refilling: --sandbox-warm-pool-replenish-delay after
 * the last claim took one of its sandboxes (each adoption re-arms it), so that a burst of claims
 * has the API server to itself. 0 when it need not wait. */
static uint64_t replenish_wait(struct sbx_ctrl *c, const char *key)
{
    uint64_t now = sbx_now_ns(), delay = c->opts.replenish_delay_ms * 1000000, wait = 0;

    if (!delay)
        return 0;
    pthread_mutex_lock(&c->mu);
    json_t *at = json_object_get(c->adopted, key);
    uint64_t since = at ? now - (uint64_t)json_integer_value(at) : delay;
    if (since < delay)
        wait = (delay - since) / 1000000 + 1;
    else
        json_object_del(c->adopted, key);
    pthread_mutex_unlock(&c->mu);
    return wait;
}

static int pool_reconcile(struct sbx_ctrl *c, const char *key, struct sbx_error *err)
{
    json_auto_t *pool = sbx_informer_get(c->pools, key);
    char ns[300], pool_key[700], tkey[600];
    const char *name;
    struct census cs;
    int r = 0;

    if (sbx_split_key(key, ns, sizeof(ns), &name) < 0)
        return sbx_error_set(err, EINVAL, "bad key");
    if (!pool)
        return sbx_ctrl_delete_sandboxes_of(c, ns, "SandboxWarmPool", name, err);
    if (json_object_get(json_object_get(pool, "metadata"), "deletionTimestamp"))
        return 0;
    json_t *spec = json_object_get(pool, "spec");
    json_t *rep = json_object_get(spec, "replicas");
    int want = json_is_integer(rep) ? (int)json_integer_value(rep) : 1;
    const char *tname =
        json_string_value(json_object_get(json_object_get(spec, "sandboxTemplateRef"), "name"));
    snprintf(tkey, sizeof(tkey), "%s/%s", ns, tname ? tname : "");
    json_auto_t *tmpl = sbx_informer_get(c->templates, tkey);
    snprintf(pool_key, sizeof(pool_key), "%s", key);
    count(c, pool, pool_key, &cs);
    if ((r = drop_stale(c, pool, tmpl, &cs, err)) < 0) {
        json_decref(cs.owned);
        return r;
    }
    int have = (int)json_array_size(cs.owned) + cs.expected;
    uint64_t hold_ms = have < want ? replenish_wait(c, key) : 0;
    if (hold_ms > 0) {
        char qk[700];
        if (sbx_queue_key(qk, sizeof(qk), "pool", ns, name))
            sbx_ctrl_enqueue(c, qk, hold_ms);
        atomic_fetch_add(&c->refills_deferred, 1);
    } else if (have < want && tmpl) {
        bool paced;
        int n = want - have;
        r = fill(c, pool, tmpl, pool_key, n < c->opts.pool_batch ? n : c->opts.pool_batch, &paced,
                 err);
        if (r >= 0 && (paced || r < n)) {
            char qk[700];
            /* The rest after the bucket refills (or the next batch). */
            uint64_t ms =
                c->opts.pool_refill_rate > 0 ? (uint64_t)(1000 / c->opts.pool_refill_rate) + 1 : 1;
            if (sbx_queue_key(qk, sizeof(qk), "pool", ns, name))
                sbx_ctrl_enqueue(c, qk, ms);
        }
    } else if (have > want && cs.expected == 0) {
        r = shrink(c, cs.owned, have - want, err);
    } else if (!tmpl) {
        log_debug("pool \"%s\": template \"%s\" not found", key, tkey);
    }
    if (r >= 0)
        r = replace_stuck(c, cs.owned, ns, name, err);
    if (r >= 0)
        r = pool_status(c, pool, (int)json_array_size(cs.owned), cs.ready, err);
    json_decref(cs.owned);
    return r;
}

const struct sbx_reconciler sbx_pool_reconciler = {.kind = "pool", .reconcile = pool_reconcile};
