/* The kinds the controller reconciles, a file each: Sandboxes (sandbox.c), warm pools (pool.c),
 * claims (claim.c) and templates (template.c). main.c registers their reconcilers with
 * sbx_ctrl_register; the pure functions below are what they share with each other and with the
 * fuzz target. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "controller.h"
#include "error.h"

extern const struct sbx_reconciler sbx_sandbox_reconciler;  /* "sandbox" */
extern const struct sbx_reconciler sbx_pool_reconciler;     /* "pool" */
extern const struct sbx_reconciler sbx_claim_reconciler;    /* "claim", on the claim queue */
extern const struct sbx_reconciler sbx_template_reconciler; /* "template" */

/* The whole Sandbox sb (cached copy), pod and volume claim templates included, at least as new
 * as sb, from the API server. Returns 0 with *ret NULL when it is gone or another object by now. */
int sbx_sandbox_fetch(struct sbx_ctrl *c, json_t *sb, const char *ns, json_t **ret,
                      struct sbx_error *err);

/* What sbx_sandbox_volumes found: the first of the sandbox's claims not Bound ("" when all are,
 * or it has none) and its phase. */
struct sbx_volumes {
    char unbound[300];
    char phase[32];
};

/* Brings the PersistentVolumeClaims of Sandbox sb's volume claim templates into being (see
 * volumes.c) and says which is not bound yet. -EINVAL when the templates cannot be made into
 * claims, -EEXIST when a claim of that name is not the sandbox's to take. */
int sbx_sandbox_volumes(struct sbx_ctrl *c, json_t *sb, const char *ns, struct sbx_volumes *out,
                        struct sbx_error *err);

/* The image config the Pod of Sandbox whole (as read from the API server) must be built with
 * (sbx_sandbox_pod_image), when its main container runs the image's own entrypoint and image
 * lookups are on (image.c). 0 with *ret NULL when none is needed; 1 with *ret (new) when known;
 * -EINPROGRESS while it is looked up (the sandbox is queued again when that ends); -EINVAL when
 * the image reference is not one; -EAGAIN with the reason the lookup failed (the sandbox is
 * queued again when it is retried); other < 0 when the pull secrets could not be read. */
int sbx_sandbox_image(struct sbx_ctrl *c, json_t *whole, const char *ns, json_t **ret,
                      struct sbx_error *err);

/* Whether the template's sandboxes get the default NetworkPolicy: networkPolicyManagement
 * Managed (or unset) and no spec.networkPolicy. */
bool sbx_template_default_policy(json_t *tmpl);

/* The Sandbox a SandboxTemplate makes: its pod template and service, with labels (borrowed) and
 * the controller reference owner (stolen, may be NULL: then -ENOMEM). -EINVAL when the template
 * has no pod template. Under the default NetworkPolicy, which lets no query reach cluster DNS, a
 * pod template without dnsPolicy gets public resolvers (dnsPolicy None), as the reference. */
int sbx_sandbox_from_template(json_t *tmpl, const char *ns, const char *name, json_t *owner,
                              json_t *labels, json_t **ret, struct sbx_error *err);

/* The Sandbox a SandboxClaim gets on a cold start, from its warm pool's template: named like the
 * claim, owned by it, its lifecycle (shutdownTime, shutdownPolicy Delete or Retain), pod labels
 * and annotations, and env ({name, value, containerName}, strings) applied as the template's
 * envVarsInjectionPolicy allows, and the volume claim templates of sbx_claim_volumes. -EPERM when
 * the env cannot be (malformed, not allowed, or naming a container the template lacks) or the
 * volumes cannot, -EINVAL when the template or the claim's other additions cannot be used. */
int sbx_claim_sandbox(json_t *claim, json_t *tmpl, json_t **ret, struct sbx_error *err);

/* The volume claim templates a claim's Sandbox gets: the template's, with the claim's merged in
 * as the template's volumeClaimTemplatesPolicy says (the reference's rules): Disallowed (the
 * default) takes none, Allowed adds those of new names, Overrides also replaces the template's
 * by name. *ret is a new list (empty when there are none). -EPERM with the reason when the
 * claim's cannot be taken or either list is malformed (names missing or twice). */
int sbx_claim_volumes(json_t *claim, json_t *tmpl, json_t **ret, struct sbx_error *err);
