#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "podspec.h"
#include "tap.h"

static const char sandbox_json[] =
    "{\"apiVersion\":\"agents.x-k8s.io/v1beta1\",\"kind\":\"Sandbox\","
    "\"metadata\":{\"name\":\"sb1\",\"namespace\":\"ns\",\"uid\":\"u-1\"},"
    "\"spec\":{\"podTemplate\":{\"metadata\":{\"labels\":{\"app\":\"x\"}},"
    "\"spec\":{\"containers\":[{\"name\":\"main\",\"image\":\"debian\","
    "\"command\":[\"sleep\"],\"args\":[\"inf\"]}]}}}}";

static const struct sbx_inject_opts opts = {
    .image = "injector:1", .runtime_class = "gvisor", .grpc_port = 9090, .rest_port = 8080};

static json_t *path(json_t *j, const char *p)
{
    char buf[256], *save, *tok;

    snprintf(buf, sizeof(buf), "%s", p);
    for (tok = strtok_r(buf, ".", &save); tok && j; tok = strtok_r(NULL, ".", &save))
        j = json_is_array(j) ? json_array_get(j, (size_t)atoi(tok)) : json_object_get(j, tok);
    return j;
}

static const char *str(json_t *j, const char *p)
{
    return json_string_value(path(j, p)) ?: "";
}

int main(void)
{
    struct sbx_error err = {0};
    json_t *sb = json_loads(sandbox_json, 0, NULL), *pod = NULL;
    char hash[9];

    ok(sbx_sandbox_pod(sb, &opts, &pod, &err) == 0, "pod built");
    sbx_name_hash("sb1", hash);
    ok(!strcmp(str(pod, "metadata.name"), "sb1"), "pod named like the sandbox");
    ok(!strcmp(str(pod, "metadata.labels.app"), "x"), "template labels kept");
    ok(!strcmp(json_string_value(json_object_get(path(pod, "metadata.labels"), SBX_LABEL_HASH)),
               hash),
       "hash label");
    ok(!strcmp(str(pod, "metadata.ownerReferences.0.uid"), "u-1"), "owner reference");
    ok(json_is_true(path(pod, "metadata.ownerReferences.0.controller")), "controller ref");
    ok(!strcmp(str(pod, "spec.runtimeClassName"), "gvisor"), "default runtime class");
    ok(json_is_false(path(pod, "spec.automountServiceAccountToken")), "no SA token");
    json_t *cmd = path(pod, "spec.containers.0.command");
    ok(json_array_size(cmd) == 5, "command: sandboxd, token flag, --, sleep, inf");
    ok(!strcmp(str(cmd, "0"), SBX_BIN_DIR "/sandboxd") && !strcmp(str(cmd, "2"), "--") &&
           !strcmp(str(cmd, "3"), "sleep") && !strcmp(str(cmd, "4"), "inf"),
       "sandboxd runs the original command");
    ok(!path(pod, "spec.containers.0.args"), "args folded into the command");
    ok(!strcmp(str(pod, "spec.initContainers.0.image"), "injector:1"), "injector init container");
    ok(!strcmp(str(pod, "spec.containers.0.readinessProbe.httpGet.path"), "/readyz"),
       "readiness probe");
    ok(!strcmp(str(pod, "spec.containers.0.livenessProbe.httpGet.path"), "/healthz"),
       "liveness probe");
    ok(json_integer_value(path(pod, "spec.containers.0.ports.0.containerPort")) == 9090,
       "gRPC port");
    ok(!strcmp(str(pod, "spec.volumes.1.secret.secretName"), "sb1-sandboxd-token"),
       "token secret volume");
    ok(!path(sb, "spec.podTemplate.spec.initContainers"), "the sandbox is left untouched");
    json_decref(pod);

    /* The template's own choices win. */
    json_object_set_new(path(sb, "spec.podTemplate.spec"), "runtimeClassName", json_string("kata"));
    json_object_set_new(path(sb, "spec.podTemplate.spec"), "automountServiceAccountToken",
                        json_true());
    ok(sbx_sandbox_pod(sb, &opts, &pod, &err) == 0, "pod built again");
    ok(!strcmp(str(pod, "spec.runtimeClassName"), "kata"), "template runtime class kept");
    ok(json_is_true(path(pod, "spec.automountServiceAccountToken")), "asked-for SA token kept");
    json_decref(pod);

    json_object_set_new(path(sb, "spec.podTemplate.spec"), "volumes",
                        json_pack("[{s:s}]", "name", SBX_BIN_VOLUME));
    ok(sbx_sandbox_pod(sb, &opts, &pod, &err) == -EINVAL, "volume name clash: %s", err.msg);
    json_object_set_new(path(sb, "spec.podTemplate.spec"), "containers", json_array());
    ok(sbx_sandbox_pod(sb, &opts, &pod, &err) == -EINVAL, "no containers: %s", err.msg);

    json_t *secret = sbx_sandbox_secret(sb, "tok");
    ok(!strcmp(str(secret, "stringData.token"), "tok"), "secret carries the token");
    json_decref(secret);
    json_t *svc = sbx_sandbox_service(sb, &opts);
    ok(!strcmp(str(svc, "spec.clusterIP"), "None"), "headless service");
    ok(!strcmp(json_string_value(json_object_get(path(svc, "spec.selector"), SBX_LABEL_HASH)),
               hash),
       "service selects the pod");
    json_decref(svc);

    char name[300], longname[260];
    memset(longname, 'a', 250);
    longname[250] = '\0';
    bool fits = sbx_token_secret_name(longname, name, sizeof(name)) && strlen(name) <= 253;
    ok(fits, "secret name of a long sandbox name fits (%zu)", strlen(name));
    json_decref(sb);
    return done_testing();
}
