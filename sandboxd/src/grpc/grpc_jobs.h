/* sandboxd.v1.Processes on the gRPC adapter: detached processes (jobs), their output rings,
 * captured runs. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "grpc_server.h"
#include "jobs.h"
#include "path.h"

struct sbx_jobs_service {
    struct sbx_jobs *jobs;
    const struct sbx_root *root;
    size_t max_output;    /* ceiling of Run's output_limit_bytes */
    size_t chunk_size;    /* largest Output message of Attach */
    const bool *draining; /* set once shutdown began: new processes are refused */
};

int sbx_grpc_jobs_register(struct sbx_grpc *srv, struct sbx_jobs_service *svc,
                           struct sbx_error *err);
