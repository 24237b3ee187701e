/* The controller: informers on what it owns, one work queue of Sandbox keys, a bounded pool of
 * workers reconciling them. */
#pragma once

#include <stdbool.h>

#include "error.h"
#include "informer.h"
#include "kube.h"
#include "podspec.h"
#include "workqueue.h"

struct sbx_ctrl_opts {
    const char *namespace; /* NULL: every namespace */
    int workers;
    const char *cluster_domain;
    struct sbx_inject_opts inject;
};

struct sbx_ctrl {
    struct sbx_kube *kube;
    struct sbx_ctrl_opts opts;
    struct sbx_informer *sandboxes, *pods, *services;
    struct sbx_wq *queue;
};

/* Starts informers and workers. kube stays owned by the caller and must outlive the controller. */
int sbx_ctrl_start(struct sbx_kube *kube, const struct sbx_ctrl_opts *opts, struct sbx_ctrl **ret,
                   struct sbx_error *err);

/* True once every informer has listed. */
bool sbx_ctrl_synced(struct sbx_ctrl *c);

/* Stops workers and informers, frees. Accepts NULL. */
void sbx_ctrl_free(struct sbx_ctrl *c);

/* Reconciles one Sandbox key ("ns/name"): called by the workers. */
int sbx_sandbox_reconcile(struct sbx_ctrl *c, const char *key, struct sbx_error *err);
