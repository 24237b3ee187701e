/* What the HTTP adapter's files share: one request's context, responses, routes. */
#pragma once

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "error.h"
#include "files.h"
#include "http_server.h"

struct sbx_tar_unpack;

struct sbx_http {
    struct MHD_Daemon *mhd;
    struct sbx_http_opts o;
    time_t started;
    bool draining;
    json_t *metadata; /* computed once at start: the env is ours and does not change */
};

/* Per-request state, in MHD's *req_cls; freed by the completion callback. */
struct hreq {
    const struct route *route;
    bool began; /* the handler ran once with the request complete or its first data */
    bool responded;
    struct MHD_Response *pending; /* answered before the body ended: queued once it has */
    unsigned pending_status;
    /* uploads */
    struct sbx_fs_writer *w;
    struct sbx_tar_unpack *tar;
    int tar_dirfd;
    struct MHD_PostProcessor *pp;
    bool saw_file_part;
    int upload_error; /* -errno of a failed write, answered at the end */
    struct sbx_error err;
    uint64_t received;
    /* small bodies (JSON) */
    char *body;
    size_t body_len;
};

/* One call of the access handler. */
struct hctx {
    struct sbx_http *h;
    struct MHD_Connection *conn;
    const char *method;
    const char *path; /* the URL remainder after the route's prefix, percent-decoded */
    const char *upload_data;
    size_t *upload_data_size;
    bool body_done; /* this call ends the request body (or there is none) */
    struct hreq *r;
};

typedef enum MHD_Result (*route_fn)(struct hctx *c);

/* Who may call a route when a token is set. */
enum route_access {
    ROUTE_AUTH,    /* the bearer token */
    ROUTE_OPEN,    /* anyone: probes send no credentials */
    ROUTE_METRICS, /* the token, unless metrics_open */
};

struct route {
    const char *prefix;  /* matched as a prefix when it ends with '/', else exactly */
    const char *methods; /* space-separated, e.g. "GET HEAD PUT DELETE" */
    route_fn fn;
    enum route_access access;
};

/* Responses; each queues and returns MHD's verdict. */
enum MHD_Result http_respond_json(struct hctx *c, unsigned status, json_t *body /* stolen */);
enum MHD_Result http_respond_error(struct hctx *c, unsigned status, const char *code,
                                   const char *msg);
/* The status, code and message of a core error (-errno + message). */
enum MHD_Result http_respond_errno(struct hctx *c, int r, const struct sbx_error *e);
enum MHD_Result http_respond_empty(struct hctx *c, unsigned status);
enum MHD_Result http_queue(struct hctx *c, unsigned status, struct MHD_Response *resp);

/* A query argument, or NULL. */
const char *http_arg(struct hctx *c, const char *name);
const char *http_header(struct hctx *c, const char *name);
/* Parses true/false like Go's strconv.ParseBool; -EINVAL otherwise. */
int http_parse_bool(const char *s, bool *ret);
/* RFC 3339 UTC with second precision. */
void http_format_time(time_t t, char buf[32]);

enum MHD_Result http_files(struct hctx *c);
enum MHD_Result http_stat(struct hctx *c);
enum MHD_Result http_dirs(struct hctx *c);
enum MHD_Result http_move(struct hctx *c);
enum MHD_Result http_health(struct hctx *c);
enum MHD_Result http_healthz(struct hctx *c);
enum MHD_Result http_readyz(struct hctx *c);
enum MHD_Result http_metadata(struct hctx *c);
enum MHD_Result http_metrics(struct hctx *c);

/* Frees what an upload holds, removing its temp file unless committed. */
void http_upload_release(struct hreq *r);
