/* What a Sandbox becomes: its Pod with sandboxd injected, its token Secret and its headless
 * Service, as JSON objects ready to POST. Pure functions of the Sandbox and the options: no API
 * calls, no clock. */
#pragma once

#include <jansson.h>
#include <stdint.h>

#include "api.h"
#include "error.h"

#define SBX_BIN_VOLUME    "sandboxd-bin"
#define SBX_BIN_DIR       "/.sandboxd"
#define SBX_TOKEN_VOLUME  "sandboxd-token"
#define SBX_TOKEN_DIR     "/var/run/sandboxd"
#define SBX_TOKEN_KEY     "token"
#define SBX_INJECTOR_NAME "sandboxd-injector"

/* The pod template annotation that gives the image's entrypoint (a JSON list of strings), for a
 * main container without a command: sandboxd then runs it with the container's args. */
#define SBX_ANNOT_ENTRYPOINT "sandboxd.dev/entrypoint"

/* The pod template annotation that asks for E2B's envd API (sandboxd --e2b-port): "true" serves it
 * on SBX_E2B_PORT, the port E2B's SDKs and proxy address a sandbox's envd on; "false" or none
 * does not. */
#define SBX_ANNOT_E2B     "sandboxd.dev/e2b"
#define SBX_E2B_PORT      49983
#define SBX_E2B_PORT_NAME "sandboxd-e2b"

/* sandboxd's own defaults for --grpc-port and --rest-port: the injected command names the ports
 * only when they differ. */
#define SBX_SANDBOXD_GRPC_PORT 9090
#define SBX_SANDBOXD_REST_PORT 8080

/* The names of sandboxd's ports on the main container; no container of a template may use them.
 * Clients find the ports by these names. */
#define SBX_GRPC_PORT_NAME "sandboxd-grpc"
#define SBX_REST_PORT_NAME "sandboxd-http"

/* Where sandboxd's ports go when a container of the pod declares a configured one: the first
 * pair (SBX_ALT_GRPC_PORT + k, SBX_ALT_REST_PORT + k), k = 0, 1, ..., that none declares. */
#define SBX_ALT_GRPC_PORT 19090
#define SBX_ALT_REST_PORT 18080

enum sbx_probe { SBX_PROBE_HTTP, SBX_PROBE_GRPC };

struct sbx_inject_opts {
    const char *image;         /* injector image: its entrypoint copies sandboxd to argv[1] */
    const char *runtime_class; /* used when the template names none; NULL for none */
    enum sbx_probe probe;
    int grpc_port, rest_port;
};

struct sbx_ports {
    int grpc, rest;
    int e2b; /* 0: not served */
};

/* sandboxd's ports in a pod of spec (a pod template's spec; tmeta its metadata): o->grpc_port and
 * o->rest_port when no container and no sidecar (an init container with restartPolicy Always)
 * declares either, else the alternative pair above; SBX_E2B_PORT when tmeta's SBX_ANNOT_E2B says
 * "true". Fails with -EINVAL when a container or init container names a port as one of ours
 * (SBX_GRPC_PORT_NAME, SBX_REST_PORT_NAME, SBX_E2B_PORT_NAME), when the annotation is neither
 * "true" nor "false", when E2B's port is asked for and a container declares it, or when no pair
 * is left. */
int sbx_pod_ports(json_t *spec, json_t *tmeta, const struct sbx_inject_opts *o,
                  struct sbx_ports *ret, struct sbx_error *err);

/* The entrypoint the pod template metadata tmeta's SBX_ANNOT_ENTRYPOINT annotation gives: *ret a
 * new list of strings, NULL when there is none. -EINVAL when it is not a non-empty JSON list of
 * strings. */
int sbx_pod_entrypoint(json_t *tmeta, json_t **ret, struct sbx_error *err);

/* The image whose entrypoint the pod of sandbox must be told, when the registry must be asked:
 * its main container (containers[0]) has no command, its pod template no SBX_ANNOT_ENTRYPOINT
 * annotation, and the image is named. NULL otherwise (borrowed from sandbox). */
const char *sbx_pod_image_to_resolve(json_t *sandbox);

/* The value of the SBX_LABEL_HASH label for a sandbox name (8 hex digits, FNV-1a). */
void sbx_name_hash(const char *name, char buf[9]);

/* The name of the token Secret of sandbox `name` into buf (NULL when it does not fit). */
char *sbx_token_secret_name(const char *name, char *buf, size_t size);

/* The name of the PersistentVolumeClaim that volume claim template `vct` makes for sandbox
 * `sandbox`: "<vct>-<sandbox>", as the reference names it. NULL when it does not fit buf. */
char *sbx_pvc_name(const char *vct, const char *sandbox, char *buf, size_t size);

/* Checks a Sandbox's spec.volumeClaimTemplates (absent or null is none): a list of objects,
 * each with a metadata.name of its own, none empty, none twice. -EINVAL naming the entry. */
int sbx_check_claim_templates(json_t *vcts, struct sbx_error *err);

/* The PersistentVolumeClaim of the sandbox's volume claim template vct: named by sbx_pvc_name,
 * the template's labels and annotations with SBX_LABEL_HASH on top, its spec, owned by the
 * sandbox (controller). -EINVAL naming the field when vct has no name or no spec object. */
int sbx_sandbox_pvc(json_t *sandbox, json_t *vct, json_t **ret, struct sbx_error *err);

/* An ownerReference (controller) to the sandbox. */
json_t *sbx_owner_ref(json_t *sandbox);

/* The Pod of sandbox. Each volume claim template becomes a volume of its name on its claim
 * (sbx_pvc_name), replacing a volume of the pod template with that name (as a StatefulSet's do).
 * Fails with -EINVAL and a message naming the field when the template cannot take the injection
 * (no containers, a volume or port name we need already taken, bad volume claim templates). */
int sbx_sandbox_pod(json_t *sandbox, const struct sbx_inject_opts *o, json_t **ret,
                    struct sbx_error *err);

/* sbx_sandbox_pod for a main container without a command whose image was looked up: image is
 * {"entrypoint": [..] or null, "cmd": [..] or null}, as sbx_registry_resolve answers. The
 * command after sandboxd's "--" is then what the container runtime would run: the entrypoint,
 * then the container's args when it has any, else the image's cmd. */
int sbx_sandbox_pod_image(json_t *sandbox, const struct sbx_inject_opts *o, json_t *image,
                          json_t **ret, struct sbx_error *err);

/* The token Secret: stringData.token = token. */
json_t *sbx_sandbox_secret(json_t *sandbox, const char *token);

/* The headless Service selecting the sandbox's Pod, with sandboxd's ports in it (the configured
 * ones when the template is refused: then there is no Pod to reach). */
json_t *sbx_sandbox_service(json_t *sandbox, const struct sbx_inject_opts *o);
