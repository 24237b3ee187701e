/* A Sandbox's PersistentVolumeClaims, one per volume claim template, named "<template>-<sandbox>"
 * and labelled as the reference's (the template's labels and agents.x-k8s.io/sandbox-name-hash),
 * owned by the Sandbox (controller): made before its Pod, kept while it is suspended, and removed
 * by the garbage collector with the Sandbox, never by us (a workspace is data). A claim of that
 * name that has no controller is adopted when it carries the sandbox's label or
 * agents.x-k8s.io/adoptable=true, as the reference does; one another object controls is refused. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "cleanup.h"
#include "controller.h"
#include "log.h"
#include "object.h"
#include "reconcilers.h"

#define SBX_LABEL_ADOPTABLE "agents.x-k8s.io/adoptable"

/* Takes an existing claim without a controller, as the reference: with the sandbox's label or
 * the adoptable label; one merge patch appends our controller reference and puts the sandbox's
 * label on (the claims' informer selects by it). */
static int adopt(struct sbx_ctrl *c, json_t *sb, json_t *pvc, const char *ns, struct sbx_error *err)
{
    json_t *labels = json_object_get(json_object_get(pvc, "metadata"), "labels");
    const char *name = sbx_meta_str(pvc, "name");
    const char *mine = json_string_value(json_object_get(labels, SBX_LABEL_HASH));
    const char *adoptable = json_string_value(json_object_get(labels, SBX_LABEL_ADOPTABLE));
    char hash[9], path[700];

    sbx_name_hash(sbx_meta_str(sb, "name"), hash);
    if (!(mine && !strcmp(mine, hash)) && !(adoptable && !strcmp(adoptable, "true")))
        return sbx_error_set(err, EEXIST,
                             "PersistentVolumeClaim \"%s\" exists, has no controller and neither "
                             "label %s=%s nor %s=true",
                             name, SBX_LABEL_HASH, hash, SBX_LABEL_ADOPTABLE);
    json_t *refs = json_object_get(json_object_get(pvc, "metadata"), "ownerReferences");
    json_auto_t *patch = json_pack("{s:{s:s?, s:o, s:{s:s}}}", "metadata", "resourceVersion",
                                   sbx_meta_str(pvc, "resourceVersion"), "ownerReferences",
                                   json_is_array(refs) ? json_deep_copy(refs) : json_array(),
                                   "labels", SBX_LABEL_HASH, hash);
    json_t *list = json_object_get(json_object_get(patch, "metadata"), "ownerReferences");
    if (!patch || json_array_append_new(list, sbx_owner_ref(sb)) < 0)
        return sbx_error_set(err, ENOMEM, "patch");
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns, name);
    long st = sbx_api_patch(c->kube, path, patch, NULL, err);
    if (st < 0)
        return (int)st;
    if (st != 200)
        return sbx_error_set(err, st == 409 ? EAGAIN : EIO, "PATCH %s: HTTP %ld", path, st);
    log_info("sandbox \"%s/%s\" adopted PersistentVolumeClaim \"%s\"", ns, sbx_meta_str(sb, "name"),
             name);
    return 0;
}

/* An existing claim of the sandbox's: ours already, adopted, or refused. */
static int take(struct sbx_ctrl *c, json_t *sb, json_t *pvc, const char *ns, struct sbx_error *err)
{
    if (!sbx_controller_ref(pvc))
        return adopt(c, sb, pvc, ns, err);
    if (!sbx_controlled_by(pvc, "Sandbox", sbx_meta_str(sb, "uid")))
        return sbx_error_set(err, EEXIST,
                             "PersistentVolumeClaim \"%s\" exists and is not this sandbox's",
                             sbx_meta_str(pvc, "name"));
    return 0;
}

/* A claim there already that the cache does not hold (it lacks the sandbox's label, or the
 * cache lags): read from the API server and taken as a cached one would be. */
static int take_uncached(struct sbx_ctrl *c, json_t *sb, const char *ns, const char *name,
                         struct sbx_error *err)
{
    json_auto_t *pvc = NULL;
    char path[700];
    long status;
    int r;

    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns, name);
    if ((r = sbx_kube_request(c->kube, "GET", path, NULL, NULL, &status, &pvc, err)) < 0)
        return r;
    if (status != 200) /* gone again: the next reconcile makes it */
        return sbx_error_set(err, EAGAIN, "GET %s: HTTP %ld", path, status);
    return take(c, sb, pvc, ns, err);
}

/* Makes the claim of template number i, from the whole Sandbox (fetched once, on the first
 * claim missing). Returns 1 when the Sandbox is gone meanwhile. */
static int create(struct sbx_ctrl *c, json_t *sb, size_t i, const char *ns, json_t **whole,
                  struct sbx_error *err)
{
    json_auto_t *pvc = NULL;
    char path[600];
    int r;

    if (!*whole && (r = sbx_sandbox_fetch(c, sb, ns, whole, err)) < 0)
        return r;
    if (!*whole)
        return 1;
    json_t *vcts = json_object_get(json_object_get(*whole, "spec"), "volumeClaimTemplates");
    if ((r = sbx_sandbox_pvc(*whole, json_array_get(vcts, i), &pvc, err)) < 0)
        return r;
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims", ns);
    r = sbx_api_create(c->kube, path, pvc, err);
    if (r == 1)
        log_info("sandbox \"%s/%s\": created PersistentVolumeClaim \"%s\"", ns,
                 sbx_meta_str(sb, "name"), sbx_meta_str(pvc, "name"));
    if (r == 0)
        r = take_uncached(c, sb, ns, sbx_meta_str(pvc, "name"), err);
    return r < 0 ? r : 0;
}

int sbx_sandbox_volumes(struct sbx_ctrl *c, json_t *sb, const char *ns, struct sbx_volumes *out,
                        struct sbx_error *err)
{
    json_t *vcts = json_object_get(json_object_get(sb, "spec"), "volumeClaimTemplates"), *v;
    json_auto_t *whole = NULL;
    char name[300], key[600];
    size_t i;
    int r;

    out->unbound[0] = '\0';
    out->phase[0] = '\0';
    if ((r = sbx_check_claim_templates(vcts, err)) < 0)
        return r;
    json_array_foreach(vcts, i, v)
    {
        const char *vname =
            json_string_value(json_object_get(json_object_get(v, "metadata"), "name"));
        if (!sbx_pvc_name(vname, sbx_meta_str(sb, "name"), name, sizeof(name)) ||
            snprintf(key, sizeof(key), "%s/%s", ns, name) >= (int)sizeof(key))
            return sbx_error_set(err, EINVAL,
                                 "spec.volumeClaimTemplates[%zu]: the claim's name is too long", i);
        json_auto_t *pvc = sbx_informer_get(c->pvcs, key);
        const char *phase = "Pending"; /* a claim we make now is not bound yet */
        if (!pvc) {
            if ((r = create(c, sb, i, ns, &whole, err)) != 0)
                return r < 0 ? r : 0;
        } else if ((r = take(c, sb, pvc, ns, err)) < 0) {
            return r;
        }
        if (pvc)
            phase = json_string_value(json_object_get(json_object_get(pvc, "status"), "phase"))
                        ?: "Pending";
        if (strcmp(phase, "Bound") && !out->unbound[0]) {
            snprintf(out->unbound, sizeof(out->unbound), "%s", name);
            snprintf(out->phase, sizeof(out->phase), "%s", phase);
        }
    }
    return 0;
}
