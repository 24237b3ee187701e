/* SandboxTemplates: the NetworkPolicy of a template's sandboxes. With networkPolicyManagement
 * Managed (the default) and a spec.networkPolicy, one NetworkPolicy "<template>-network-policy",
 * owned by the template, selects the Pods of every sandbox made from it (label
 * agents.x-k8s.io/sandbox-template-ref-hash) with the template's ingress and egress rules. With
 * Unmanaged, or without spec.networkPolicy, a policy of ours is removed. The desired spec's hash
 * rides in an annotation, so an unchanged template costs no write (the API server fills in
 * defaults, so the specs themselves never compare equal). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "cleanup.h"
#include "controller.h"
#include "log.h"

#define NP_API     "/apis/networking.k8s.io/v1"
#define ANNOT_HASH "agents.x-k8s.io/network-policy-hash"

static json_t *template_ref(json_t *tmpl)
{
    return json_pack("{s:s, s:s, s:s?, s:s?, s:b, s:b}", "apiVersion", SBX_EXT_API_VERSION, "kind",
                     "SandboxTemplate", "name", sbx_meta_str(tmpl, "name"), "uid",
                     sbx_meta_str(tmpl, "uid"), "controller", 1, "blockOwnerDeletion", 1);
}

static json_t *desired_spec(json_t *tmpl, json_t *np)
{
    char hash[9];
    json_t *in = json_object_get(np, "ingress"), *eg = json_object_get(np, "egress");
    json_auto_t *none = json_array();

    sbx_name_hash(sbx_meta_str(tmpl, "name"), hash);
    return json_pack("{s:{s:{s:s}}, s:[s, s], s:O, s:O}", "podSelector", "matchLabels",
                     SBX_LABEL_TEMPLATE, hash, "policyTypes", "Ingress", "Egress", "ingress",
                     json_is_array(in) ? in : none, "egress", json_is_array(eg) ? eg : none);
}

int sbx_template_reconcile(struct sbx_ctrl *c, const char *key, struct sbx_error *err)
{
    json_auto_t *tmpl = sbx_informer_get(c->templates, key);
    json_auto_t *np = NULL, *want = NULL, *body = NULL;
    char ns[300], path[800], hash[9];
    const char *name;
    long status;
    int r;

    if (sbx_split_key(key, ns, sizeof(ns), &name) < 0)
        return sbx_error_set(err, EINVAL, "bad key");
    snprintf(path, sizeof(path), NP_API "/namespaces/%s/networkpolicies/%s-network-policy", ns,
             name);
    if ((r = sbx_kube_request(c->kube, "GET", path, NULL, NULL, &status, &np, err)) < 0)
        return r;
    if (status != 200 && status != 404)
        return sbx_error_set(err, EIO, "GET %s: HTTP %ld", path, status);
    bool ours = status == 200 && sbx_controlled_by(np, "SandboxTemplate", NULL);
    json_t *spec = json_object_get(tmpl, "spec");
    const char *mgmt = json_string_value(json_object_get(spec, "networkPolicyManagement"));
    json_t *policy = json_object_get(spec, "networkPolicy");
    if (!tmpl || (mgmt && !strcmp(mgmt, "Unmanaged")) || !json_is_object(policy)) {
        if (!ours)
            return 0;
        r = sbx_api_delete(c->kube, path, err);
        return r < 0 ? r : 0;
    }
    if (status == 200 && !ours)
        return sbx_error_set(err, EEXIST, "NetworkPolicy \"%s-network-policy\" is not ours", name);
    json_auto_t *dspec = desired_spec(tmpl, policy);
    _cleanup_free_ char *dump = dspec ? json_dumps(dspec, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
    if (!dump)
        return sbx_error_set(err, ENOMEM, "network policy");
    sbx_name_hash(dump, hash);
    json_t *annots = json_object_get(json_object_get(np, "metadata"), "annotations");
    const char *have = json_string_value(json_object_get(annots, ANNOT_HASH));
    if (have && !strcmp(have, hash))
        return 0;
    want = json_pack("{s:s, s:s, s:{s:s+, s:s, s:{s:s}, s:[o]}, s:O}", "apiVersion",
                     "networking.k8s.io/v1", "kind", "NetworkPolicy", "metadata", "name", name,
                     "-network-policy", "namespace", ns, "annotations", ANNOT_HASH, hash,
                     "ownerReferences", template_ref(tmpl), "spec", dspec);
    if (!want)
        return sbx_error_set(err, ENOMEM, "network policy");
    if (status == 404) {
        char cpath[600];
        snprintf(cpath, sizeof(cpath), NP_API "/namespaces/%s/networkpolicies", ns);
        r = sbx_api_create(c->kube, cpath, want, err);
        return r < 0 ? r : 0;
    }
    json_object_set(json_object_get(want, "metadata"), "resourceVersion",
                    json_object_get(json_object_get(np, "metadata"), "resourceVersion"));
    if ((r = sbx_kube_request(c->kube, "PUT", path, want, NULL, &status, &body, err)) < 0)
        return r;
    if (status != 200)
        return sbx_error_set(err, status == 409 ? EAGAIN : EIO, "PUT %s: HTTP %ld", path, status);
    log_info("updated %s", path);
    return 0;
}
