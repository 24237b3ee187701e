#include "controller.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* Queues the Sandbox that controls obj (a Pod, Service). */
static void on_child(enum sbx_event ev, json_t *obj, void *arg)
{
    struct sbx_ctrl *c = arg;
    json_t *md = json_object_get(obj, "metadata"), *ref;
    const char *ns = json_string_value(json_object_get(md, "namespace"));
    size_t i;

    (void)ev;
    json_array_foreach(json_object_get(md, "ownerReferences"), i, ref)
    {
        const char *kind = json_string_value(json_object_get(ref, "kind"));
        const char *name = json_string_value(json_object_get(ref, "name"));
        const char *api = json_string_value(json_object_get(ref, "apiVersion"));
        char key[600];
        if (!kind || !name || !api || strcmp(kind, "Sandbox") != 0 ||
            strncmp(api, SBX_GROUP "/", strlen(SBX_GROUP) + 1) != 0 ||
            !json_is_true(json_object_get(ref, "controller")))
            continue;
        if (snprintf(key, sizeof(key), "%s/%s", ns ? ns : "", name) < (int)sizeof(key))
            sbx_wq_add(c->queue, key);
    }
}

static void on_sandbox(enum sbx_event ev, json_t *obj, void *arg)
{
    struct sbx_ctrl *c = arg;
    char key[600];

    (void)ev;
    if (sbx_object_key(obj, key, sizeof(key)))
        sbx_wq_add(c->queue, key);
}

static int worker(const char *key, void *arg)
{
    struct sbx_ctrl *c = arg;
    struct sbx_error err = {0};
    int r;

    /* Before the first lists, a missing child only means "not seen yet". */
    if (!sbx_ctrl_synced(c)) {
        sbx_wq_add_after(c->queue, key, 100);
        return 0;
    }
    r = sbx_sandbox_reconcile(c, key, &err);

    if (r < 0)
        log_warn(0, "sandbox \"%s\": %s", key, err.msg);
    return r;
}

static int start_informer(struct sbx_ctrl *c, const char *name, const char *group_path,
                          const char *resource, const char *selector, sbx_informer_fn fn,
                          struct sbx_informer **ret, struct sbx_error *err)
{
    char path[512];

    if (c->opts.namespace)
        snprintf(path, sizeof(path), "%s/namespaces/%s/%s", group_path, c->opts.namespace,
                 resource);
    else
        snprintf(path, sizeof(path), "%s/%s", group_path, resource);
    struct sbx_informer_opts o = {
        .name = name, .path = path, .label_selector = selector, .fn = fn, .arg = c};
    return sbx_informer_start(c->kube, &o, ret, err);
}

int sbx_ctrl_start(struct sbx_kube *kube, const struct sbx_ctrl_opts *opts, struct sbx_ctrl **ret,
                   struct sbx_error *err)
{
    struct sbx_ctrl *c = calloc(1, sizeof(*c));
    int r;

    if (!c)
        return sbx_error_set(err, ENOMEM, "controller");
    c->kube = kube;
    c->opts = *opts;
    /* Retries back off from 5 ms to 30 s: an API server restart must not park keys for long. */
    struct sbx_wq_opts qo = {.retry_base_ms = 5, .retry_max_ms = 30000};
    if ((r = sbx_wq_new(&qo, &c->queue, err)) < 0)
        goto fail;
    /* Children are cached only when they carry our label: the informers hold what we own. */
    if ((r = start_informer(c, "sandboxes", "/apis/" SBX_API_VERSION, "sandboxes", NULL, on_sandbox,
                            &c->sandboxes, err)) < 0 ||
        (r = start_informer(c, "pods", "/api/v1", "pods", SBX_LABEL_MANAGED "=" SBX_MANAGER,
                            on_child, &c->pods, err)) < 0 ||
        (r = start_informer(c, "services", "/api/v1", "services", SBX_LABEL_MANAGED "=" SBX_MANAGER,
                            on_child, &c->services, err)) < 0)
        goto fail;
    if ((r = sbx_wq_start(c->queue, opts->workers, worker, c, err)) < 0)
        goto fail;
    *ret = c;
    return 0;
fail:
    sbx_ctrl_free(c);
    return r;
}

bool sbx_ctrl_synced(struct sbx_ctrl *c)
{
    return sbx_informer_synced(c->sandboxes) && sbx_informer_synced(c->pods) &&
           sbx_informer_synced(c->services);
}

void sbx_ctrl_free(struct sbx_ctrl *c)
{
    if (!c)
        return;
    if (c->queue)
        sbx_wq_shutdown(c->queue);
    sbx_informer_free(c->sandboxes);
    sbx_informer_free(c->pods);
    sbx_informer_free(c->services);
    sbx_wq_free(c->queue);
    free(c);
}
