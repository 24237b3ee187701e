/* What the gRPC process services share beyond the core's launch module: a request's
 * environment map read into a launch config, and start errors worded like the reference. */
#pragma once

#include <stddef.h>

#include "error.h"
#include "grpc_server.h"
#include "launch.h"

/* Fills c's environment from a protobuf-c map (entries with key and value). */
#define SBX_LAUNCH_ENV(c, entries, n)                                                              \
    do {                                                                                           \
        for (size_t i_ = 0; i_ < (n); i_++) {                                                      \
            (c)->keys[i_] = (entries)[i_]->key;                                                    \
            (c)->values[i_] = (entries)[i_]->value;                                                \
        }                                                                                          \
        (c)->n_env = (n);                                                                          \
    } while (0)

/* A failed start's status, and its message in msg, worded like the reference daemon. */
grpc_status_code sbx_launch_error_status(int r, const struct sbx_error *e, const char *what,
                                         char *msg, size_t size);

/* Answers a failed start with that status and message. */
void sbx_launch_reply_error(struct sbx_grpc_req *req, int r, const struct sbx_error *e,
                            const char *what);
