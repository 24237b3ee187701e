/* process.v1.ProcessService on the gRPC adapter: decodes requests, calls the process table,
 * maps errors, encodes replies. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "budget.h"
#include "error.h"
#include "grpc_launch.h"
#include "grpc_server.h"
#include "path.h"
#include "proc.h"

struct sbx_process_service {
    struct sbx_proctab *procs;
    const struct sbx_root *root;
    size_t max_output;                /* bytes kept per stream by Execute */
    struct sbx_budget *output_budget; /* what all captures hold at once; NULL: no bound */
    bool draining;                    /* set once shutdown began: new processes are refused */
};

struct Process__V1__ProcessConfig;

/* Builds what a request's ProcessConfig (NULL: none) asks for: checks it and fills l (release
 * it with sbx_launch_release, also on failure). */
int sbx_process_launch_from(const struct sbx_root *root, const struct Process__V1__ProcessConfig *c,
                            struct sbx_launch *l, struct sbx_error *err);

/* Registers the service's methods on the server. */
int sbx_grpc_process_register(struct sbx_grpc *srv, struct sbx_process_service *svc,
                              struct sbx_error *err);
