/* Health, readiness, metadata and metrics endpoints. */
#include <stdlib.h>
#include <string.h>

#include "http_request.h"
#include "http_status.h"
#include "metrics.h"

static bool draining(struct hctx *c)
{
    return __atomic_load_n(&c->h->draining, __ATOMIC_ACQUIRE);
}

static enum MHD_Result respond_text(struct hctx *c, unsigned status, const char *text,
                                    const char *type)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);

    if (resp)
        MHD_add_response_header(resp, "Content-Type", type);
    return sbx_http_queue(c, status, resp);
}

enum MHD_Result sbx_http_health(struct hctx *c)
{
    if (draining(c))
        return sbx_http_respond_error(c, 503, "UNAVAILABLE", "sandboxd is shutting down");
    return sbx_http_respond_json(c, 200,
                                 json_pack("{s:s, s:I}", "status", "ok", "uptime_seconds",
                                           (json_int_t)(time(NULL) - c->h->started)));
}

enum MHD_Result sbx_http_healthz(struct hctx *c)
{
    if (c->h->o.alive && !c->h->o.alive(c->h->o.arg))
        return respond_text(c, 503, "the event loop does not answer\n", "text/plain");
    return respond_text(c, 200, "ok\n", "text/plain");
}

enum MHD_Result sbx_http_readyz(struct hctx *c)
{
    if (draining(c))
        return respond_text(c, 503, "shutting down\n", "text/plain");
    if (c->h->o.ready && !c->h->o.ready(c->h->o.arg))
        return respond_text(c, 503, "not ready\n", "text/plain");
    return respond_text(c, 200, "ok\n", "text/plain");
}

enum MHD_Result sbx_http_metadata(struct hctx *c)
{
    return sbx_http_respond_json(c, 200, json_deep_copy(c->h->metadata));
}

enum MHD_Result sbx_http_metrics(struct hctx *c)
{
    struct MHD_Response *resp;
    size_t len = 0;
    char *text = sbx_metrics_render(&len);

    if (!text)
        return MHD_NO;
    resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
    return sbx_http_queue(c, 200, resp);
}
