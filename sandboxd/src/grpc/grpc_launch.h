/* What the process services share: a request's command, environment and working directory
 * turned into what the process table starts, and start errors worded like the reference. */
#pragma once

#include <stddef.h>

#include "error.h"
#include "grpc_server.h"
#include "path.h"

/* A request's process description, whatever its message type. The arrays are the caller's;
 * the strings are the request's. */
struct sbx_launch_config {
    char **command;
    size_t n_command;
    const char **keys, **values; /* environment entries; a key repeated: the last one wins */
    size_t n_env;
    const char *cwd; /* relative to the root; NULL or empty: the root */
};

/* Fills c's environment from a protobuf-c map (entries with key and value). */
#define SBX_LAUNCH_ENV(c, entries, n)                                                              \
    do {                                                                                           \
        for (size_t i_ = 0; i_ < (n); i_++) {                                                      \
            (c)->keys[i_] = (entries)[i_]->key;                                                    \
            (c)->values[i_] = (entries)[i_]->value;                                                \
        }                                                                                          \
        (c)->n_env = (n);                                                                          \
    } while (0)

/* Allocates c->keys and c->values for n entries; release with sbx_launch_config_release. */
int sbx_launch_config_alloc(struct sbx_launch_config *c, size_t n, struct sbx_error *err);
void sbx_launch_config_release(struct sbx_launch_config *c);

struct sbx_launch {
    char **argv; /* borrowed strings of the request */
    char **envp; /* borrowed from environ, or owned "k=v" strings from n_daemon_env on */
    size_t n_daemon_env, n_env;
    int cwd_fd;
};

/* Checks c (UTF-8, a command, variable names neither empty nor holding '=') and builds argv,
 * the environment (the daemon's plus the request's, PWD set to the working directory) and the
 * working directory's fd. */
int sbx_launch_build(const struct sbx_root *root, const struct sbx_launch_config *c,
                     struct sbx_launch *l, struct sbx_error *err);
void sbx_launch_release(struct sbx_launch *l);

/* A failed start's status, and its message in msg, worded like the reference daemon. */
grpc_status_code sbx_launch_error_status(int r, const struct sbx_error *e, const char *what,
                                         char *msg, size_t size);

/* Answers a failed start with that status and message. */
void sbx_launch_reply_error(struct sbx_grpc_req *req, int r, const struct sbx_error *e,
                            const char *what);
