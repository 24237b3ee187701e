/* What the HTTP adapter's files share: the server's state, one request's state and the context
 * of one call of the access handler, and the route type. Types only: the helpers are in
 * http_request.h, the table in http_routes.h. */
#pragma once

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "error.h"
#include "files.h"
#include "http_server.h"

struct sbx_multipart;
struct sbx_tar_unpack;

struct sbx_gate;
struct sbx_h2c;
struct sbx_ws_set;

struct sbx_http {
    struct MHD_Daemon *mhd;
    struct sbx_gate *gate; /* accepts for the server; NULL with opts.external */
    struct sbx_h2c *h2c;   /* with opts.h2c: the HTTP/2 front the gate hands h2c to */
    struct sbx_ws_set *ws; /* upgraded connections; NULL without opts.jobs */
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
    struct sbx_multipart *mp; /* a multipart/form-data body's parser */
    struct sbx_error err;
    uint64_t received;
    /* an upgrade's state until the socket is handed over; upgrade_drop frees it if never */
    void *upgrade_data;
    void (*upgrade_drop)(void *data);
    /* a route's own state for the request (another port's call), dropped when the request
     * ends, answered or cut off; NULL when none */
    void *state;
    void (*state_drop)(void *state);
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
    ROUTE_UPGRADE, /* the token, also as ?token= (a browser's WebSocket sets no header) */
    ROUTE_PAGE,    /* anyone, as ROUTE_OPEN, but no probe: no reserved connection */
};

struct route {
    const char *prefix;  /* matched as a prefix when it ends with '/', else exactly */
    const char *methods; /* space-separated, e.g. "GET HEAD PUT DELETE" */
    route_fn fn;
    enum route_access access;
};
