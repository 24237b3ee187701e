#include "podspec.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"

static const char *meta_str(json_t *obj, const char *field)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), field));
}

void sbx_name_hash(const char *name, char buf[9])
{
    uint32_t h = 2166136261u;

    for (const unsigned char *p = (const unsigned char *)(name ? name : ""); *p; p++) {
        h ^= *p;
        h *= 16777619u;
    }
    snprintf(buf, 9, "%08x", h);
}

char *sbx_token_secret_name(const char *name, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s-sandboxd-token", name);

    if (n > 0 && (size_t)n < size && n <= 253)
        return buf;
    /* Too long for a name: keep a prefix and make it unique with the hash. */
    char h[9];
    sbx_name_hash(name, h);
    n = snprintf(buf, size, "%.200s-%s-sandboxd-token", name, h);
    return n > 0 && (size_t)n < size ? buf : NULL;
}

json_t *sbx_owner_ref(json_t *sandbox)
{
    return json_pack("{s:s, s:s, s:s?, s:s?, s:b, s:b}", "apiVersion", SBX_API_VERSION, "kind",
                     "Sandbox", "name", meta_str(sandbox, "name"), "uid", meta_str(sandbox, "uid"),
                     "controller", 1, "blockOwnerDeletion", 1);
}

/* metadata for a child named like the sandbox, in its namespace, owned by it and labelled. */
static json_t *child_meta(json_t *sandbox, const char *name)
{
    char hash[9];

    sbx_name_hash(meta_str(sandbox, "name"), hash);
    return json_pack("{s:s?, s:s?, s:{s:s, s:s}, s:[o]}", "name", name, "namespace",
                     meta_str(sandbox, "namespace"), "labels", SBX_LABEL_HASH, hash,
                     SBX_LABEL_MANAGED, SBX_MANAGER, "ownerReferences", sbx_owner_ref(sandbox));
}

static bool named_in(json_t *list, const char *name)
{
    size_t i;
    json_t *e;

    json_array_foreach(list, i, e)
    {
        const char *n = json_string_value(json_object_get(e, "name"));
        if (n && !strcmp(n, name))
            return true;
    }
    return false;
}

/* Appends v (stolen) to the array field key of obj, creating it. */
static int append(json_t *obj, const char *key, json_t *v)
{
    json_t *arr = json_object_get(obj, key);

    if (!v)
        return -ENOMEM;
    if (!json_is_array(arr)) {
        arr = json_array();
        if (json_object_set_new(obj, key, arr) < 0) {
            json_decref(v);
            return -ENOMEM;
        }
    }
    return json_array_append_new(arr, v) < 0 ? -ENOMEM : 0;
}

static json_t *probe(const struct sbx_inject_opts *o, const char *path)
{
    if (o->probe == SBX_PROBE_GRPC)
        return json_pack("{s:{s:i}, s:i, s:i}", "grpc", "port", o->grpc_port, "periodSeconds", 5,
                         "failureThreshold", 3);
    return json_pack("{s:{s:s, s:i}, s:i, s:i}", "httpGet", "path", path, "port", o->rest_port,
                     "periodSeconds", 5, "failureThreshold", 3);
}

/* A list of strings, or absent (null counts as absent). */
static int strings_or_null(json_t *v, const char *what, struct sbx_error *err)
{
    json_t *e;
    size_t i;

    if (!v || json_is_null(v))
        return 0;
    if (!json_is_array(v))
        return sbx_error_set(err, EINVAL, "%s is not a list of strings", what);
    json_array_foreach(v, i, e)
    {
        if (!json_is_string(e))
            return sbx_error_set(err, EINVAL, "%s is not a list of strings", what);
    }
    return 0;
}

/* What the template's first container must leave to sandboxd: its ports and their names, and
 * the mount paths of its volumes (the API server would refuse the pod; better to say why). */
static int check_main(json_t *c, const struct sbx_inject_opts *o, struct sbx_error *err)
{
    json_t *p, *m;
    size_t i;
    int r;

    if ((r = strings_or_null(json_object_get(c, "command"),
                             "spec.podTemplate.spec.containers[0].command", err)) < 0 ||
        (r = strings_or_null(json_object_get(c, "args"), "spec.podTemplate.spec.containers[0].args",
                             err)) < 0)
        return r;
    json_array_foreach(json_object_get(c, "ports"), i, p)
    {
        json_int_t cp = json_integer_value(json_object_get(p, "containerPort"));
        const char *name = json_string_value(json_object_get(p, "name"));
        if (cp == o->grpc_port || cp == o->rest_port ||
            (name && (!strcmp(name, "sandboxd-grpc") || !strcmp(name, "sandboxd-http"))))
            return sbx_error_set(err, EINVAL,
                                 "spec.podTemplate.spec.containers[0].ports: port %lld (%s) is "
                                 "sandboxd's",
                                 (long long)cp, name ? name : "unnamed");
    }
    json_array_foreach(json_object_get(c, "volumeMounts"), i, m)
    {
        const char *path = json_string_value(json_object_get(m, "mountPath"));
        if (path && (!strcmp(path, SBX_BIN_DIR) || !strcmp(path, SBX_TOKEN_DIR)))
            return sbx_error_set(err, EINVAL,
                                 "spec.podTemplate.spec.containers[0].volumeMounts: %s is "
                                 "sandboxd's",
                                 path);
    }
    return 0;
}

/* The main container runs sandboxd, which runs the original command. Without a command the
 * image's entrypoint is unknown here: sandboxd serves alone, and args (if any) become the
 * command it starts. */
static int inject_main(json_t *c, const struct sbx_inject_opts *o, struct sbx_error *err)
{
    json_t *cmd, *user_cmd = json_object_get(c, "command"), *args = json_object_get(c, "args");
    int r;

    if (!json_is_object(c))
        return sbx_error_set(err, EINVAL, "spec.podTemplate.spec.containers[0] is not an object");
    if ((r = check_main(c, o, err)) < 0)
        return r;
    cmd = json_pack("[s, s, s]", SBX_BIN_DIR "/sandboxd",
                    "--token-file=" SBX_TOKEN_DIR "/" SBX_TOKEN_KEY, "--");
    if (!cmd)
        return sbx_error_set(err, ENOMEM, "pod");
    if (json_is_array(user_cmd))
        json_array_extend(cmd, user_cmd);
    if (json_is_array(args))
        json_array_extend(cmd, args);
    if (json_array_size(cmd) == 3)
        json_array_remove(cmd, 2); /* nothing after "--" */
    json_object_set_new(c, "command", cmd);
    json_object_del(c, "args");
    if (append(c, "ports",
               json_pack("{s:s, s:i, s:s}", "name", "sandboxd-grpc", "containerPort", o->grpc_port,
                         "protocol", "TCP")) < 0 ||
        append(c, "ports",
               json_pack("{s:s, s:i, s:s}", "name", "sandboxd-http", "containerPort", o->rest_port,
                         "protocol", "TCP")) < 0 ||
        append(c, "volumeMounts",
               json_pack("{s:s, s:s, s:b}", "name", SBX_BIN_VOLUME, "mountPath", SBX_BIN_DIR,
                         "readOnly", 1)) < 0 ||
        append(c, "volumeMounts",
               json_pack("{s:s, s:s, s:b}", "name", SBX_TOKEN_VOLUME, "mountPath", SBX_TOKEN_DIR,
                         "readOnly", 1)) < 0)
        return sbx_error_set(err, ENOMEM, "pod");
    /* The template's own probes, when they are probes; a null one would leave none. */
    if (!json_is_object(json_object_get(c, "readinessProbe")))
        json_object_set_new(c, "readinessProbe", probe(o, "/readyz"));
    if (!json_is_object(json_object_get(c, "livenessProbe")))
        json_object_set_new(c, "livenessProbe", probe(o, "/healthz"));
    return 0;
}

static int inject(json_t *spec, const char *secret, const struct sbx_inject_opts *o,
                  struct sbx_error *err)
{
    json_t *containers = json_object_get(spec, "containers");
    json_t *volumes = json_object_get(spec, "volumes");
    json_t *inits = json_object_get(spec, "initContainers");
    int r;

    if (!json_is_array(containers) || json_array_size(containers) == 0)
        return sbx_error_set(err, EINVAL, "spec.podTemplate.spec.containers is empty");
    if (named_in(volumes, SBX_BIN_VOLUME) || named_in(volumes, SBX_TOKEN_VOLUME))
        return sbx_error_set(err, EINVAL,
                             "spec.podTemplate.spec.volumes: names %s and %s are sandboxd's",
                             SBX_BIN_VOLUME, SBX_TOKEN_VOLUME);
    if (named_in(inits, SBX_INJECTOR_NAME))
        return sbx_error_set(err, EINVAL, "spec.podTemplate.spec.initContainers: %s is taken",
                             SBX_INJECTOR_NAME);
    if ((r = inject_main(json_array_get(containers, 0), o, err)) < 0)
        return r;
    if (append(spec, "volumes", json_pack("{s:s, s:{}}", "name", SBX_BIN_VOLUME, "emptyDir")) < 0 ||
        append(spec, "volumes",
               json_pack("{s:s, s:{s:s, s:i}}", "name", SBX_TOKEN_VOLUME, "secret", "secretName",
                         secret, "defaultMode", 0444)) < 0)
        return sbx_error_set(err, ENOMEM, "pod");
    if (!json_is_array(inits)) {
        inits = json_array();
        json_object_set_new(spec, "initContainers", inits);
    }
    /* First, so later init containers may use sandboxd too. */
    json_t *init =
        json_pack("{s:s, s:s, s:s, s:[s], s:[{s:s, s:s}]}", "name", SBX_INJECTOR_NAME, "image",
                  o->image, "imagePullPolicy", "IfNotPresent", "args", SBX_BIN_DIR, "volumeMounts",
                  "name", SBX_BIN_VOLUME, "mountPath", SBX_BIN_DIR);
    if (!init || json_array_insert_new(inits, 0, init) < 0)
        return sbx_error_set(err, ENOMEM, "pod");
    return 0;
}

int sbx_sandbox_pod(json_t *sandbox, const struct sbx_inject_opts *o, json_t **ret,
                    struct sbx_error *err)
{
    json_t *tmpl = json_object_get(json_object_get(sandbox, "spec"), "podTemplate");
    json_t *tmeta = json_object_get(tmpl, "metadata");
    json_auto_t *spec = json_deep_copy(json_object_get(tmpl, "spec"));
    json_auto_t *meta = child_meta(sandbox, meta_str(sandbox, "name"));
    char secret[300];
    int r;

    if (!meta_str(sandbox, "name"))
        return sbx_error_set(err, EINVAL, "metadata.name is missing");
    if (!json_is_object(spec))
        return sbx_error_set(err, EINVAL, "spec.podTemplate.spec is missing");
    if (!meta || !sbx_token_secret_name(meta_str(sandbox, "name"), secret, sizeof(secret)))
        return sbx_error_set(err, ENOMEM, "pod");
    if ((r = inject(spec, secret, o, err)) < 0)
        return r;
    /* A runtime class only when the template names one; a null or empty one would run the pod
     * under the node's default runtime instead of ours. */
    const char *rc = json_string_value(json_object_get(spec, "runtimeClassName"));
    if (!rc || !*rc) {
        json_object_del(spec, "runtimeClassName");
        if (o->runtime_class && *o->runtime_class)
            json_object_set_new(spec, "runtimeClassName", json_string(o->runtime_class));
    }
    /* The service account's token only when asked for with true: null (or anything else) would
     * leave the API server's default, which mounts it. */
    json_object_set_new(
        spec, "automountServiceAccountToken",
        json_boolean(json_is_true(json_object_get(spec, "automountServiceAccountToken"))));
    /* Template labels and annotations, ours on top (the selector must hold). */
    json_t *labels = json_object_get(meta, "labels");
    json_t *tl = json_deep_copy(json_object_get(tmeta, "labels"));
    if (json_is_object(tl)) {
        json_object_update(tl, labels);
        json_object_set_new(meta, "labels", tl);
    } else {
        json_decref(tl);
    }
    if (json_is_object(json_object_get(tmeta, "annotations")))
        json_object_set(meta, "annotations", json_object_get(tmeta, "annotations"));
    *ret = json_pack("{s:s, s:s, s:O, s:O}", "apiVersion", "v1", "kind", "Pod", "metadata", meta,
                     "spec", spec);
    return *ret ? 0 : sbx_error_set(err, ENOMEM, "pod");
}

json_t *sbx_sandbox_secret(json_t *sandbox, const char *token)
{
    char name[300];

    if (!sbx_token_secret_name(meta_str(sandbox, "name"), name, sizeof(name)))
        return NULL;
    return json_pack("{s:s, s:s, s:o, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Secret",
                     "metadata", child_meta(sandbox, name), "type", "Opaque", "stringData",
                     SBX_TOKEN_KEY, token);
}

json_t *sbx_sandbox_service(json_t *sandbox, const struct sbx_inject_opts *o)
{
    char hash[9];

    sbx_name_hash(meta_str(sandbox, "name"), hash);
    return json_pack("{s:s, s:s, s:o, s:{s:s, s:{s:s}, s:b, s:[{s:s, s:i, s:s}, {s:s, s:i, s:s}]}}",
                     "apiVersion", "v1", "kind", "Service", "metadata",
                     child_meta(sandbox, meta_str(sandbox, "name")), "spec", "clusterIP", "None",
                     "selector", SBX_LABEL_HASH, hash, "publishNotReadyAddresses", 1, "ports",
                     "name", "grpc", "port", o->grpc_port, "protocol", "TCP", "name", "http",
                     "port", o->rest_port, "protocol", "TCP");
}
