#include "http_status.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "parse.h"

struct sbx_status_server {
    struct MHD_Daemon *mhd;
    /* Held while a request reads the controller: once set_ctrl(NULL) returns, no request uses
     * the old one, which the caller may then free. */
    pthread_mutex_t mu;
    struct sbx_ctrl *ctrl; /* NULL until leading */
    struct sbx_kube *kube;
    int port;
};

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code, const char *type,
                             char *body /* freed */)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    enum MHD_Result ret;

    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    ret = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ret;
}

static void informer_metrics(FILE *f, const char *name, struct sbx_informer *inf)
{
    struct sbx_informer_stats st;

    if (!inf)
        return;
    sbx_informer_stats(inf, &st);
    fprintf(f,
            "sandboxd_controller_informer_lists_total{resource=\"%s\"} %llu\n"
            "sandboxd_controller_informer_watches_total{resource=\"%s\"} %llu\n"
            "sandboxd_controller_informer_events_total{resource=\"%s\"} %llu\n"
            "sandboxd_controller_informer_bookmarks_total{resource=\"%s\"} %llu\n"
            "sandboxd_controller_informer_gone_total{resource=\"%s\"} %llu\n",
            name, (unsigned long long)st.lists, name, (unsigned long long)st.watches, name,
            (unsigned long long)st.events, name, (unsigned long long)st.bookmarks, name,
            (unsigned long long)st.gone);
}

static void lag_metrics(FILE *f, const char *name, struct sbx_informer *inf)
{
    char labels[64];

    if (!inf)
        return;
    snprintf(labels, sizeof(labels), "resource=\"%s\"", name);
    sbx_histogram_write(f, "sandboxd_controller_watch_lag_seconds", labels, sbx_informer_lag(inf));
}

/* What the image lookups cost: registry requests by kind, results, cache hits, mirrors that
 * served a lookup or passed it on. */
static void image_metrics(FILE *f, struct sbx_registry *r)
{
    struct sbx_registry_stats st;

    if (!r)
        return;
    sbx_registry_stats(r, &st);
    fprintf(f,
            "# TYPE sandboxd_controller_image_lookups_total counter\n"
            "sandboxd_controller_image_lookups_total{result=\"resolved\"} %llu\n"
            "sandboxd_controller_image_lookups_total{result=\"failed\"} %llu\n"
            "# TYPE sandboxd_controller_image_cache_hits_total counter\n"
            "sandboxd_controller_image_cache_hits_total %llu\n"
            "# TYPE sandboxd_controller_registry_requests_total counter\n"
            "sandboxd_controller_registry_requests_total{kind=\"manifest\"} %llu\n"
            "sandboxd_controller_registry_requests_total{kind=\"config\"} %llu\n"
            "sandboxd_controller_registry_requests_total{kind=\"token\"} %llu\n"
            "# TYPE sandboxd_controller_registry_mirror_lookups_total counter\n"
            "sandboxd_controller_registry_mirror_lookups_total{result=\"hit\"} %llu\n"
            "sandboxd_controller_registry_mirror_lookups_total{result=\"miss\"} %llu\n",
            (unsigned long long)st.resolved, (unsigned long long)st.failures,
            (unsigned long long)st.hits, (unsigned long long)st.manifests,
            (unsigned long long)st.configs, (unsigned long long)st.tokens,
            (unsigned long long)st.mirror_hits, (unsigned long long)st.mirror_misses);
}

static void ctrl_metrics(FILE *f, struct sbx_ctrl *c)
{
    size_t holding;

    pthread_mutex_lock(&c->mu);
    holding = json_object_size(c->held);
    pthread_mutex_unlock(&c->mu);
    fprintf(f,
            "# TYPE sandboxd_controller_queue_depth gauge\n"
            "sandboxd_controller_queue_depth %zu\n"
            "# TYPE sandboxd_controller_claim_writes_total counter\n"
            "sandboxd_controller_claim_writes_total %llu\n"
            "# TYPE sandboxd_controller_claims_total counter\n"
            "sandboxd_controller_claims_total{start=\"warm\"} %llu\n"
            "sandboxd_controller_claims_total{start=\"cold\"} %llu\n"
            "# TYPE sandboxd_controller_sandbox_status_writes_total counter\n"
            "sandboxd_controller_sandbox_status_writes_total %llu\n"
            "# TYPE sandboxd_controller_sandbox_status_held_total counter\n"
            "sandboxd_controller_sandbox_status_held_total %llu\n"
            "# TYPE sandboxd_controller_sandbox_status_holding gauge\n"
            "sandboxd_controller_sandbox_status_holding %zu\n"
            "# TYPE sandboxd_controller_pool_refills_deferred_total counter\n"
            "sandboxd_controller_pool_refills_deferred_total %llu\n",
            sbx_wq_len(c->queue) + sbx_wq_len(c->claim_queue),
            (unsigned long long)atomic_load(&c->claim_writes),
            (unsigned long long)atomic_load(&c->claims_warm),
            (unsigned long long)atomic_load(&c->claims_cold),
            (unsigned long long)atomic_load(&c->sandbox_status_writes),
            (unsigned long long)atomic_load(&c->sandbox_status_held), holding,
            (unsigned long long)atomic_load(&c->refills_deferred));
    fprintf(f, "# TYPE sandboxd_controller_claim_ready_seconds histogram\n");
    sbx_histogram_write(f, "sandboxd_controller_claim_ready_seconds", "start=\"warm\"",
                        &c->claim_ready[1]);
    sbx_histogram_write(f, "sandboxd_controller_claim_ready_seconds", "start=\"cold\"",
                        &c->claim_ready[0]);
    struct {
        const char *name;
        struct sbx_informer *inf;
    } infs[] = {{"sandboxes", c->sandboxes},        {"pods", c->pods},
                {"services", c->services},          {"sandboxtemplates", c->templates},
                {"sandboxwarmpools", c->pools},     {"sandboxclaims", c->claims},
                {"persistentvolumeclaims", c->pvcs}};
    image_metrics(f, c->registry);
    fprintf(f, "# TYPE sandboxd_controller_informer_lists_total counter\n");
    for (size_t i = 0; i < SBX_ARRAY_SIZE(infs); i++)
        informer_metrics(f, infs[i].name, infs[i].inf);
    fprintf(f, "# TYPE sandboxd_controller_watch_lag_seconds histogram\n");
    for (size_t i = 0; i < SBX_ARRAY_SIZE(infs); i++)
        lag_metrics(f, infs[i].name, infs[i].inf);
}

static char *metrics(struct sbx_status_server *s, struct sbx_ctrl *c)
{
    struct sbx_kube_stats ks;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    if (!f)
        return NULL;
    sbx_kube_stats(s->kube, &ks);
    fprintf(f,
            "# TYPE sandboxd_controller_api_requests_total counter\n"
            "sandboxd_controller_api_requests_total %llu\n"
            "# TYPE sandboxd_controller_api_writes_total counter\n"
            "sandboxd_controller_api_writes_total %llu\n"
            "# TYPE sandboxd_controller_api_throttled_total counter\n"
            "sandboxd_controller_api_throttled_total %llu\n"
            "# TYPE sandboxd_controller_api_errors_total counter\n"
            "sandboxd_controller_api_errors_total %llu\n"
            "# TYPE sandboxd_controller_api_connections gauge\n"
            "sandboxd_controller_api_connections %d\n"
            "# TYPE sandboxd_controller_api_connections_opened_total counter\n"
            "sandboxd_controller_api_connections_opened_total{use=\"requests\"} %llu\n"
            "sandboxd_controller_api_connections_opened_total{use=\"watches\"} %llu\n"
            "# TYPE sandboxd_controller_leader gauge\n"
            "sandboxd_controller_leader %d\n",
            (unsigned long long)ks.requests, (unsigned long long)ks.writes,
            (unsigned long long)ks.throttled, (unsigned long long)ks.errors, ks.connections,
            (unsigned long long)ks.opened_requests, (unsigned long long)ks.opened_watches,
            c ? 1 : 0);
    if (c)
        ctrl_metrics(f, c);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **req_cls)
{
    struct sbx_status_server *s = cls;
    char *body;

    (void)version, (void)upload_data, (void)req_cls;
    if (*upload_size)
        return MHD_NO;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply(conn, 405, "text/plain", strdup("method not allowed\n"));
    if (!strcmp(url, "/healthz"))
        return reply(conn, 200, "text/plain", strdup("ok\n"));
    if (!strcmp(url, "/readyz")) {
        pthread_mutex_lock(&s->mu);
        bool leading = s->ctrl != NULL, ok = leading && sbx_ctrl_synced(s->ctrl);
        pthread_mutex_unlock(&s->mu);
        return reply(conn, ok ? 200 : 503, "text/plain",
                     strdup(ok        ? "ok\n"
                            : leading ? "informers have not listed yet\n"
                                      : "not the leader\n"));
    }
    if (!strcmp(url, "/metrics")) {
        pthread_mutex_lock(&s->mu);
        body = metrics(s, s->ctrl);
        pthread_mutex_unlock(&s->mu);
        if (body)
            return reply(conn, 200, "text/plain; version=0.0.4", body);
    }
    return reply(conn, 404, "text/plain", strdup("not found\n"));
}

static int parse_addr(const char *addr, struct sockaddr_in *sa, struct sbx_error *err)
{
    const char *colon = strrchr(addr, ':');
    long long port;
    char host[64];

    if (!colon || sbx_parse_int(colon + 1, 0, 65535, &port) < 0 ||
        (size_t)(colon - addr) >= sizeof(host))
        return sbx_error_set(err, EINVAL, "bad address \"%s\": want host:port", addr);
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    *sa = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (!*host)
        sa->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        return sbx_error_set(err, EINVAL, "bad address \"%s\": host must be an IPv4 address", addr);
    return 0;
}

int sbx_status_server_start(const char *addr, struct sbx_kube *kube, struct sbx_status_server **ret,
                            struct sbx_error *err)
{
    struct sbx_status_server *s;
    struct sockaddr_in sa;
    int r;

    if ((r = parse_addr(addr, &sa, err)) < 0)
        return r;
    if (!(s = calloc(1, sizeof(*s))))
        return sbx_error_set(err, ENOMEM, "status server");
    s->kube = kube;
    pthread_mutex_init(&s->mu, NULL);
    s->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL,
                              on_request, s, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_CONNECTION_LIMIT,
                              64u, MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
    if (!s->mhd) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return sbx_error_set(err, EADDRINUSE, "cannot listen on \"%s\"", addr);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : 0;
    *ret = s;
    return 0;
}

void sbx_status_server_set_ctrl(struct sbx_status_server *s, struct sbx_ctrl *ctrl)
{
    pthread_mutex_lock(&s->mu);
    s->ctrl = ctrl;
    pthread_mutex_unlock(&s->mu);
}

int sbx_status_server_port(struct sbx_status_server *s)
{
    return s->port;
}

void sbx_status_server_stop(struct sbx_status_server *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->mhd);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
