/* Launching: a request's command, environment and working directory, whatever the wire it came
 * by, checked and turned into what the process table starts (argv, envp, the working
 * directory's fd). */
#pragma once

#include <stddef.h>

#include "error.h"
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
