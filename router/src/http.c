#define _GNU_SOURCE
#include "http.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "listen.h"
#include "listener.h"
#include "log.h"

enum port_kind { PORT_PROBE, PORT_METRICS };

struct server {
    struct sbx_router_http *h;
    enum port_kind kind;
    struct MHD_Daemon *mhd;
};

struct sbx_router_http {
    struct sbx_router_http_opts o;
    struct server probe, metrics;
    bool ready;
};

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status, const char *type,
                              const char *body)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret;

    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result detail(struct MHD_Connection *conn, unsigned status, const char *msg)
{
    char body[256];

    snprintf(body, sizeof(body), "{\"detail\": \"%s\"}", msg);
    return answer(conn, status, "application/json", body);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **req_cls)
{
    struct server *s = cls;
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;

    (void)version;
    (void)upload;
    if (!*req_cls) {
        *req_cls = s; /* answer once the head is in */
        return MHD_YES;
    }
    *upload_size = 0; /* no body is read here */
    if (s->kind == PORT_PROBE && get && strcmp(url, "/healthz") == 0)
        return answer(conn, 200, "application/json", "{\"status\":\"ok\"}");
    if (s->kind == PORT_PROBE && get && strcmp(url, "/readyz") == 0) {
        if (!__atomic_load_n(&s->h->ready, __ATOMIC_ACQUIRE))
            return answer(conn, 503, "text/plain", "draining");
        if (s->h->o.ready && !s->h->o.ready(s->h->o.arg))
            return answer(conn, 503, "text/plain", "cache not synced");
        return answer(conn, 200, "text/plain", "ok");
    }
    if (s->kind == PORT_METRICS && get && strcmp(url, "/metrics") == 0) {
        char *text = s->h->o.metrics(s->h->o.arg);
        enum MHD_Result ret;
        if (!text)
            return MHD_NO;
        ret = answer(conn, 200, "text/plain; version=0.0.4", text);
        free(text);
        return ret;
    }
    return detail(conn, 404, "Not Found");
}

static int start_port(struct server *s, struct sbx_router_http *h, enum port_kind kind,
                      const char *addr, struct sbx_error *err)
{
    char host[128];
    const char *families;
    int port, fd = -1;

    s->h = h;
    s->kind = kind;
    if (!addr || !*addr)
        return 0;
    if (sbx_listener_parse_addr(addr, host, sizeof(host), &port, err) < 0)
        return -EINVAL;
    if ((port = sbx_listen(*host ? host : NULL, port, 0, &fd, &families, err)) < 0)
        return port;
    s->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC, 0, NULL,
                              NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, fd,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30, MHD_OPTION_END);
    if (!s->mhd) {
        close(fd);
        return sbx_error_set(err, ENOMEM, "start the HTTP server on %s", addr);
    }
    log_info("router: %s on %s", kind == PORT_PROBE ? "probes (/healthz, /readyz)" : "/metrics",
             addr);
    return port;
}

int sbx_router_http_start(struct sbx_router_http **ret, const struct sbx_router_http_opts *o,
                          struct sbx_error *err)
{
    struct sbx_router_http *h = calloc(1, sizeof(*h));
    int r;

    if (!h)
        return sbx_error_set(err, ENOMEM, "allocate http");
    h->o = *o;
    if ((r = start_port(&h->probe, h, PORT_PROBE, o->probe_addr, err)) < 0 ||
        (r = start_port(&h->metrics, h, PORT_METRICS, o->metrics_addr, err)) < 0) {
        sbx_router_http_stop(h);
        return r;
    }
    *ret = h;
    return 0;
}

void sbx_router_http_set_ready(struct sbx_router_http *h, bool ready)
{
    __atomic_store_n(&h->ready, ready, __ATOMIC_RELEASE);
}

void sbx_router_http_stop(struct sbx_router_http *h)
{
    if (!h)
        return;
    if (h->probe.mhd)
        MHD_stop_daemon(h->probe.mhd);
    if (h->metrics.mhd)
        MHD_stop_daemon(h->metrics.mhd);
    free(h);
}
