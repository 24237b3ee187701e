#define _GNU_SOURCE
#include "http_server.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "auth.h"
#include "cleanup.h"
#include "h2c.h"
#include "http_gate.h"
#include "http_head.h"
#include "http_internal.h"
#include "http_request.h"
#include "http_routes.h"
#include "http_ws.h"
#include "log.h"
#include "metrics.h"

extern char **environ;

/* What we keep per connection (libmicrohttpd's socket context). */
struct hconn {
    bool nul_in_url;            /* the request being read had %00 in its URL */
    bool bad_escape;            /* ... or a '%' not followed by two hex digits */
    struct sbx_gate_conn *gate; /* the gate's record of it */
};

/* Health probes get connections beyond --http-max-connections, up to this many more. */
#define PROBE_RESERVE 32

/* h2c streams open at once over all connections, each one a connection of the server's. */
#define H2C_MAX_STREAMS 512

static enum MHD_Result route(struct hctx *c, const char *url, const char *method);

struct auth_header {
    const char *value;
    size_t len;
    unsigned count;
};

static enum MHD_Result find_authorization(void *cls, enum MHD_ValueKind kind, const char *key,
                                          size_t key_size, const char *value, size_t value_size)
{
    struct auth_header *a = cls;

    (void)kind;
    if (key_size == 13 && strncasecmp(key, "Authorization", 13) == 0 && a->count++ == 0) {
        a->value = value;
        a->len = value_size;
    }
    return MHD_YES;
}

/* 401 unless the request carries the token (one Authorization header, "Bearer <token>"). The
 * token is never logged: only the verdict and the route are. */
static bool authenticate(struct hctx *c, const struct route *rt, enum MHD_Result *ret)
{
    struct auth_header a = {0};
    enum sbx_auth_verdict v;
    uint64_t suppressed = 0;
    char more[64] = "";
    struct MHD_Response *resp;

    if (!c->h->o.auth || (rt && (rt->access == ROUTE_OPEN || rt->access == ROUTE_PAGE)) ||
        (rt && rt->access == ROUTE_METRICS && c->h->o.metrics_open))
        return true;
    MHD_get_connection_values_n(c->conn, MHD_HEADER_KIND, find_authorization, &a);
    v = a.count > 1 ? SBX_AUTH_MALFORMED : sbx_auth_check(c->h->o.auth, a.value, a.len);
    if (v == SBX_AUTH_MISSING && rt && rt->access == ROUTE_UPGRADE) {
        /* The query parameter, on these routes alone; never logged (no URL is). */
        const char *token = sbx_http_arg(c, "token");
        v = sbx_auth_check_token(c->h->o.auth, token, token ? strlen(token) : 0);
    }
    if (v == SBX_AUTH_OK)
        return true;
    /* The route, not the URL: a client's bytes do not go into our log unescaped. */
    if (sbx_auth_log_allowed(c->h->o.auth, (uint64_t)time(NULL), &suppressed)) {
        if (suppressed)
            snprintf(more, sizeof(more), " (and %" PRIu64 " not logged before)", suppressed);
        log_info("http: unauthenticated request of %s: %s%s", rt ? rt->prefix : "an unknown route",
                 sbx_auth_verdict_message(v), more);
    }
    resp = sbx_http_json_response(
        json_pack("{s:s, s:s}", "code", "UNAUTHENTICATED", "message", sbx_auth_verdict_message(v)));
    if (resp)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                v == SBX_AUTH_WRONG || v == SBX_AUTH_MALFORMED
                                    ? "Bearer realm=\"sandboxd\", error=\"invalid_token\""
                                    : "Bearer realm=\"sandboxd\"");
    *ret = sbx_http_queue(c, 401, resp);
    return false;
}

/* A client that waits for "100 Continue" before it sends its body, and lacks the token, is
 * answered 401 at once: its body is never sent, and the connection is closed after the answer
 * (which a body that might follow needs anyway). Other refusals wait for the body's end. */
static enum MHD_Result refuse_before_continue(struct hctx *c, const char *url)
{
    const char *expect = sbx_http_header(c, MHD_HTTP_HEADER_EXPECT);
    const struct route *rt;
    const char *rest;
    enum MHD_Result ret;

    if (!c->h->o.auth || !expect || strcasecmp(expect, "100-continue") != 0)
        return MHD_YES;
    rt = sbx_http_route_find(c->h, url, &rest);
    c->body_done = true; /* nothing of it will be read */
    return authenticate(c, rt, &ret) ? MHD_YES : ret;
}

static struct hconn *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

    return info ? info->socket_context : NULL;
}

static enum MHD_Result add_field(void *cls, enum MHD_ValueKind kind, const char *key,
                                 size_t key_size, const char *value, size_t value_size)
{
    (void)kind;
    sbx_http_fields_add(cls, key, key_size, value, value_size);
    return MHD_YES;
}

/* Every request's head as libmicrohttpd parsed it, held to the rules the gate applies to a
 * connection's first head on its bytes (http_head.h): a refusal closes the connection. */
static bool head_refused(struct hctx *c, const char *version, enum MHD_Result *ret)
{
    struct sbx_http_fields f = {0};
    struct sbx_http_verdict v;
    struct hconn *hc = conn_of(c->conn);
    struct MHD_Response *resp;

    MHD_get_connection_values_n(c->conn, MHD_HEADER_KIND, add_field, &f);
    if (hc && hc->bad_escape) {
        v = (struct sbx_http_verdict){400, "BAD_REQUEST",
                                      "invalid percent-escape in the request target"};
    } else if (sbx_http_fields_check(&f, strcmp(version, MHD_HTTP_VERSION_1_0) == 0 ? 0 : 1, &v)) {
        return false;
    }
    resp = sbx_http_json_response(json_pack("{s:s, s:s}", "code", v.code, "message", v.message));
    if (resp)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    c->body_done = true; /* nothing of it will be read */
    *ret = sbx_http_queue(c, v.status, resp);
    return true;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    struct hctx c = {.h = cls,
                     .conn = conn,
                     .method = method,
                     .upload_data = upload_data,
                     .upload_data_size = upload_data_size,
                     .r = *req_cls};
    enum MHD_Result ret;

    if (!c.r) {
        /* Answer on a later call: a response queued on the first one makes libmicrohttpd
         * 0.9.75 close the connection instead of keeping it alive. */
        c.r = calloc(1, sizeof(*c.r));
        if (!c.r)
            return MHD_NO;
        c.r->tar_dirfd = -1;
        *req_cls = c.r;
        if (conn_of(conn) && c.h->gate)
            sbx_gate_served_busy(c.h->gate, conn_of(conn)->gate, true);
        if (head_refused(&c, version, &ret))
            return ret;
        return refuse_before_continue(&c, url);
    }
    if (c.r->responded) {
        struct MHD_Response *resp = c.r->pending;
        if (*upload_data_size || !resp) {
            *upload_data_size = 0; /* answered early: drop the rest of the body */
            return MHD_YES;
        }
        c.r->pending = NULL;
        ret = MHD_queue_response(conn, c.r->pending_status, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    ret = route(&c, url, method);
    if (c.r->responded)
        *upload_data_size = 0; /* answered early: what is left of the body is dropped */
    return ret;
}

/* Dispatches one call of a request to its route. */
static enum MHD_Result route(struct hctx *c, const char *url, const char *method)
{
    struct hconn *hc = conn_of(c->conn);
    const struct route *rt;
    enum MHD_Result ret;

    /* The absolute form of the target ("http://host/path") names the path as well (RFC 9112
     * §3.2.2); the authority is ours whatever it says. */
    url = sbx_http_target_path(url);
    rt = sbx_http_route_find(c->h, *url ? url : "/", &c->path);
    if (!authenticate(c, rt, &ret))
        return ret;
    if (hc && hc->nul_in_url)
        return sbx_http_respond_error(c, 400, "INVALID_ARGUMENT", "NUL byte in the URL");
    if (!rt)
        return sbx_http_respond_error(c, 404, "NOT_FOUND", "no such route");
    if (!sbx_http_route_allows(rt, method)) {
        struct MHD_Response *resp = sbx_http_json_response(
            json_pack("{s:s, s:s}", "code", "METHOD_NOT_ALLOWED", "message", "method not allowed"));
        char allow[64];
        size_t n = 0;
        /* "GET HEAD" becomes "GET, HEAD", as the reference writes it. */
        for (const char *p = rt->methods; *p && n + 3 < sizeof(allow); p++) {
            allow[n++] = *p == ' ' ? ',' : *p;
            if (*p == ' ')
                allow[n++] = ' ';
        }
        allow[n] = '\0';
        if (resp)
            MHD_add_response_header(resp, "Allow", allow);
        return sbx_http_queue(c, 405, resp);
    }
    c->r->route = rt;
    return rt->fn(c);
}

/* Our record of each connection, tied to the gate's. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct sbx_http *h = cls;
    struct hconn *hc = *socket_context;

    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        hc = calloc(1, sizeof(*hc));
        if (hc && h->gate && fd)
            hc->gate = sbx_gate_served_find(h->gate, fd->connect_fd);
        *socket_context = hc;
    } else {
        if (hc && h->gate)
            sbx_gate_served_closed(h->gate, hc->gate);
        free(hc);
        *socket_context = NULL;
    }
}

/* Percent-decodes the URL and each query argument in place, noting what a C string would hide
 * (%00) and what is no escape at all ("%zz"): the handler refuses both. */
static size_t unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    struct hconn *hc = conn_of(conn);
    bool valid = sbx_http_escapes_valid(s, strlen(s));
    size_t len = MHD_http_unescape(s);

    (void)cls;
    if (hc) {
        hc->nul_in_url |= memchr(s, '\0', len) != NULL;
        hc->bad_escape |= !valid;
    }
    return len;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct hreq *r = *req_cls;
    struct sbx_http *h = cls;
    struct hconn *hc = conn_of(conn);

    (void)toe;
    if (hc) {
        hc->nul_in_url = hc->bad_escape = false; /* the next request starts clean */
        if (h->gate)
            sbx_gate_served_busy(h->gate, hc->gate, false);
    }
    if (!r)
        return;
    sbx_http_upload_release(r); /* a cut-off upload leaves nothing behind */
    if (r->state_drop)
        r->state_drop(r->state);
    if (r->upgrade_drop)
        r->upgrade_drop(r->upgrade_data); /* the upgrade never came */
    if (r->pending)
        MHD_destroy_response(r->pending);
    free(r->body);
    free(r);
    *req_cls = NULL;
}

__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    size_t n;

    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    log_debug("http: %s", msg);
}

/* The environment variables /v1/metadata shows: the prefix's, minus names that look secret. */
static json_t *build_metadata(const char *prefix)
{
    static const char *const secret[] = {"TOKEN", "SECRET", "PASSWORD", "PASSWD",  "CRED",
                                         "KEY",   "AUTH",   "BEARER",   "PRIVATE", "CERT"};
    json_t *env = json_object();

    for (char **e = environ; env && e && *e; e++) {
        const char *eq = strchr(*e, '=');
        char name[256];
        bool hidden = false;
        size_t n;
        if (!eq || strncmp(*e, prefix, strlen(prefix)) != 0)
            continue;
        n = (size_t)(eq - *e);
        if (n >= sizeof(name))
            continue;
        for (size_t i = 0; i < n; i++)
            name[i] = (char)toupper((unsigned char)(*e)[i]);
        name[n] = '\0';
        for (size_t i = 0; i < SBX_ARRAY_SIZE(secret); i++)
            hidden |= strstr(name, secret[i]) != NULL;
        if (hidden)
            continue;
        memcpy(name, *e, n);
        json_object_set_new(env, name, json_string(eq + 1));
    }
    return json_pack("{s:o}", "env", env);
}

/* Whether a path is a health route: probes get connections no one else can take. */
static bool is_probe(const char *path, size_t len)
{
    char buf[32];
    const char *rest;
    const struct route *rt;

    if (len >= sizeof(buf))
        return false;
    memcpy(buf, path, len);
    buf[len] = '\0';
    /* The REST API's table: the gate's check has no server to ask (another port's health
     * route gets no reserve). */
    rt = sbx_http_route_find(NULL, buf, &rest);
    return rt && rt->access == ROUTE_OPEN;
}

static int hand_over(void *arg, int fd, const struct sockaddr *peer, socklen_t len)
{
    struct sbx_http *h = arg;

    if (MHD_add_connection(h->mhd, fd, peer, len) != MHD_YES)
        return errno ? -errno : -EIO; /* libmicrohttpd has closed it */
    return 0;
}

static int hand_h2(void *arg, int fd, const struct sockaddr *peer, socklen_t len)
{
    struct sbx_http *h = arg;

    return sbx_h2c_hand(h->h2c, fd, peer, len);
}

/* The h2c front, when asked for; its streams are served by hand_over. */
static int start_h2c(struct sbx_http *h, struct sbx_gate_opts *g, struct sbx_error *err)
{
    struct sbx_h2c_opts o = {
        .max_connections = h->o.max_connections,
        .max_per_peer = h->o.max_per_peer ? h->o.max_per_peer : 512,
        .max_streams = H2C_MAX_STREAMS,
        .idle_timeout_s = h->o.idle_timeout_s ? h->o.idle_timeout_s : 60,
        .serve = hand_over,
        .arg = h,
    };

    if (!h->o.h2c || h->o.external)
        return 0;
    g->hand_h2 = hand_h2;
    return sbx_h2c_start(&h->h2c, &o, err);
}

static struct MHD_Daemon *start_mhd(struct sbx_http *h, unsigned flags, unsigned max_connections)
{
    const struct sbx_http_opts *o = &h->o;

    return MHD_start_daemon(
        flags | MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET, 0, NULL, NULL, on_request, h,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, MHD_OPTION_CONNECTION_LIMIT, max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, o->idle_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(128 * 1024), MHD_OPTION_STRICT_FOR_CLIENT, 1, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, h, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape, h, MHD_OPTION_THREAD_POOL_SIZE,
        flags ? (o->threads ? o->threads : 4u) : 0u, MHD_OPTION_END);
}

int sbx_http_start(struct sbx_http **ret, const struct sbx_http_opts *o, struct sbx_error *err)
{
    struct sbx_http *h = calloc(1, sizeof(*h));
    /* poll, not epoll: with epoll, libmicrohttpd 0.9.75 notices a client that went away in the
     * middle of an upload only at the idle timeout (its temp file lingers until then). ITC: the
     * gate hands connections over from its own thread. Suspend and resume: a watch's stream sleeps
     * until it has news. */
    unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_TURBO | MHD_USE_ITC |
                     MHD_ALLOW_UPGRADE | MHD_ALLOW_SUSPEND_RESUME;
    struct sbx_gate_opts g = {
        .host = o->host,
        .port = o->port,
        .head_timeout_ms = o->head_timeout_ms ? o->head_timeout_ms : 5000,
        .max_per_peer = o->max_per_peer ? o->max_per_peer : 512,
        .max_served = o->max_connections,
        .probe_reserve = PROBE_RESERVE,
        .is_probe = is_probe,
        .hand = hand_over,
        .arg = h,
    };
    int port;

    if (!h)
        return sbx_error_set(err, ENOMEM, "allocate http server");
    h->o = *o;
    h->started = time(NULL);
    if (o->jobs && o->loop &&
        (port = sbx_ws_set_new(&h->ws, o->loop, o->max_websockets ? o->max_websockets : 1024,
                               64 * 1024, 256 * 1024, err)) < 0) {
        free(h);
        return port;
    }
    h->metadata = o->metadata_prefix ? build_metadata(o->metadata_prefix) : NULL;
    /* The gate keeps the count (sbx_gate_ceiling); libmicrohttpd's limit is set where no
     * worker of its pool can reach it even if every connection went to that one: 0.9.75 keeps
     * a worker's lock when a connection handed over finds the worker full (new_connection_
     * process_ in daemon.c), and every later call of that worker deadlocks. */
    h->mhd = start_mhd(h, o->external ? 0 : flags,
                       o->external ? o->max_connections + PROBE_RESERVE
                                   : (sbx_gate_ceiling(&g) + (o->h2c ? H2C_MAX_STREAMS : 0)) *
                                             (o->threads ? o->threads : 4u) +
                                         1);
    if (!h->mhd) {
        sbx_http_stop(h);
        return sbx_error_set(err, ENOMEM, "start http server");
    }
    if (o->external) {
        *ret = h;
        return 0;
    }
    /* Held connections cost the gate an fd and a little memory each: room for a burst several
     * times the served limit. */
    g.max_pending = o->max_connections * 4 > 4096 ? o->max_connections * 4 : 4096;
    if ((port = start_h2c(h, &g, err)) < 0) {
        sbx_http_stop(h);
        return port;
    }
    port = sbx_gate_start(&h->gate, &g, err);
    if (port < 0) {
        sbx_http_stop(h);
        return port;
    }
    *ret = h;
    return port;
}

int sbx_http_add_connection(struct sbx_http *h, int fd, struct sbx_error *err)
{
    struct sockaddr_in peer = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

    if (MHD_add_connection(h->mhd, fd, (const struct sockaddr *)&peer, sizeof(peer)) != MHD_YES)
        return sbx_error_set(err, errno ? errno : EIO, "add http connection");
    return 0;
}

void sbx_http_run(struct sbx_http *h)
{
    MHD_run(h->mhd);
}

unsigned sbx_http_connections(struct sbx_http *h)
{
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);

    return (info ? info->num_connections : 0) + (h->gate ? sbx_gate_held(h->gate) : 0);
}

const char *sbx_http_families(struct sbx_http *h)
{
    return h->gate ? sbx_gate_families(h->gate) : "none";
}

void sbx_http_set_draining(struct sbx_http *h)
{
    __atomic_store_n(&h->draining, true, __ATOMIC_RELEASE);
}

void sbx_http_stop(struct sbx_http *h)
{
    if (!h)
        return;
    sbx_gate_stop(h->gate); /* no more connections handed over */
    sbx_h2c_free(h->h2c);   /* its streams' connections close: their calls see clients gone */
    sbx_ws_set_free(h->ws); /* libmicrohttpd stops only once every upgraded socket is back */
    if (h->mhd)
        MHD_stop_daemon(h->mhd);
    sbx_gate_free(h->gate);
    json_decref(h->metadata);
    free(h);
}
