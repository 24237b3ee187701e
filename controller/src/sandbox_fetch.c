/* Reading one whole Sandbox from the API server, for the reconcilers that need what the
 * informer's cache leaves out (the pod and volume claim templates): the Sandbox's reconciler and
 * its volumes' (volumes.c). A file of its own so neither calls into the other. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "cleanup.h"
#include "controller.h"
#include "object.h"
#include "reconcilers.h"

/* The cache keeps no pod template: the whole Sandbox comes from the API server's watch cache. */
int sbx_sandbox_fetch(struct sbx_ctrl *c, json_t *sb, const char *ns, json_t **ret,
                      struct sbx_error *err)
{
    json_auto_t *body = NULL;
    char path[800];
    long status;
    int r;

    *ret = NULL;
    snprintf(path, sizeof(path), "/apis/%s/namespaces/%s/sandboxes/%s?resourceVersion=%s",
             SBX_API_VERSION, ns, sbx_meta_str(sb, "name"),
             sbx_meta_str(sb, "resourceVersion") ?: "0");
    if ((r = sbx_kube_request(c->kube, "GET", path, NULL, NULL, &status, &body, err)) < 0)
        return r;
    if (status == 404)
        return 0;
    if (status != 200)
        return sbx_error_set(err, EIO, "GET %s: HTTP %ld", path, status);
    const char *uid = sbx_meta_str(body, "uid"), *cached = sbx_meta_str(sb, "uid");
    if (uid && cached && !strcmp(uid, cached))
        *ret = json_incref(body);
    return 0;
}
