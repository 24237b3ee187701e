/* The controller's queue keys, "kind:ns/name", and its table of reconcilers: what a kind
 * registers decides the queue its keys go on; a kind is registered once, before the start. */
#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "controller.h"
#include "log.h"
#include "tap.h"

static int nothing(struct sbx_ctrl *c, const char *key, struct sbx_error *err)
{
    (void)c;
    (void)key;
    (void)err;
    return 0;
}

static void keys(void)
{
    char buf[64];

    ok(sbx_queue_key(buf, sizeof(buf), "claim", "ns", "c") && !strcmp(buf, "claim:ns/c"),
       "queue key");
    ok(sbx_queue_key(buf, sizeof(buf), "node", NULL, "n") && !strcmp(buf, "node:/n"),
       "a cluster-scoped object's key");
    ok(!sbx_queue_key(buf, 8, "claim", "ns", "c"), "queue key too long");
}

static void table(struct sbx_kube *kube)
{
    struct sbx_ctrl_opts opts = {.workers = 1, .claim_workers = 1};
    struct sbx_ctrl *c = NULL;
    struct sbx_error err = {0};
    char kinds[SBX_CTRL_KINDS_MAX][8];
    int r = 0;

    ok(sbx_ctrl_new(kube, &opts, &c, &err) == 0, "controller made");
    ok(sbx_ctrl_register(c, &(struct sbx_reconciler){.kind = "a", .reconcile = nothing}, &err) == 0,
       "kind a registered");
    ok(sbx_ctrl_register(
           c, &(struct sbx_reconciler){.kind = "ab", .reconcile = nothing, .claim_queue = true},
           &err) == 0,
       "kind ab registered, on the claim queue");
    ok(sbx_ctrl_register(c, &(struct sbx_reconciler){.kind = "a", .reconcile = nothing}, &err) ==
               -EEXIST &&
           strstr(err.msg, "\"a\""),
       "a kind registered twice refused: %s", err.msg);

    sbx_ctrl_enqueue(c, "a:ns/x", 0);
    ok(sbx_wq_len(c->queue) == 1 && sbx_wq_len(c->claim_queue) == 0, "a's key on the queue");
    sbx_ctrl_enqueue(c, "ab:ns/x", 0);
    ok(sbx_wq_len(c->claim_queue) == 1, "ab's key on the claim queue");
    sbx_ctrl_enqueue(c, "abc:ns/x", 0);
    sbx_ctrl_enqueue(c, "nokind", 0);
    ok(sbx_wq_len(c->queue) == 3 && sbx_wq_len(c->claim_queue) == 1,
       "a kind nobody registered (nor a prefix of one) goes on the queue");

    for (int i = 2; i < SBX_CTRL_KINDS_MAX && r == 0; i++) {
        snprintf(kinds[i], sizeof(kinds[i]), "k%d", i);
        r = sbx_ctrl_register(c, &(struct sbx_reconciler){.kind = kinds[i], .reconcile = nothing},
                              &err);
    }
    ok(r == 0 && sbx_ctrl_register(c, &(struct sbx_reconciler){.kind = "z", .reconcile = nothing},
                                   &err) == -ENOSPC,
       "a full table refuses: %s", err.msg);

    /* Started, against an address that refuses: the informers retry (quietly) until the free. */
    sbx_log_max_level = SBX_LOG_ERROR;
    ok(sbx_ctrl_start(c, &err) == 0, "started");
    ok(sbx_ctrl_register(c, &(struct sbx_reconciler){.kind = "late", .reconcile = nothing}, &err) ==
           -EBUSY,
       "a kind registered after the start refused: %s", err.msg);
    sbx_ctrl_free(c);
}

int main(void)
{
    struct sbx_kube_config cfg = {.server = strdup("https://127.0.0.1:1")};
    struct sbx_kube_opts kopts = {.timeout_ms = 100};
    struct sbx_kube *kube = NULL;
    struct sbx_error err = {0};

    keys();
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (ok(sbx_kube_new(&cfg, &kopts, &kube, &err) == 0, "kube client"))
        table(kube);
    sbx_kube_free(kube);
    curl_global_cleanup();
    return done_testing();
}
