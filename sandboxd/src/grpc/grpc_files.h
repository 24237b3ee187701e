/* sandboxd.v1.Files on the gRPC adapter: directory watches (Watch, a server stream over the
 * core's fswatch). */
#pragma once

#include "error.h"
#include "fswatch.h"
#include "grpc_server.h"

struct sbx_files_service {
    struct sbx_fswatches *watches;
};

int sbx_grpc_files_register(struct sbx_grpc *srv, struct sbx_files_service *svc,
                            struct sbx_error *err);
