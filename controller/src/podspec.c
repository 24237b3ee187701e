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

char *sbx_pvc_name(const char *vct, const char *sandbox, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s-%s", vct ? vct : "", sandbox ? sandbox : "");

    return n > 0 && (size_t)n < size ? buf : NULL;
}

static const char *vct_name(json_t *vct)
{
    return json_string_value(json_object_get(json_object_get(vct, "metadata"), "name"));
}

int sbx_check_claim_templates(json_t *vcts, struct sbx_error *err)
{
    json_t *v;
    size_t i;

    if (!vcts || json_is_null(vcts))
        return 0;
    if (!json_is_array(vcts))
        return sbx_error_set(err, EINVAL, "spec.volumeClaimTemplates is not a list");
    json_array_foreach(vcts, i, v)
    {
        const char *name = vct_name(v);
        if (!name || !*name)
            return sbx_error_set(err, EINVAL,
                                 "spec.volumeClaimTemplates[%zu]: metadata.name is "
                                 "missing",
                                 i);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(vct_name(json_array_get(vcts, j)), name))
                return sbx_error_set(err, EINVAL,
                                     "spec.volumeClaimTemplates[%zu]: name \"%.100s\" is used "
                                     "twice",
                                     i, name);
    }
    return 0;
}

int sbx_sandbox_pvc(json_t *sandbox, json_t *vct, json_t **ret, struct sbx_error *err)
{
    json_t *vmeta = json_object_get(vct, "metadata"), *spec = json_object_get(vct, "spec");
    json_t *vlabels = json_object_get(vmeta, "labels"),
           *vann = json_object_get(vmeta, "annotations");
    const char *name = vct_name(vct);
    char pvc[300], hash[9];

    if (!name || !*name)
        return sbx_error_set(err, EINVAL, "spec.volumeClaimTemplates: metadata.name is missing");
    if (!json_is_object(spec))
        return sbx_error_set(err, EINVAL,
                             "spec.volumeClaimTemplates \"%.100s\": spec is not an "
                             "object",
                             name);
    if (!sbx_pvc_name(name, meta_str(sandbox, "name"), pvc, sizeof(pvc)))
        return sbx_error_set(err, EINVAL,
                             "spec.volumeClaimTemplates \"%.100s\": the claim's "
                             "name is too long",
                             name);
    json_auto_t *labels = json_is_object(vlabels) ? json_deep_copy(vlabels) : json_object();
    sbx_name_hash(meta_str(sandbox, "name"), hash);
    json_auto_t *meta =
        json_pack("{s:s, s:s?, s:[o]}", "name", pvc, "namespace", meta_str(sandbox, "namespace"),
                  "ownerReferences", sbx_owner_ref(sandbox));
    if (!labels || !meta || json_object_set_new(labels, SBX_LABEL_HASH, json_string(hash)) < 0 ||
        json_object_set(meta, "labels", labels) < 0 ||
        (json_is_object(vann) && json_object_set(meta, "annotations", vann) < 0))
        return sbx_error_set(err, ENOMEM, "claim");
    *ret = json_pack("{s:s, s:s, s:O, s:o}", "apiVersion", "v1", "kind", "PersistentVolumeClaim",
                     "metadata", meta, "spec", json_deep_copy(spec));
    return *ret ? 0 : sbx_error_set(err, ENOMEM, "claim");
}

/* The volume claim templates' volumes into the pod spec: one per template, named as it, on its
 * claim; a volume of the pod template with the same name gives way. */
static int claim_volumes(json_t *spec, json_t *sandbox, struct sbx_error *err)
{
    json_t *vcts = json_object_get(json_object_get(sandbox, "spec"), "volumeClaimTemplates");
    json_t *vols = json_object_get(spec, "volumes"), *v;
    char pvc[300];
    size_t i;
    int r;

    if ((r = sbx_check_claim_templates(vcts, err)) < 0)
        return r;
    if (json_array_size(vcts) == 0)
        return 0;
    for (i = json_array_size(vols); json_is_array(vols) && i-- > 0;) {
        const char *n = json_string_value(json_object_get(json_array_get(vols, i), "name"));
        json_t *e;
        size_t j;
        json_array_foreach(vcts, j, e)
        {
            if (n && !strcmp(n, vct_name(e))) {
                json_array_remove(vols, i);
                break;
            }
        }
    }
    json_array_foreach(vcts, i, v)
    {
        if (!sbx_pvc_name(vct_name(v), meta_str(sandbox, "name"), pvc, sizeof(pvc)))
            return sbx_error_set(err, EINVAL,
                                 "spec.volumeClaimTemplates[%zu]: the claim's name is too long", i);
        if (append(spec, "volumes",
                   json_pack("{s:s, s:{s:s}}", "name", vct_name(v), "persistentVolumeClaim",
                             "claimName", pvc)) < 0)
            return sbx_error_set(err, ENOMEM, "pod");
    }
    return 0;
}

/* Ports declared in a pod, a bit per port number. */
struct port_set {
    uint8_t bit[65536 / 8];
};

static bool port_taken(const struct port_set *t, int port)
{
    return port <= 0 || port > 65535 || (t->bit[port / 8] & (1u << (port % 8)));
}

static bool ours(const char *name)
{
    return name && (!strcmp(name, SBX_GRPC_PORT_NAME) || !strcmp(name, SBX_REST_PORT_NAME) ||
                    !strcmp(name, SBX_E2B_PORT_NAME));
}

/* SBX_E2B_PORT when the template asks for E2B's API, 0 when not; -EINVAL for a value neither
 * "true" nor "false", or the port declared by a container (E2B's clients cannot be told
 * another). */
static int e2b_port(json_t *tmeta, const struct port_set *t, struct sbx_error *err)
{
    json_t *v = json_object_get(json_object_get(tmeta, "annotations"), SBX_ANNOT_E2B);
    const char *s = json_string_value(v);

    if (!v || (s && !strcmp(s, "false")))
        return 0;
    if (!s || strcmp(s, "true"))
        return sbx_error_set(err, EINVAL,
                             "spec.podTemplate.metadata.annotations[%s]: \"true\" or \"false\"",
                             SBX_ANNOT_E2B);
    if (port_taken(t, SBX_E2B_PORT))
        return sbx_error_set(err, EINVAL,
                             "spec.podTemplate.spec: port %d is declared by a container, and %s "
                             "asks sandboxd to serve E2B's API there",
                             SBX_E2B_PORT, SBX_ANNOT_E2B);
    return SBX_E2B_PORT;
}

/* Marks the ports of the containers in list (spec.<field>) that share the network namespace with
 * sandboxd while it serves: all of them, or with sidecars_only the init containers with
 * restartPolicy Always. Any of them naming a port as ours is refused. */
static int mark_ports(json_t *list, const char *field, bool sidecars_only, struct port_set *t,
                      struct sbx_error *err)
{
    json_t *c, *p;
    size_t i, j;

    json_array_foreach(list, i, c)
    {
        const char *rp = json_string_value(json_object_get(c, "restartPolicy"));
        bool serves = !sidecars_only || (rp && !strcmp(rp, "Always"));
        json_array_foreach(json_object_get(c, "ports"), j, p)
        {
            const char *name = json_string_value(json_object_get(p, "name"));
            json_int_t cp = json_integer_value(json_object_get(p, "containerPort"));
            if (ours(name))
                return sbx_error_set(err, EINVAL,
                                     "spec.podTemplate.spec.%s[%zu].ports[%zu]: name %s is "
                                     "sandboxd's",
                                     field, i, j, name);
            if (serves && cp > 0 && cp <= 65535)
                t->bit[cp / 8] |= (uint8_t)(1u << (cp % 8));
        }
    }
    return 0;
}

int sbx_pod_ports(json_t *spec, json_t *tmeta, const struct sbx_inject_opts *o,
                  struct sbx_ports *ret, struct sbx_error *err)
{
    struct port_set t = {0};
    int r, e2b;

    if ((r = mark_ports(json_object_get(spec, "containers"), "containers", false, &t, err)) < 0 ||
        (r = mark_ports(json_object_get(spec, "initContainers"), "initContainers", true, &t, err)) <
            0 ||
        (e2b = e2b_port(tmeta, &t, err)) < 0)
        return r < 0 ? r : e2b;
    if (e2b)
        t.bit[e2b / 8] |= (uint8_t)(1u << (e2b % 8)); /* the pair goes elsewhere */
    if (!port_taken(&t, o->grpc_port) && !port_taken(&t, o->rest_port)) {
        *ret = (struct sbx_ports){o->grpc_port, o->rest_port, e2b};
        return 0;
    }
    for (int k = 0; SBX_ALT_GRPC_PORT + k <= 65535; k++) {
        if (!port_taken(&t, SBX_ALT_GRPC_PORT + k) && !port_taken(&t, SBX_ALT_REST_PORT + k)) {
            *ret = (struct sbx_ports){SBX_ALT_GRPC_PORT + k, SBX_ALT_REST_PORT + k, e2b};
            return 0;
        }
    }
    return sbx_error_set(err, EINVAL, "spec.podTemplate.spec: no ports left for sandboxd");
}

/* HTTP probes name the port (kubelet resolves it in the container); gRPC probes take only a
 * number. */
static json_t *probe(const struct sbx_inject_opts *o, const struct sbx_ports *ports,
                     const char *path)
{
    if (o->probe == SBX_PROBE_GRPC)
        return json_pack("{s:{s:i}, s:i, s:i}", "grpc", "port", ports->grpc, "periodSeconds", 5,
                         "failureThreshold", 3);
    return json_pack("{s:{s:s, s:s}, s:i, s:i}", "httpGet", "path", path, "port",
                     SBX_REST_PORT_NAME, "periodSeconds", 5, "failureThreshold", 3);
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

/* What the template's first container must leave to sandboxd: the mount paths of its volumes
 * (the API server would refuse the pod; better to say why). Port names are checked with the
 * ports of every container (sbx_pod_ports). */
static int check_main(json_t *c, struct sbx_error *err)
{
    json_t *m;
    size_t i;
    int r;

    if ((r = strings_or_null(json_object_get(c, "command"),
                             "spec.podTemplate.spec.containers[0].command", err)) < 0 ||
        (r = strings_or_null(json_object_get(c, "args"), "spec.podTemplate.spec.containers[0].args",
                             err)) < 0)
        return r;
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

/* sandboxd's command line up to "--": the port flags only where they differ from its defaults. */
static json_t *sandboxd_argv(const struct sbx_ports *ports)
{
    json_t *cmd = json_pack("[s, s]", SBX_BIN_DIR "/sandboxd",
                            "--token-file=" SBX_TOKEN_DIR "/" SBX_TOKEN_KEY);
    char flag[32];

    if (!cmd)
        return NULL;
    if (ports->grpc != SBX_SANDBOXD_GRPC_PORT) {
        snprintf(flag, sizeof(flag), "--grpc-port=%d", ports->grpc);
        json_array_append_new(cmd, json_string(flag));
    }
    if (ports->rest != SBX_SANDBOXD_REST_PORT) {
        snprintf(flag, sizeof(flag), "--rest-port=%d", ports->rest);
        json_array_append_new(cmd, json_string(flag));
    }
    if (ports->e2b) {
        snprintf(flag, sizeof(flag), "--e2b-port=%d", ports->e2b);
        json_array_append_new(cmd, json_string(flag));
    }
    if (json_array_append_new(cmd, json_string("--")) < 0) {
        json_decref(cmd);
        return NULL;
    }
    return cmd;
}

int sbx_pod_entrypoint(json_t *tmeta, json_t **ret, struct sbx_error *err)
{
    const char *v = json_string_value(
        json_object_get(json_object_get(tmeta, "annotations"), SBX_ANNOT_ENTRYPOINT));
    json_t *e;
    size_t i;

    *ret = NULL;
    if (!v)
        return 0;
    json_auto_t *list = json_loads(v, JSON_REJECT_DUPLICATES, NULL);
    bool ok = json_is_array(list) && json_array_size(list) > 0;
    json_array_foreach(list, i, e) ok = ok && json_is_string(e);
    if (!ok)
        return sbx_error_set(err, EINVAL,
                             "spec.podTemplate.metadata.annotations[%s]: not a JSON list of "
                             "strings",
                             SBX_ANNOT_ENTRYPOINT);
    *ret = TAKE_PTR(list);
    return 0;
}

/* What the image runs by, for a main container without a command: the entrypoint (of the pod
 * template's annotation, or looked up in the registry) and the image's cmd (looked up). */
struct image_run {
    json_t *entry, *cmd;
};

/* The main container runs sandboxd, which runs the original command. Without a command, the
 * image's entrypoint (img->entry) with the args, or without args the image's cmd, as a container
 * runtime does; when nothing is known of the image, sandboxd serves alone, and args (if any)
 * become the command it starts. */
static int inject_main(json_t *c, const struct sbx_inject_opts *o, const struct sbx_ports *ports,
                       const struct image_run *img, struct sbx_error *err)
{
    json_t *cmd, *user_cmd = json_object_get(c, "command"), *args = json_object_get(c, "args");
    size_t n;
    int r;

    if (!json_is_object(c))
        return sbx_error_set(err, EINVAL, "spec.podTemplate.spec.containers[0] is not an object");
    if ((r = check_main(c, err)) < 0)
        return r;
    if (!(cmd = sandboxd_argv(ports)))
        return sbx_error_set(err, ENOMEM, "pod");
    n = json_array_size(cmd);
    if (json_array_size(user_cmd) > 0) {
        json_array_extend(cmd, user_cmd);
    } else {
        if (json_is_array(img->entry))
            json_array_extend(cmd, img->entry);
        if (json_array_size(args) == 0 && json_is_array(img->cmd))
            json_array_extend(cmd, img->cmd);
    }
    if (json_is_array(args))
        json_array_extend(cmd, args);
    if (json_array_size(cmd) == n)
        json_array_remove(cmd, n - 1); /* nothing after "--" */
    json_object_set_new(c, "command", cmd);
    json_object_del(c, "args");
    if (append(c, "ports",
               json_pack("{s:s, s:i, s:s}", "name", SBX_GRPC_PORT_NAME, "containerPort",
                         ports->grpc, "protocol", "TCP")) < 0 ||
        append(c, "ports",
               json_pack("{s:s, s:i, s:s}", "name", SBX_REST_PORT_NAME, "containerPort",
                         ports->rest, "protocol", "TCP")) < 0 ||
        (ports->e2b && append(c, "ports",
                              json_pack("{s:s, s:i, s:s}", "name", SBX_E2B_PORT_NAME,
                                        "containerPort", ports->e2b, "protocol", "TCP")) < 0) ||
        append(c, "volumeMounts",
               json_pack("{s:s, s:s, s:b}", "name", SBX_BIN_VOLUME, "mountPath", SBX_BIN_DIR,
                         "readOnly", 1)) < 0 ||
        append(c, "volumeMounts",
               json_pack("{s:s, s:s, s:b}", "name", SBX_TOKEN_VOLUME, "mountPath", SBX_TOKEN_DIR,
                         "readOnly", 1)) < 0)
        return sbx_error_set(err, ENOMEM, "pod");
    /* The template's own probes, when they are probes; a null one would leave none. */
    if (!json_is_object(json_object_get(c, "readinessProbe")))
        json_object_set_new(c, "readinessProbe", probe(o, ports, "/readyz"));
    if (!json_is_object(json_object_get(c, "livenessProbe")))
        json_object_set_new(c, "livenessProbe", probe(o, ports, "/healthz"));
    return 0;
}

static int inject(json_t *spec, json_t *tmeta, const char *secret, const struct sbx_inject_opts *o,
                  const struct image_run *img, struct sbx_error *err)
{
    json_t *containers = json_object_get(spec, "containers");
    json_t *volumes = json_object_get(spec, "volumes");
    json_t *inits = json_object_get(spec, "initContainers");
    struct sbx_ports ports;
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
    if ((r = sbx_pod_ports(spec, tmeta, o, &ports, err)) < 0 ||
        (r = inject_main(json_array_get(containers, 0), o, &ports, img, err)) < 0)
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

static int sandbox_pod(json_t *sandbox, const struct sbx_inject_opts *o, json_t *image,
                       json_t **ret, struct sbx_error *err)
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
    json_auto_t *entry = NULL;
    if ((r = sbx_pod_entrypoint(tmeta, &entry, err)) < 0 ||
        (r = claim_volumes(spec, sandbox, err)) < 0)
        return r;
    struct image_run img = {entry, NULL};
    if (!entry && image) {
        img.entry = json_object_get(image, "entrypoint");
        img.cmd = json_object_get(image, "cmd");
    }
    if ((r = inject(spec, tmeta, secret, o, &img, err)) < 0)
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

int sbx_sandbox_pod(json_t *sandbox, const struct sbx_inject_opts *o, json_t **ret,
                    struct sbx_error *err)
{
    return sandbox_pod(sandbox, o, NULL, ret, err);
}

int sbx_sandbox_pod_image(json_t *sandbox, const struct sbx_inject_opts *o, json_t *image,
                          json_t **ret, struct sbx_error *err)
{
    return sandbox_pod(sandbox, o, image, ret, err);
}

const char *sbx_pod_image_to_resolve(json_t *sandbox)
{
    json_t *tmpl = json_object_get(json_object_get(sandbox, "spec"), "podTemplate");
    json_t *main = json_array_get(json_object_get(json_object_get(tmpl, "spec"), "containers"), 0);
    json_t *ann = json_object_get(json_object_get(tmpl, "metadata"), "annotations");
    const char *image = json_string_value(json_object_get(main, "image"));

    if (json_array_size(json_object_get(main, "command")) > 0 ||
        json_object_get(ann, SBX_ANNOT_ENTRYPOINT) || !image || !*image)
        return NULL;
    return image;
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
    json_t *tmpl = json_object_get(json_object_get(sandbox, "spec"), "podTemplate");
    struct sbx_ports ports = {o->grpc_port, o->rest_port, 0};
    struct sbx_error err = {0};
    char hash[9];

    /* On failure, the ports stay the configured ones. */
    sbx_pod_ports(json_object_get(tmpl, "spec"), json_object_get(tmpl, "metadata"), o, &ports,
                  &err);
    sbx_name_hash(meta_str(sandbox, "name"), hash);
    json_t *svc = json_pack(
        "{s:s, s:s, s:o, s:{s:s, s:{s:s}, s:b, s:[{s:s, s:i, s:s}, {s:s, s:i, s:s}]}}",
        "apiVersion", "v1", "kind", "Service", "metadata",
        child_meta(sandbox, meta_str(sandbox, "name")), "spec", "clusterIP", "None", "selector",
        SBX_LABEL_HASH, hash, "publishNotReadyAddresses", 1, "ports", "name", "grpc", "port",
        ports.grpc, "protocol", "TCP", "name", "http", "port", ports.rest, "protocol", "TCP");
    if (svc && ports.e2b &&
        json_array_append_new(json_object_get(json_object_get(svc, "spec"), "ports"),
                              json_pack("{s:s, s:i, s:s}", "name", "e2b", "port", ports.e2b,
                                        "protocol", "TCP")) < 0) {
        json_decref(svc);
        return NULL;
    }
    return svc;
}
