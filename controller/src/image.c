/* The image's own entrypoint for a Sandbox whose main container gives no command: the registry
 * (and its mirrors) is asked (lookups.c, off the reconcile workers) with the credentials of the
 * pod template's imagePullSecrets and its service account's for each of those hosts, for the
 * platform its nodeSelector names. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cleanup.h"
#include "controller.h"
#include "kubeconfig.h"
#include "object.h"
#include "reconcilers.h"

#define PULL_SECRETS_MAX 16

/* Appends the names of list (imagePullSecrets: [{name}]) to names, deduplicated. */
static void add_names(json_t *list, const char **names, size_t *n)
{
    json_t *e;
    size_t i;

    json_array_foreach(list, i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        bool seen = !name || !*name;
        for (size_t j = 0; j < *n && !seen; j++)
            seen = !strcmp(names[j], name);
        if (!seen && *n < PULL_SECRETS_MAX)
            names[(*n)++] = name;
    }
}

/* The credentials for host in Secret obj (kubernetes.io/dockerconfigjson or dockercfg), as
 * sbx_dockercfg_find answers; a Secret of another type, or unreadable, has none (the kubelet
 * passes over such a Secret too). */
static int secret_creds(json_t *obj, const char *host, struct sbx_registry_creds *ret)
{
    const char *type = json_string_value(json_object_get(obj, "type"));
    const char *field = NULL;
    struct sbx_error err = {0};

    if (type && !strcmp(type, "kubernetes.io/dockerconfigjson"))
        field = ".dockerconfigjson";
    else if (type && !strcmp(type, "kubernetes.io/dockercfg"))
        field = ".dockercfg";
    const char *b64 = json_string_value(json_object_get(json_object_get(obj, "data"), field ?: ""));
    _cleanup_free_ char *raw = NULL;
    size_t len;
    if (!b64 || sbx_base64_decode(b64, &raw, &len, &err) < 0)
        return 0;
    json_auto_t *cfg = json_loadb(raw, len, 0, NULL);
    int r = sbx_dockercfg_find(cfg, host, ret, &err);
    explicit_bzero(raw, len);
    return r > 0 ? 1 : 0;
}

/* The credentials Secret obj holds for each host of eps not named before it, each marked with
 * its host, appended to creds (*n of them, at most SBX_REGISTRY_CREDS_MAX). */
static void secret_all_creds(json_t *obj, const struct sbx_registry_endpoint *eps, size_t neps,
                             struct sbx_registry_creds *creds, size_t *n)
{
    for (size_t e = 0; e < neps && *n < SBX_REGISTRY_CREDS_MAX; e++) {
        bool seen = false;
        for (size_t j = 0; j < e && !seen; j++)
            seen = !strcasecmp(eps[j].name, eps[e].name);
        if (seen || secret_creds(obj, eps[e].name, &creds[*n]) <= 0)
            continue;
        snprintf(creds[*n].host, sizeof(creds[*n].host), "%s", eps[e].name);
        (*n)++;
    }
}

/* The credentials that the pull secrets of pod spec (its own, then its service account's) hold
 * for the hosts of eps (the image's mirrors and registry), in that order; *n of them. */
static int pull_creds(struct sbx_ctrl *c, json_t *spec, const char *ns,
                      const struct sbx_registry_endpoint *eps, size_t neps,
                      struct sbx_registry_creds *creds, size_t *n, struct sbx_error *err)
{
    const char *names[PULL_SECRETS_MAX], *sa;
    json_auto_t *account = NULL;
    size_t nnames = 0;
    char path[700];
    int r;

    add_names(json_object_get(spec, "imagePullSecrets"), names, &nnames);
    sa = json_string_value(json_object_get(spec, "serviceAccountName"))
             ?: json_string_value(json_object_get(spec, "serviceAccount"));
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/serviceaccounts/%s", ns,
             sa && *sa ? sa : "default");
    if ((r = sbx_api_get(c->kube, path, &account, err)) < 0)
        return r;
    add_names(json_object_get(account, "imagePullSecrets"), names, &nnames);
    *n = 0;
    for (size_t i = 0; i < nnames && *n < SBX_REGISTRY_CREDS_MAX; i++) {
        json_auto_t *secret = NULL;
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets/%s", ns, names[i]);
        if ((r = sbx_api_get(c->kube, path, &secret, err)) < 0)
            return r;
        if (secret)
            secret_all_creds(secret, eps, neps, creds, n);
    }
    return 0;
}

/* The platform the pod's nodeSelector asks for, else linux/amd64. */
static void platform(json_t *spec, const char **os, const char **arch)
{
    json_t *sel = json_object_get(spec, "nodeSelector");
    const char *o = json_string_value(json_object_get(sel, "kubernetes.io/os"));
    const char *a = json_string_value(json_object_get(sel, "kubernetes.io/arch"));

    *os = o && *o ? o : "linux";
    *arch = a && *a ? a : "amd64";
}

/* Lookup failures come back as -EAGAIN with their message (EINVAL of a malformed manifest is
 * not the Sandbox's InvalidSpec). */
int sbx_sandbox_image(struct sbx_ctrl *c, json_t *whole, const char *ns, json_t **ret,
                      struct sbx_error *err)
{
    const char *image = sbx_pod_image_to_resolve(whole), *os, *arch;
    json_t *spec =
        json_object_get(json_object_get(json_object_get(whole, "spec"), "podTemplate"), "spec");
    struct sbx_registry_creds creds[SBX_REGISTRY_CREDS_MAX];
    struct sbx_registry_endpoint eps[SBX_MIRRORS_MAX + 1];
    struct sbx_image_ref ref;
    size_t ncreds = 0, neps;
    uint64_t retry_ms = 0;
    char qkey[700];
    int r;

    *ret = NULL;
    if (!c->lookups || !image)
        return 0;
    if (sbx_image_ref_parse(image, &ref, err) < 0)
        return sbx_error_wrap(err, "spec.podTemplate.spec.containers[0].image");
    if (!sbx_queue_key(qkey, sizeof(qkey), "sandbox", ns, sbx_meta_str(whole, "name")))
        return sbx_error_set(err, EINVAL, "name too long");
    platform(spec, &os, &arch);
    neps = sbx_registry_endpoints(c->registry, &ref, eps, SBX_ARRAY_SIZE(eps));
    if ((r = pull_creds(c, spec, ns, eps, neps, creds, &ncreds, err)) < 0) {
        explicit_bzero(creds, sizeof(creds));
        return r == -EACCES ? sbx_error_wrap(err, "pull secrets") : r;
    }
    struct sbx_registry_query q = {
        .ref = &ref, .os = os, .arch = arch, .creds = creds, .ncreds = ncreds};
    r = sbx_lookups_get(c->lookups, &q, qkey, ret, &retry_ms, err);
    explicit_bzero(creds, sizeof(creds));
    if (r == 0)
        return sbx_error_set(err, EINPROGRESS, "looking up the entrypoint of image \"%.200s\"",
                             image);
    if (r < 0 && retry_ms)
        sbx_ctrl_enqueue(c, qkey, retry_ms);
    if (r < 0) { /* whatever the lookup's errno, the reconcile reads one: unresolved, retried */
        err->code = EAGAIN;
        return -EAGAIN;
    }
    return 1;
}
