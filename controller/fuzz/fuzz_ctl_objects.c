/* libFuzzer target for the objects the controller reads from the API server and what it builds
 * from them: a Sandbox into its Pod, token Secret and Service (sbx_sandbox_pod, ...); a
 * SandboxTemplate into a warm pool's Sandbox (sbx_sandbox_from_template), then its Pod; a
 * SandboxClaim and a template into the claim's own Sandbox (sbx_claim_sandbox), then its Pod; and
 * the readers every reconciler uses (conditions, controller references, readiness).
 *
 * Input: byte 0 chooses (low 2 bits, % 3) a Sandbox, a SandboxTemplate, or [claim, template], and
 * (bit 2) HTTP or gRPC probes, (bit 3) whether there is a default runtime class; the rest is the
 * JSON. An object without a key the informer accepts (sbx_object_key) is skipped, as the informer
 * skips it.
 *
 * Checked, for every pod built: the injector init container comes first and only once; the main
 * container runs sandboxd with the token file, then "--" and exactly the template's command (or,
 * without one, the entrypoint its annotation gives) and args; sandboxd's ports, volumes and mounts
 * are there exactly once and nothing of the template's clashes with them; both probes are objects;
 * the service account token is mounted only when the template says true; the runtime class is the
 * template's when it names one, else the default; name, namespace, owner and selector labels are
 * the sandbox's; each volume claim template is one volume of its name on its claim
 * "<template>-<sandbox>", whose PersistentVolumeClaim (sbx_sandbox_pvc) has that name, the
 * sandbox's label and owner and the template's spec. For the sandboxes built: the template label
 * its NetworkPolicy selects by, the owner, the claim's env and lifecycle, the volume claim
 * templates merged as sbx_claim_volumes says (a claim's only under a policy that takes them). Every
 * refusal carries -errno and a message. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "fuzz_check.h"
#include "object.h"
#include "podspec.h"
#include "reconcilers.h"
#include "watch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *str_at(json_t *j, size_t i)
{
    return json_string_value(json_array_get(j, i));
}

/* How many entries of list have field equal to value (a string). */
static size_t count_named(json_t *list, const char *field, const char *value)
{
    size_t i, n = 0;
    json_t *e;

    json_array_foreach(list, i, e)
    {
        const char *v = json_string_value(json_object_get(e, field));
        n += v && !strcmp(v, value);
    }
    return n;
}

static size_t count_port(json_t *ports, json_int_t port)
{
    size_t i, n = 0;
    json_t *e;

    json_array_foreach(ports, i, e) n +=
        json_integer_value(json_object_get(e, "containerPort")) == port;
    return n;
}

static void check_refusal(int r, const struct sbx_error *err, const char *what)
{
    /* -EPERM: a claim's env or volumes the template does not allow (envVarsInjectionPolicy,
     * volumeClaimTemplatesPolicy). */
    CHECK((r == -EINVAL || r == -ENOMEM || r == -EPERM) && err->code == -r && err->msg[0],
          "%s: %d '%s'", what, r, err->msg);
}

/* The flags before "--" in cmd from index 2: sandboxd's ports where they are not its defaults. */
static size_t check_port_flags(json_t *cmd, const struct sbx_ports *ports)
{
    char want[3][32];
    size_t n = 0;

    if (ports->grpc != SBX_SANDBOXD_GRPC_PORT)
        snprintf(want[n++], sizeof(want[0]), "--grpc-port=%d", ports->grpc);
    if (ports->rest != SBX_SANDBOXD_REST_PORT)
        snprintf(want[n++], sizeof(want[0]), "--rest-port=%d", ports->rest);
    if (ports->e2b)
        snprintf(want[n++], sizeof(want[0]), "--e2b-port=%d", ports->e2b);
    for (size_t i = 0; i < n; i++)
        CHECK(!strcmp(str_at(cmd, 2 + i) ?: "", want[i]), "port flag %zu is not %s", i, want[i]);
    return n;
}

/* entry: the entrypoint the pod template's annotation gives (NULL: none); it stands for a
 * missing or empty command. */
static void check_main(json_t *main, json_t *orig, const struct sbx_ports *pp, json_t *entry)
{
    json_t *cmd = json_object_get(main, "command");
    json_t *ucmd = json_object_get(orig, "command"), *uargs = json_object_get(orig, "args");
    if (json_array_size(ucmd) == 0 && entry)
        ucmd = entry;
    size_t nu = json_array_size(ucmd) + json_array_size(uargs);

    CHECK(json_array_size(cmd) >= 2 && !strcmp(str_at(cmd, 0) ?: "", SBX_BIN_DIR "/sandboxd") &&
              !strcmp(str_at(cmd, 1) ?: "", "--token-file=" SBX_TOKEN_DIR "/" SBX_TOKEN_KEY),
          "the main container does not run sandboxd");
    size_t nf = check_port_flags(cmd, pp), k = 2 + nf + 1;
    CHECK(nu == 0 ? json_array_size(cmd) == 2 + nf
                  : json_array_size(cmd) == k + nu && !strcmp(str_at(cmd, k - 1) ?: "", "--"),
          "command of %zu for %zu of the template's", json_array_size(cmd), nu);
    for (int pass = 0; pass < 2; pass++) {
        json_t *from = pass ? uargs : ucmd, *e;
        size_t i;
        json_array_foreach(from, i, e) CHECK(json_equal(e, json_array_get(cmd, k++)),
                                             "the template's command changed at %zu", k - 1);
    }
    CHECK(!json_object_get(main, "args"), "args left beside the command");
    json_t *ports = json_object_get(main, "ports"), *mounts = json_object_get(main, "volumeMounts");
    CHECK(count_named(ports, "name", SBX_GRPC_PORT_NAME) == 1 &&
              count_named(ports, "name", SBX_REST_PORT_NAME) == 1 &&
              count_port(ports, pp->grpc) == 1 && count_port(ports, pp->rest) == 1 &&
              count_named(ports, "name", SBX_E2B_PORT_NAME) == (pp->e2b ? 1 : 0) &&
              (!pp->e2b || count_port(ports, pp->e2b) == 1),
          "sandboxd's ports");
    CHECK(count_named(mounts, "mountPath", SBX_BIN_DIR) == 1 &&
              count_named(mounts, "mountPath", SBX_TOKEN_DIR) == 1 &&
              count_named(mounts, "name", SBX_BIN_VOLUME) == 1 &&
              count_named(mounts, "name", SBX_TOKEN_VOLUME) == 1,
          "sandboxd's mounts");
    CHECK(json_is_object(json_object_get(main, "readinessProbe")) &&
              json_is_object(json_object_get(main, "livenessProbe")),
          "a probe is missing");
}

/* Each volume claim template of sb: one volume of its name in the pod, on its claim, and the
 * claim itself named so, labelled and owned as the sandbox's, with the template's spec. */
static void check_claims(json_t *sb, json_t *vols)
{
    json_t *vcts = json_object_get(json_object_get(sb, "spec"), "volumeClaimTemplates"), *t, *v;
    const char *name = sbx_meta_str(sb, "name");
    char pvc[300], hash[9];
    size_t i, j;

    sbx_name_hash(name, hash);
    json_array_foreach(vcts, i, t)
    {
        const char *tn = json_string_value(json_object_get(json_object_get(t, "metadata"), "name"));
        CHECK(tn && *tn && sbx_pvc_name(tn, name, pvc, sizeof(pvc)), "claim template name");
        CHECK(count_named(vols, "name", tn) == 1, "volume %s not there once", tn);
        json_array_foreach(vols, j, v)
        {
            const char *vn = json_string_value(json_object_get(v, "name"));
            if (vn && !strcmp(vn, tn))
                CHECK(!strcmp(json_string_value(json_object_get(
                                  json_object_get(v, "persistentVolumeClaim"), "claimName"))
                                  ?: "",
                              pvc),
                      "volume %s is not on claim %s", tn, pvc);
        }
        struct sbx_error err = {0};
        json_t *claim = NULL;
        int r = sbx_sandbox_pvc(sb, t, &claim, &err);
        if (r < 0) {
            check_refusal(r, &err, "claim");
            CHECK(!json_is_object(json_object_get(t, "spec")), "claim refused: %s", err.msg);
            continue;
        }
        json_t *md = json_object_get(claim, "metadata");
        json_t *owner = sbx_owner_ref(sb);
        CHECK(!strcmp(sbx_meta_str(claim, "name") ?: "", pvc) &&
                  !strcmp(json_string_value(
                              json_object_get(json_object_get(md, "labels"), SBX_LABEL_HASH))
                              ?: "",
                          hash) &&
                  json_array_size(json_object_get(md, "ownerReferences")) == 1 &&
                  json_equal(json_array_get(json_object_get(md, "ownerReferences"), 0), owner) &&
                  json_equal(json_object_get(claim, "spec"), json_object_get(t, "spec")),
              "claim %s", pvc);
        json_decref(owner);
        json_decref(claim);
    }
}

/* The pod of sandbox sb, built with o; checked against sb's template. */
static void check_pod(json_t *sb, const struct sbx_inject_opts *o)
{
    json_t *tspec =
        json_object_get(json_object_get(json_object_get(sb, "spec"), "podTemplate"), "spec");
    json_t *pod = NULL, *v;
    struct sbx_error err = {0};
    char hash[9], secret[300];
    const char *name = sbx_meta_str(sb, "name"), *ns = sbx_meta_str(sb, "namespace");
    int r = sbx_sandbox_pod(sb, o, &pod, &err);
    json_t *entry = NULL;
    struct sbx_error eerr = {0};
    int er = sbx_pod_entrypoint(
        json_object_get(json_object_get(json_object_get(sb, "spec"), "podTemplate"), "metadata"),
        &entry, &eerr);

    if (r < 0) {
        check_refusal(r, &err, "pod");
        CHECK(r == -EINVAL, "pod: %s", err.msg);
        json_decref(entry);
        return;
    }
    CHECK(er == 0, "a pod built with a bad entrypoint annotation: %s", eerr.msg);
    json_t *spec = json_object_get(pod, "spec"), *md = json_object_get(pod, "metadata");
    sbx_name_hash(name, hash);
    const char *pns = json_string_value(json_object_get(md, "namespace"));
    CHECK(!strcmp(json_string_value(json_object_get(md, "name")) ?: "", name) &&
              (ns ? pns && !strcmp(pns, ns) : !pns),
          "pod name or namespace");
    v = json_object_get(json_object_get(md, "labels"), SBX_LABEL_HASH);
    CHECK(!strcmp(json_string_value(v) ?: "", hash), "selector label");
    json_t *want_owner = sbx_owner_ref(sb);
    CHECK(json_array_size(json_object_get(md, "ownerReferences")) == 1 &&
              json_equal(json_array_get(json_object_get(md, "ownerReferences"), 0), want_owner),
          "owner");
    json_decref(want_owner);
    json_t *inits = json_object_get(spec, "initContainers");
    json_t *init = json_array_get(inits, 0);
    CHECK(!strcmp(json_string_value(json_object_get(init, "name")) ?: "", SBX_INJECTOR_NAME) &&
              count_named(inits, "name", SBX_INJECTOR_NAME) == 1 &&
              !strcmp(json_string_value(json_object_get(init, "image")) ?: "", o->image) &&
              json_array_size(json_object_get(init, "args")) == 1 &&
              !strcmp(str_at(json_object_get(init, "args"), 0) ?: "", SBX_BIN_DIR),
          "the injector is not the first init container");
    struct sbx_ports pp;
    CHECK(sbx_pod_ports(tspec,
                        json_object_get(json_object_get(json_object_get(sb, "spec"), "podTemplate"),
                                        "metadata"),
                        o, &pp, &err) == 0,
          "ports of a pod that was built: %s", err.msg);
    CHECK((pp.grpc == o->grpc_port && pp.rest == o->rest_port) ||
              (pp.grpc >= SBX_ALT_GRPC_PORT &&
               pp.rest == pp.grpc - SBX_ALT_GRPC_PORT + SBX_ALT_REST_PORT),
          "ports %d and %d from nowhere", pp.grpc, pp.rest);
    check_main(json_array_get(json_object_get(spec, "containers"), 0),
               json_array_get(json_object_get(tspec, "containers"), 0), &pp, entry);
    json_decref(entry);
    json_t *vols = json_object_get(spec, "volumes"), *vol;
    size_t i;
    CHECK(count_named(vols, "name", SBX_BIN_VOLUME) == 1 &&
              count_named(vols, "name", SBX_TOKEN_VOLUME) == 1,
          "sandboxd's volumes");
    check_claims(sb, vols);
    CHECK(sbx_token_secret_name(name, secret, sizeof(secret)), "secret name");
    json_array_foreach(vols, i, vol)
    {
        const char *vn = json_string_value(json_object_get(vol, "name"));
        if (vn && !strcmp(vn, SBX_TOKEN_VOLUME))
            CHECK(!strcmp(json_string_value(
                              json_object_get(json_object_get(vol, "secret"), "secretName"))
                              ?: "",
                          secret),
                  "token volume of another secret");
    }
    v = json_object_get(spec, "automountServiceAccountToken");
    CHECK(json_is_boolean(v) && json_is_true(v) == json_is_true(json_object_get(
                                                       tspec, "automountServiceAccountToken")),
          "service account token mounted without asking");
    const char *trc = json_string_value(json_object_get(tspec, "runtimeClassName"));
    const char *rc = json_string_value(json_object_get(spec, "runtimeClassName"));
    if (trc && *trc)
        CHECK(rc && !strcmp(rc, trc), "the template's runtime class replaced");
    else if (o->runtime_class)
        CHECK(rc && !strcmp(rc, o->runtime_class), "no default runtime class");
    else
        CHECK(!json_object_get(spec, "runtimeClassName"), "a runtime class from nowhere");

    json_t *sec = sbx_sandbox_secret(sb, "token"), *svc = sbx_sandbox_service(sb, o);
    CHECK(sec && svc, "secret or service not built");
    CHECK(!strcmp(sbx_meta_str(sec, "name") ?: "", secret), "secret name");
    v = json_object_get(json_object_get(json_object_get(svc, "spec"), "selector"), SBX_LABEL_HASH);
    CHECK(!strcmp(json_string_value(v) ?: "", hash), "service selector");
    json_decref(sec);
    json_decref(svc);
    json_decref(pod);
}

static void read_all(json_t *obj)
{
    json_t *ref = sbx_controller_ref(obj);

    CHECK(!ref || json_is_true(json_object_get(ref, "controller")), "controller ref");
    (void)sbx_controlled_by(obj, "Sandbox", NULL);
    (void)sbx_controlled_by(obj, "SandboxClaim", sbx_meta_str(obj, "uid"));
    bool ready = sbx_is_ready(obj);
    json_t *c = sbx_condition(obj, "Ready");
    CHECK(!ready || !strcmp(json_string_value(json_object_get(c, "status")) ?: "", "True"),
          "ready without a True condition");
}

static bool keyed(json_t *obj)
{
    char k[SBX_KEY_MAX];

    return json_is_object(obj) && sbx_object_key(obj, k, sizeof(k));
}

static void template_sandbox(json_t *tmpl, const struct sbx_inject_opts *o)
{
    struct sbx_error err = {0};
    json_t *sb = NULL, *labels = json_pack("{s:s}", SBX_LABEL_POOL, "12345678"), *owner;
    char hash[9];
    int r;

    owner = json_pack("{s:s, s:s, s:s, s:b}", "kind", "SandboxWarmPool", "name", "pool", "uid",
                      "u-1", "controller", 1);
    r = sbx_sandbox_from_template(tmpl, "ns", "pool-abcde", owner, labels, &sb, &err);
    if (r < 0) {
        check_refusal(r, &err, "sandbox from template");
        CHECK(!json_is_object(json_object_get(json_object_get(tmpl, "spec"), "podTemplate")),
              "template refused: %s", err.msg);
    } else {
        sbx_name_hash(sbx_meta_str(tmpl, "name"), hash);
        json_t *pl = json_object_get(
            json_object_get(json_object_get(json_object_get(sb, "spec"), "podTemplate"),
                            "metadata"),
            "labels");
        CHECK(!strcmp(json_string_value(json_object_get(pl, SBX_LABEL_TEMPLATE)) ?: "", hash),
              "template label");
        CHECK(sbx_controlled_by(sb, "SandboxWarmPool", "u-1"), "owner");
        json_t *svc = json_object_get(json_object_get(sb, "spec"), "service");
        CHECK(!svc || json_is_boolean(svc), "service not a boolean");
        check_pod(sb, o);
    }
    json_decref(sb);
    json_decref(labels);
}

/* The value the claim gives variable `name` in container cn: its last entry of that name for
 * that container. */
static const char *claim_value(json_t *cenv, const char *cn, const char *name)
{
    const char *v = NULL;
    json_t *e;
    size_t i;

    json_array_foreach(cenv, i, e)
    {
        const char *only = json_string_value(json_object_get(e, "containerName"));
        const char *n = json_string_value(json_object_get(e, "name"));
        if ((only && (!cn || strcmp(cn, only) != 0)) || !n || strcmp(n, name) != 0)
            continue;
        v = json_string_value(json_object_get(e, "value")) ?: "";
    }
    return v;
}

/* Every variable the claim sets for container ct is in its env, once, as {name, value} strings
 * with the claim's (last) value; a claim carries env only when the template's
 * envVarsInjectionPolicy is Allowed or Overrides. */
static void check_env(json_t *claim, json_t *tmpl, json_t *ct)
{
    json_t *env = json_object_get(ct, "env"), *e, *f;
    json_t *cenv = json_object_get(json_object_get(claim, "spec"), "env");
    const char *cn = json_string_value(json_object_get(ct, "name"));
    const char *policy =
        json_string_value(json_object_get(json_object_get(tmpl, "spec"), "envVarsInjectionPolicy"));
    size_t i, j;

    if (json_array_size(cenv))
        CHECK(policy && (!strcmp(policy, "Allowed") || !strcmp(policy, "Overrides")),
              "env taken under policy %s", policy ? policy : "(none)");
    json_array_foreach(cenv, i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name")) ?: "";
        const char *want = claim_value(cenv, cn, name);
        size_t seen = 0;
        if (!want)
            continue; /* not for this container */
        json_array_foreach(env, j, f)
        {
            const char *n = json_string_value(json_object_get(f, "name"));
            if (!n || strcmp(n, name) != 0)
                continue;
            seen++;
            CHECK(json_object_size(f) == 2 &&
                      !strcmp(json_string_value(json_object_get(f, "value")) ?: "\x01", want),
                  "env %s is not the claim's {name, value}", name);
        }
        CHECK(seen == 1, "env %s set %zu times", name, seen);
    }
}

static void claim_sandbox(json_t *claim, json_t *tmpl, const struct sbx_inject_opts *o)
{
    struct sbx_error err = {0};
    json_t *sb = NULL, *ct;
    char hash[9];
    size_t i;
    int r = sbx_claim_sandbox(claim, tmpl, &sb, &err);

    if (r < 0) {
        check_refusal(r, &err, "claim sandbox");
        return;
    }
    CHECK(sbx_controlled_by(sb, "SandboxClaim", sbx_meta_str(claim, "uid")), "owner");
    CHECK(!strcmp(sbx_meta_str(sb, "name"), sbx_meta_str(claim, "name")), "name");
    json_t *spec = json_object_get(sb, "spec");
    json_t *pt = json_object_get(spec, "podTemplate");
    sbx_name_hash(sbx_meta_str(tmpl, "name"), hash);
    CHECK(
        !strcmp(json_string_value(json_object_get(
                    json_object_get(json_object_get(pt, "metadata"), "labels"), SBX_LABEL_TEMPLATE))
                    ?: "",
                hash),
        "the claim moved its pod out of the template's network policy");
    const char *policy = json_string_value(json_object_get(spec, "shutdownPolicy"));
    CHECK(!json_object_get(spec, "shutdownPolicy") ||
              (policy && (!strcmp(policy, "Delete") || !strcmp(policy, "Retain")) &&
               json_is_string(json_object_get(spec, "shutdownTime"))),
          "shutdownPolicy");
    json_array_foreach(json_object_get(json_object_get(pt, "spec"), "containers"), i, ct)
        check_env(claim, tmpl, ct);
    json_t *vcts = NULL;
    CHECK(sbx_claim_volumes(claim, tmpl, &vcts, &err) == 0, "volumes of a sandbox built: %s",
          err.msg);
    CHECK(json_array_size(vcts) == 0
              ? !json_object_get(spec, "volumeClaimTemplates")
              : json_equal(vcts, json_object_get(spec, "volumeClaimTemplates")),
          "the sandbox's volume claim templates are not the merged ones");
    const char *vp = json_string_value(
        json_object_get(json_object_get(tmpl, "spec"), "volumeClaimTemplatesPolicy"));
    if (json_array_size(json_object_get(json_object_get(claim, "spec"), "volumeClaimTemplates")))
        CHECK(vp && (!strcmp(vp, "Allowed") || !strcmp(vp, "Overrides")),
              "volumes taken under policy %s", vp ? vp : "(none)");
    json_decref(vcts);
    check_pod(sb, o);
    json_decref(sb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbx_inject_opts o = {.image = "injector:1", .grpc_port = 9090, .rest_port = 8080};
    json_t *j;

    if (size < 1 || size > 256 * 1024)
        return 0;
    o.probe = data[0] & 4 ? SBX_PROBE_GRPC : SBX_PROBE_HTTP;
    o.runtime_class = data[0] & 8 ? "gvisor" : NULL;
    j = json_loadb((const char *)data + 1, size - 1, 0, NULL);
    switch ((data[0] & 3) % 3) {
    case 0:
        if (keyed(j)) {
            read_all(j);
            check_pod(j, &o);
        }
        break;
    case 1:
        if (keyed(j)) {
            read_all(j);
            template_sandbox(j, &o);
        }
        break;
    case 2:
        if (keyed(json_array_get(j, 0)) && keyed(json_array_get(j, 1))) {
            read_all(json_array_get(j, 0));
            claim_sandbox(json_array_get(j, 0), json_array_get(j, 1), &o);
        }
        break;
    }
    json_decref(j);
    return 0;
}
