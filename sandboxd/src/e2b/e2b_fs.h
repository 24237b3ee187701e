/* The E2B port's file side: filesystem.Filesystem (e2b_fs.c) and GET/POST /files
 * (e2b_files.c), on the sandbox's absolute paths with the permissions of the user a request
 * names (core/userfs.h). Their state, a root of "/" and the directory watches on it, is made
 * once for the process, before the E2B server starts, and freed after it stopped: there is one
 * E2B port. */
#pragma once

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

#include "cred.h"
#include "e2b_rpc.h"
#include "error.h"
#include "fswatch.h"
#include "path.h"

struct hctx;
struct sbx_loop;

struct sbx_e2b_fs_opts {
    size_t max_watches;    /* WatchDir streams and polling watchers at once */
    size_t max_dirs;       /* inotify watches (directories) of all of them */
    size_t queue_events;   /* events a watch keeps for its reader */
    uint64_t keepalive_ms; /* a waiting WatchDir stream is looked at this often */
    uint64_t max_upload;   /* bytes of one POST /files body (0: no bound) */
};

/* Makes the state; its watches' timer runs on loop. 0 or -errno. */
int sbx_e2b_fs_setup(struct sbx_loop *loop, const struct sbx_e2b_fs_opts *o, struct sbx_error *err);
/* The daemon stops: every watch ends (streams fail unavailable). On the loop thread. */
void sbx_e2b_fs_shutdown(void);
/* After the E2B server stopped; on the loop thread. Accepts a state never made. */
void sbx_e2b_fs_teardown(void);

extern const struct sbx_e2b_method sbx_e2b_fs_methods[];
extern const size_t sbx_e2b_fs_n_methods;

/* GET /files (download) and POST /files (upload): the route of the E2B server's table, e.g.
 * {"/files", "GET HEAD POST", sbx_e2b_files_route, ROUTE_OPEN}. */
enum MHD_Result sbx_e2b_files_route(struct hctx *c);

/* Shared by both files. */
const struct sbx_root *sbx_e2b_fs_slash(void);
uint64_t sbx_e2b_fs_max_upload(void);
void sbx_e2b_cred_of(const struct sbx_e2b_user *u, struct sbx_cred *ret);
/* A request's path as envd resolves it for u: "" is the default workdir (/init's) when set,
 * else u's home; "~" and relative paths from the home (userfs.h). *ret is malloc'ed. */
int sbx_e2b_fs_resolve(struct sbx_e2b_server *s, const struct sbx_e2b_user *u, const char *path,
                       char **ret, struct sbx_error *err);
