/* The E2B port: envd's API (what E2B's SDKs speak to a sandbox) on the REST server's machinery
 * (sandboxd/src/http: gate, head checks, thread pool) with a route table of its own: the
 * Connect services, GET /health, POST /init, GET /envs, and what other files add. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "e2b_rpc.h"
#include "error.h"

struct sbx_auth;
struct sbx_jobs;
struct sbx_loop;

struct sbx_e2b_opts {
    const char *host; /* NULL: every address */
    int port;
    unsigned idle_timeout_s, head_timeout_ms, threads, max_connections, max_per_peer;
    size_t max_message_bytes; /* a request's message, decoded or not */
    /* sandboxd's token: X-Access-Token must carry it (NULL: open until /init sets one).
     * Borrowed. */
    const struct sbx_auth *auth;
    struct sbx_loop *loop; /* keepalive and deadline timers */
    struct sbx_jobs *jobs; /* process.Process; NULL: unavailable */
    const bool *draining;  /* new processes are refused once it reads true */
};

/* Binds and serves; returns the bound port or -errno. */
int sbx_e2b_start(struct sbx_e2b_server **ret, const struct sbx_e2b_opts *o, struct sbx_error *err);
/* Stops serving (every call is cut) and frees. Accepts NULL. */
void sbx_e2b_stop(struct sbx_e2b_server *s);

const struct sbx_e2b_opts *sbx_e2b_server_opts(struct sbx_e2b_server *s);

/* The variables /init set, as "k=v" strings (malloc'ed, NULL-terminated, the caller frees with
 * sbx_e2b_envs_free); later processes get them before their request's own. */
char **sbx_e2b_server_envs(struct sbx_e2b_server *s);
void sbx_e2b_envs_free(char **envs);
