/* What the E2B port's files share: the server's state, the Connect route, and the checks every
 * route makes (access token, user). */
#pragma once

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>

#include "e2b_server.h"
#include "http_internal.h"

struct sbx_e2b_server {
    struct sbx_http *http;
    struct sbx_e2b_opts o;
    unsigned live_calls;       /* calls whose request is not over (atomic) */
    pthread_mutex_t lock;      /* the fields below */
    struct sbx_auth *token;    /* set by /init when sandboxd has none */
    json_t *envs;              /* /init's envVars: an object of strings */
    char default_user[64];     /* /init's defaultUser; "" for the daemon's own */
    char default_workdir[512]; /* /init's defaultWorkdir; "" for the user's home */
};

/* The server of a request. */
struct sbx_e2b_server *sbx_e2b_of(struct hctx *c);

/* Whether the request may pass: no token set, or X-Access-Token carries it. Otherwise answers
 * 401 as envd does ({"code":401,"message":...}) and returns false with *ret set. */
bool sbx_e2b_authorized(struct hctx *c, enum MHD_Result *ret);

/* The user named by "Authorization: Basic base64(name:)", else the default one. 0, or -ENOENT
 * (unknown user) / -EINVAL (a malformed header) with the reason in msg. */
int sbx_e2b_user_of(struct hctx *c, struct sbx_e2b_user *u, char *msg, size_t len);
/* The user of that name ("" or NULL: the default one). */
int sbx_e2b_user_lookup(struct sbx_e2b_server *s, const char *name, struct sbx_e2b_user *u,
                        char *msg, size_t len);

/* A JSON body with status, as envd writes its plain errors ({"code":<status>,"message":...}). */
enum MHD_Result sbx_e2b_respond_plain_error(struct hctx *c, unsigned status, const char *msg);

/* The route of every Connect method: /<service>/<method>. */
enum MHD_Result sbx_e2b_connect_route(struct hctx *c);

/* The method of a path, from every service's table; NULL when none. */
const struct sbx_e2b_method *sbx_e2b_method_find(const char *path);

/* The process service (e2b_process.c). */
extern const struct sbx_e2b_method sbx_e2b_process_methods[];
extern const size_t sbx_e2b_process_n_methods;
