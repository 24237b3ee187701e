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

/* A sandbox sb2 whose pod template spec is the JSON spec. */
static json_t *sandbox_of(const char *spec)
{
    json_t *sb =
        json_pack("{s:s, s:s, s:{s:s, s:s, s:s}, s:{s:{s:o}}}", "apiVersion", SBX_API_VERSION,
                  "kind", "Sandbox", "metadata", "name", "sb2", "namespace", "ns", "uid", "u-2",
                  "spec", "podTemplate", "spec", json_loads(spec, 0, NULL));
    return sb;
}

/* The container port of main named name, 0 when none. */
static json_int_t named_port(json_t *main, const char *name)
{
    json_t *p;
    size_t i;

    json_array_foreach(json_object_get(main, "ports"), i, p)
    {
        if (!strcmp(str(p, "name"), name))
            return json_integer_value(json_object_get(p, "containerPort"));
    }
    return 0;
}

/* sandboxd's ports in the pod of a sandbox with this pod spec: the configured ones unless a
 * container declares them; then the injected command, the named ports and the Service agree. */
static void check_ports(const char *spec, const struct sbx_inject_opts *o, int grpc, int rest,
                        const char *what)
{
    struct sbx_error err = {0};
    json_t *sb = sandbox_of(spec), *pod = NULL;
    char gflag[32], rflag[32];

    snprintf(gflag, sizeof(gflag), "--grpc-port=%d", grpc);
    snprintf(rflag, sizeof(rflag), "--rest-port=%d", rest);
    ok(sbx_sandbox_pod(sb, o, &pod, &err) == 0, "%s: pod built (%s)", what, err.msg);
    json_t *main = path(pod, "spec.containers.0"), *cmd = json_object_get(main, "command");
    ok(named_port(main, SBX_GRPC_PORT_NAME) == grpc && named_port(main, SBX_REST_PORT_NAME) == rest,
       "%s: ports %d and %d named", what, grpc, rest);
    bool flags = grpc != 9090 || rest != 8080;
    ok(flags ? !strcmp(str(cmd, "2"), gflag) && !strcmp(str(cmd, "3"), rflag) &&
                   !strcmp(str(cmd, "4"), "--")
             : !strcmp(str(cmd, "2"), "--"),
       "%s: sandboxd told its ports (%s)", what, flags ? gflag : "none: its defaults");
    if (o->probe == SBX_PROBE_GRPC)
        ok(json_integer_value(path(main, "readinessProbe.grpc.port")) == grpc &&
               json_integer_value(path(main, "livenessProbe.grpc.port")) == grpc,
           "%s: gRPC probes on %d", what, grpc);
    else
        ok(!strcmp(str(main, "readinessProbe.httpGet.port"), SBX_REST_PORT_NAME) &&
               !strcmp(str(main, "livenessProbe.httpGet.port"), SBX_REST_PORT_NAME),
           "%s: HTTP probes on the port's name", what);
    json_t *svc = sbx_sandbox_service(sb, o);
    ok(json_integer_value(path(svc, "spec.ports.0.port")) == grpc &&
           json_integer_value(path(svc, "spec.ports.1.port")) == rest,
       "%s: the service carries them", what);
    json_decref(svc);
    json_decref(pod);
    json_decref(sb);
}

static void refused(const char *spec, const char *what)
{
    struct sbx_error err = {0};
    json_t *sb = sandbox_of(spec), *pod = NULL;

    ok(sbx_sandbox_pod(sb, &opts, &pod, &err) == -EINVAL && strstr(err.msg, "sandboxd's"),
       "%s: refused: %s", what, err.msg);
    json_decref(sb);
}

#define MAIN "{\"name\":\"main\",\"image\":\"app\",\"command\":[\"app\"]"

static void ports(void)
{
    struct sbx_inject_opts grpc_probe = opts;

    grpc_probe.probe = SBX_PROBE_GRPC;
    check_ports("{\"containers\":[" MAIN "}]}", &opts, 9090, 8080, "no ports declared");
    check_ports("{\"containers\":[" MAIN ",\"ports\":[{\"containerPort\":80}]}]}", &opts, 9090,
                8080, "other ports declared");
    check_ports("{\"containers\":[" MAIN ",\"ports\":[{\"containerPort\":8080}]}]}", &opts, 19090,
                18080, "8080 declared");
    check_ports("{\"containers\":[" MAIN ",\"ports\":[{\"containerPort\":8080}]}]}", &grpc_probe,
                19090, 18080, "8080 declared, gRPC probes");
    check_ports("{\"containers\":[" MAIN ",\"ports\":[{\"containerPort\":9090},"
                "{\"containerPort\":8080,\"name\":\"http\"}]}]}",
                &opts, 19090, 18080, "8080 and 9090 declared");
    check_ports("{\"containers\":[" MAIN "},{\"name\":\"side\",\"ports\":[{\"containerPort\":"
                "9090},{\"containerPort\":18080}]}]}",
                &opts, 19091, 18081, "9090 and the first REST alternative in a second container");
    check_ports("{\"containers\":[" MAIN "}],\"initContainers\":[{\"name\":\"side\","
                "\"restartPolicy\":\"Always\",\"ports\":[{\"containerPort\":8080}]}]}",
                &opts, 19090, 18080, "8080 in a sidecar");
    check_ports("{\"containers\":[" MAIN "}],\"initContainers\":[{\"name\":\"setup\","
                "\"ports\":[{\"containerPort\":8080}]}]}",
                &opts, 9090, 8080, "8080 in an init container that ends before sandboxd starts");
    struct sbx_inject_opts moved = opts;
    moved.grpc_port = 7000;
    moved.rest_port = 7001;
    check_ports("{\"containers\":[" MAIN ",\"ports\":[{\"containerPort\":8080}]}]}", &moved, 7000,
                7001, "configured ports, not declared");
    refused("{\"containers\":[" MAIN ",\"ports\":[{\"containerPort\":8080,\"name\":"
            "\"sandboxd-http\"}]}]}",
            "our port name in the main container");
    refused("{\"containers\":[" MAIN "},{\"name\":\"b\",\"ports\":[{\"containerPort\":1,"
            "\"name\":\"sandboxd-grpc\"}]}]}",
            "our port name in another container");
    refused("{\"containers\":[" MAIN "}],\"initContainers\":[{\"name\":\"i\",\"ports\":"
            "[{\"containerPort\":1,\"name\":\"sandboxd-http\"}]}]}",
            "our port name in an init container");
}

/* The command after "--" in the pod of a sandbox whose pod template has this annotation value
 * and main container (JSON), joined by spaces; "" when the pod is refused. */
static void entry_cmd(const char *annot, const char *main, char *out, size_t size)
{
    struct sbx_error err = {0};
    json_t *sb = sandbox_of("{\"containers\":[]}"), *pod = NULL, *e;
    json_t *pt = path(sb, "spec.podTemplate");
    size_t i, n = 0;
    bool after = false;

    json_array_append_new(path(pt, "spec.containers"), json_loads(main, 0, NULL));
    json_object_set_new(pt, "metadata",
                        json_pack("{s:{s:s}}", "annotations", SBX_ANNOT_ENTRYPOINT, annot));
    out[0] = '\0';
    if (sbx_sandbox_pod(sb, &opts, &pod, &err) == 0) {
        json_array_foreach(path(pod, "spec.containers.0.command"), i, e)
        {
            if (after)
                n +=
                    (size_t)snprintf(out + n, size - n, "%s%s", n ? " " : "", json_string_value(e));
            after = after || !strcmp(json_string_value(e), "--");
        }
        if (!after)
            snprintf(out, size, "(sandboxd alone)");
    }
    json_decref(pod);
    json_decref(sb);
}

/* A sandbox whose pod template has annotation SBX_ANNOT_E2B = annot and this spec. */
static json_t *e2b_sandbox(const char *annot, const char *spec)
{
    json_t *sb = sandbox_of(spec);

    json_object_set_new(path(sb, "spec.podTemplate"), "metadata",
                        json_pack("{s:{s:s}}", "annotations", SBX_ANNOT_E2B, annot));
    return sb;
}

/* The index of the string s in the list l, -1 when absent. */
static long index_of(json_t *l, const char *s)
{
    json_t *e;
    size_t i;

    json_array_foreach(l, i, e)
    {
        if (!strcmp(json_string_value(e) ?: "", s))
            return (long)i;
    }
    return -1;
}

static void e2b(void)
{
    struct sbx_error err = {0};
    json_t *sb = e2b_sandbox("true", "{\"containers\":[" MAIN "}]}"), *pod = NULL;

    ok(sbx_sandbox_pod(sb, &opts, &pod, &err) == 0, "e2b: pod built (%s)", err.msg);
    json_t *main = path(pod, "spec.containers.0"), *cmd = json_object_get(main, "command");
    long flag = index_of(cmd, "--e2b-port=49983"), dashes = index_of(cmd, "--");
    ok(flag > 0 && dashes > flag, "e2b: sandboxd told to serve it on 49983, before \"--\"");
    ok(named_port(main, SBX_E2B_PORT_NAME) == SBX_E2B_PORT, "e2b: the port named %s",
       SBX_E2B_PORT_NAME);
    json_t *svc = sbx_sandbox_service(sb, &opts);
    ok(json_integer_value(path(svc, "spec.ports.2.port")) == SBX_E2B_PORT &&
           !strcmp(str(svc, "spec.ports.2.name"), "e2b"),
       "e2b: the service carries it");
    json_decref(svc);
    json_decref(pod);
    json_decref(sb);

    sb = e2b_sandbox("false", "{\"containers\":[" MAIN "}]}");
    pod = NULL;
    ok(sbx_sandbox_pod(sb, &opts, &pod, &err) == 0, "e2b false: pod built (%s)", err.msg);
    main = path(pod, "spec.containers.0");
    ok(index_of(json_object_get(main, "command"), "--e2b-port=49983") < 0 &&
           named_port(main, SBX_E2B_PORT_NAME) == 0,
       "e2b false: not served");
    svc = sbx_sandbox_service(sb, &opts);
    ok(json_array_size(path(svc, "spec.ports")) == 2, "e2b false: not in the service");
    json_decref(svc);
    json_decref(pod);
    json_decref(sb);

    static const struct {
        const char *annot, *spec, *says, *what;
    } bad[] = {
        {"yes", "{\"containers\":[" MAIN "}]}", "\"true\" or \"false\"", "a value not a bool"},
        {"true", "{\"containers\":[" MAIN ",\"ports\":[{\"containerPort\":49983}]}]}",
         "port 49983 is declared", "49983 declared by the app"},
        {"false",
         "{\"containers\":[" MAIN ",\"ports\":[{\"containerPort\":1,\"name\":"
         "\"sandboxd-e2b\"}]}]}",
         "sandboxd's", "our port name taken, even unasked"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sb = e2b_sandbox(bad[i].annot, bad[i].spec);
        pod = NULL;
        err = (struct sbx_error){0};
        ok(sbx_sandbox_pod(sb, &opts, &pod, &err) == -EINVAL && strstr(err.msg, bad[i].says),
           "e2b refused: %s (%s)", bad[i].what, err.msg);
        json_decref(pod);
        json_decref(sb);
    }
}

static void entrypoint(void)
{
    char cmd[256];

    entry_cmd("[\"/init\", \"-x\"]", "{\"name\":\"m\",\"image\":\"i\",\"args\":[\"a\"]}", cmd,
              sizeof(cmd));
    ok(!strcmp(cmd, "/init -x a"), "no command: the annotation's entrypoint, then args (%s)", cmd);
    entry_cmd("[\"/init\"]", "{\"name\":\"m\",\"image\":\"i\",\"command\":[],\"args\":[\"a\"]}",
              cmd, sizeof(cmd));
    ok(!strcmp(cmd, "/init a"), "an empty command is none (%s)", cmd);
    entry_cmd("[\"/init\"]", "{\"name\":\"m\",\"image\":\"i\",\"command\":[\"run\"]}", cmd,
              sizeof(cmd));
    ok(!strcmp(cmd, "run"), "a command wins over the annotation, as over ENTRYPOINT (%s)", cmd);
    entry_cmd("[\"/init\", 2]", "{\"name\":\"m\",\"image\":\"i\"}", cmd, sizeof(cmd));
    ok(!strcmp(cmd, ""), "not a list of strings: refused");
    entry_cmd("[]", "{\"name\":\"m\",\"image\":\"i\"}", cmd, sizeof(cmd));
    ok(!strcmp(cmd, ""), "an empty list: refused");
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
    ports();
    entrypoint();
    e2b();
    return done_testing();
}
