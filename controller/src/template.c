/* SandboxTemplates: the NetworkPolicy of a template's sandboxes. With networkPolicyManagement
 * Managed (the default), one NetworkPolicy "<template>-network-policy", owned by the template,
 * selects the Pods of every sandbox made from it (label
 * agents.x-k8s.io/sandbox-template-ref-hash) with the template's ingress and egress rules, or,
 * without spec.networkPolicy, with the secure default: ingress only to sandboxd's two ports,
 * egress only to public addresses (as the reference: private, link-local and unique-local ranges
 * excepted, so cluster DNS and the metadata server too). With Unmanaged, or once the template is
 * gone, a policy of ours is removed. The desired spec's hash rides in an annotation, so an
 * unchanged template costs no write (the API server fills in defaults, so the specs themselves
 * never compare equal). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "cleanup.h"
#include "controller.h"
#include "log.h"
#include "object.h"
#include "reconcilers.h"

#define NP_API     "/apis/networking.k8s.io/v1"
#define ANNOT_HASH "agents.x-k8s.io/network-policy-hash"

static json_t *template_ref(json_t *tmpl)
{
    return json_pack("{s:s, s:s, s:s?, s:s?, s:b, s:b}", "apiVersion", SBX_EXT_API_VERSION, "kind",
                     "SandboxTemplate", "name", sbx_meta_str(tmpl, "name"), "uid",
                     sbx_meta_str(tmpl, "uid"), "controller", 1, "blockOwnerDeletion", 1);
}

/* The default rules: TCP to sandboxd's gRPC, REST and E2B ports (the last where a pod has it)
 * from anywhere (sandboxd's token guards
 * them; the reference, which fronts sandboxes with a router of its own, admits that router on
 * all ports instead), and egress to public IPv4 and IPv6 addresses only. The ports go by name:
 * their numbers depend on the ports a pod's containers declare (sbx_pod_ports), and a pool's
 * pods from an older template may have others than new ones. */
static json_t *default_ingress(void)
{
    return json_pack("[{s:[{s:s, s:s}, {s:s, s:s}, {s:s, s:s}]}]", "ports", "protocol", "TCP",
                     "port", SBX_GRPC_PORT_NAME, "protocol", "TCP", "port", SBX_REST_PORT_NAME,
                     "protocol", "TCP", "port", SBX_E2B_PORT_NAME);
}

static json_t *default_egress(void)
{
    return json_pack("[{s:[{s:{s:s, s:[s, s, s, s]}}, {s:{s:s, s:[s, s]}}]}]", "to", "ipBlock",
                     "cidr", "0.0.0.0/0", "except", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                     "169.254.0.0/16", "ipBlock", "cidr", "::/0", "except", "fc00::/7",
                     "fe80::/10");
}

/* np: the template's spec.networkPolicy, NULL for the default. */
static json_t *desired_spec(json_t *tmpl, json_t *np)
{
    char hash[9];
    json_t *in = json_object_get(np, "ingress"), *eg = json_object_get(np, "egress");
    json_auto_t *none = json_array();
    json_auto_t *def_in = np ? NULL : default_ingress();
    json_auto_t *def_eg = np ? NULL : default_egress();

    if (!np) {
        if (!def_in || !def_eg)
            return NULL;
        in = def_in;
        eg = def_eg;
    }

    sbx_name_hash(sbx_meta_str(tmpl, "name"), hash);
    return json_pack("{s:{s:{s:s}}, s:[s, s], s:O, s:O}", "podSelector", "matchLabels",
                     SBX_LABEL_TEMPLATE, hash, "policyTypes", "Ingress", "Egress", "ingress",
                     json_is_array(in) ? in : none, "egress", json_is_array(eg) ? eg : none);
}

bool sbx_template_default_policy(json_t *tmpl)
{
    json_t *spec = json_object_get(tmpl, "spec");
    const char *mgmt = json_string_value(json_object_get(spec, "networkPolicyManagement"));

    return (!mgmt || strcmp(mgmt, "Unmanaged")) &&
           !json_is_object(json_object_get(spec, "networkPolicy"));
}

static int template_reconcile(struct sbx_ctrl *c, const char *key, struct sbx_error *err)
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
    if (!tmpl || (mgmt && !strcmp(mgmt, "Unmanaged"))) {
        if (!ours)
            return 0;
        r = sbx_api_delete(c->kube, path, err);
        return r < 0 ? r : 0;
    }
    if (status == 200 && !ours)
        return sbx_error_set(err, EEXIST, "NetworkPolicy \"%s-network-policy\" is not ours", name);
    json_auto_t *dspec = desired_spec(tmpl, json_is_object(policy) ? policy : NULL);
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

const struct sbx_reconciler sbx_template_reconciler = {.kind = "template",
                                                       .reconcile = template_reconcile};
