/* Volume claim templates: the Pod's volumes on the claims, the claims themselves (name, labels,
 * owner, spec) and a claim's templates merged with its template's as the policy says. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "podspec.h"
#include "reconcilers.h"
#include "tap.h"

static const struct sbx_inject_opts opts = {
    .image = "injector:1", .runtime_class = "gvisor", .grpc_port = 9090, .rest_port = 8080};

static json_t *load(const char *s)
{
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);

    if (!j) {
        fprintf(stderr, "bad test JSON: %s\n", e.text);
        abort();
    }
    return j;
}

static const char *str(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k)) ?: "";
}

/* The pod's volume named name, or NULL. */
static json_t *volume(json_t *pod, const char *name)
{
    json_t *v;
    size_t i;

    json_array_foreach(json_object_get(json_object_get(pod, "spec"), "volumes"), i, v)
    {
        if (!strcmp(str(v, "name"), name))
            return v;
    }
    return NULL;
}

static json_t *sandbox(const char *vcts)
{
    char buf[2048];

    snprintf(buf, sizeof(buf),
             "{\"metadata\":{\"name\":\"sb\",\"namespace\":\"ns\",\"uid\":\"u-1\"},"
             "\"spec\":{\"podTemplate\":{\"spec\":{\"containers\":[{\"name\":\"main\","
             "\"image\":\"i\",\"volumeMounts\":[{\"name\":\"workspace\",\"mountPath\":\"/w\"}]}],"
             "\"volumes\":[{\"name\":\"workspace\",\"emptyDir\":{}},{\"name\":\"other\","
             "\"emptyDir\":{}}]}},\"volumeClaimTemplates\":%s}}",
             vcts);
    return load(buf);
}

static void pod_volumes(void)
{
    struct sbx_error err = {0};
    json_t *sb = sandbox("[{\"metadata\":{\"name\":\"workspace\",\"labels\":{\"a\":\"b\"},"
                         "\"annotations\":{\"x\":\"y\"}},\"spec\":{\"accessModes\":"
                         "[\"ReadWriteOnce\"],\"resources\":{\"requests\":{\"storage\":\"1Gi\"}}}},"
                         "{\"metadata\":{\"name\":\"cache\"},\"spec\":{}}]");
    json_t *pod = NULL, *pvc = NULL, *v;
    char hash[9];

    ok(sbx_sandbox_pod(sb, &opts, &pod, &err) == 0, "pod of a sandbox with claims: %s", err.msg);
    v = volume(pod, "workspace");
    ok(v &&
           !strcmp(str(json_object_get(v, "persistentVolumeClaim"), "claimName"), "workspace-sb") &&
           !json_object_get(v, "emptyDir"),
       "the template's volume of that name is the claim's (workspace-sb)");
    v = volume(pod, "cache");
    ok(v && !strcmp(str(json_object_get(v, "persistentVolumeClaim"), "claimName"), "cache-sb"),
       "a claim the pod template does not name gets a volume too");
    ok(volume(pod, "other") && json_object_get(volume(pod, "other"), "emptyDir"),
       "other volumes stay");
    json_decref(pod);

    ok(sbx_sandbox_pvc(
           sb,
           json_array_get(json_object_get(json_object_get(sb, "spec"), "volumeClaimTemplates"), 0),
           &pvc, &err) == 0,
       "claim built: %s", err.msg);
    json_t *md = json_object_get(pvc, "metadata");
    json_t *ref = json_array_get(json_object_get(md, "ownerReferences"), 0);
    sbx_name_hash("sb", hash);
    ok(!strcmp(str(md, "name"), "workspace-sb") && !strcmp(str(md, "namespace"), "ns"),
       "named <template>-<sandbox> in its namespace");
    ok(!strcmp(str(json_object_get(md, "labels"), SBX_LABEL_HASH), hash) &&
           !strcmp(str(json_object_get(md, "labels"), "a"), "b") &&
           !strcmp(str(json_object_get(md, "annotations"), "x"), "y"),
       "the template's labels and annotations, and the sandbox's label");
    ok(!strcmp(str(ref, "kind"), "Sandbox") && !strcmp(str(ref, "uid"), "u-1") &&
           json_is_true(json_object_get(ref, "controller")),
       "owned by the sandbox, as its controller");
    ok(json_equal(json_object_get(pvc, "spec"),
                  json_object_get(
                      json_array_get(
                          json_object_get(json_object_get(sb, "spec"), "volumeClaimTemplates"), 0),
                      "spec")),
       "the template's spec");
    json_decref(pvc);
    json_decref(sb);

    const char *bad[] = {"[{\"metadata\":{},\"spec\":{}}]",
                         ("[{\"metadata\":{\"name\":\"a\"},\"spec\":{}},"
                          "{\"metadata\":{\"name\":\"a\"},\"spec\":{}}]"),
                         "{}", "[{\"metadata\":{\"name\":\"sandboxd-bin\"},\"spec\":{}}]"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        sb = sandbox(bad[i]);
        pod = NULL;
        ok(sbx_sandbox_pod(sb, &opts, &pod, &err) == -EINVAL && !pod, "refused %s: %s", bad[i],
           err.msg);
        json_decref(sb);
    }
    sb = sandbox("[{\"metadata\":{\"name\":\"w\"}}]");
    ok(sbx_sandbox_pvc(
           sb,
           json_array_get(json_object_get(json_object_get(sb, "spec"), "volumeClaimTemplates"), 0),
           &pvc, &err) == -EINVAL,
       "a template without a spec: %s", err.msg);
    json_decref(sb);
}

/* The names of the merged templates, comma-separated, and the storage class of "w". */
static int merge(const char *policy, const char *claim_vcts, char *names, size_t size,
                 const char **w_class, struct sbx_error *err)
{
    char buf[1024];
    json_t *out = NULL, *v;
    size_t i, n = 0;

    snprintf(buf, sizeof(buf),
             "{\"spec\":{%s%s%s\"volumeClaimTemplates\":[{\"metadata\":{\"name\":\"w\"},"
             "\"spec\":{\"storageClassName\":\"t\"}}]}}",
             policy ? "\"volumeClaimTemplatesPolicy\":\"" : "", policy ? policy : "",
             policy ? "\"," : "");
    json_t *tmpl = load(buf);
    snprintf(buf, sizeof(buf), "{\"spec\":{\"volumeClaimTemplates\":%s}}", claim_vcts);
    json_t *claim = load(buf);
    int r = sbx_claim_volumes(claim, tmpl, &out, err);
    names[0] = '\0';
    *w_class = "";
    json_array_foreach(out, i, v)
    {
        const char *name = str(json_object_get(v, "metadata"), "name");
        n += (size_t)snprintf(names + n, size - n, "%s%s", i ? "," : "", name);
        if (!strcmp(name, "w"))
            *w_class = str(json_object_get(v, "spec"), "storageClassName");
    }
    static char keep[32];
    snprintf(keep, sizeof(keep), "%s", *w_class);
    *w_class = keep;
    json_decref(out);
    json_decref(tmpl);
    json_decref(claim);
    return r;
}

static void claim_volumes(void)
{
    struct sbx_error err = {0};
    const char *cls;
    char names[128];
    const char *over = "[{\"metadata\":{\"name\":\"w\"},\"spec\":{\"storageClassName\":\"c\"}},"
                       "{\"metadata\":{\"name\":\"x\"},\"spec\":{}}]";
    const char *add = "[{\"metadata\":{\"name\":\"x\"},\"spec\":{}}]";

    ok(merge(NULL, "[]", names, sizeof(names), &cls, &err) == 0 && !strcmp(names, "w") &&
           !strcmp(cls, "t"),
       "no claim templates: the template's (%s)", names);
    ok(merge(NULL, add, names, sizeof(names), &cls, &err) == -EPERM, "Disallowed by default: %s",
       err.msg);
    ok(merge("Disallowed", add, names, sizeof(names), &cls, &err) == -EPERM, "Disallowed: %s",
       err.msg);
    ok(merge("Allowed", add, names, sizeof(names), &cls, &err) == 0 && !strcmp(names, "w,x"),
       "Allowed adds a new name (%s)", names);
    ok(merge("Allowed", over, names, sizeof(names), &cls, &err) == -EPERM,
       "Allowed does not override: %s", err.msg);
    ok(merge("Overrides", over, names, sizeof(names), &cls, &err) == 0 && !strcmp(names, "w,x") &&
           !strcmp(cls, "c"),
       "Overrides replaces in place and appends (%s, class %s)", names, cls);
    ok(merge("Overrides", "[{\"metadata\":{}}]", names, sizeof(names), &cls, &err) == -EPERM,
       "a claim template without a name: %s", err.msg);
}

int main(void)
{
    pod_volumes();
    claim_volumes();
    return done_testing();
}
