#define _GNU_SOURCE
#include "http_ui.h"

#include <string.h>

#include "cleanup.h"
#include "http_request.h"

struct sbx_ui_asset {
    const char *name;
    const unsigned char *start, *end;
};

#include "ui_assets.h"

static const char *content_type(const char *name)
{
    static const struct {
        const char *suffix, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"},     {".mjs", "text/javascript; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"}, {".css", "text/css; charset=utf-8"},
        {".txt", "text/plain; charset=utf-8"},
    };
    size_t n = strlen(name);

    for (size_t i = 0; i < SBX_ARRAY_SIZE(types); i++) {
        size_t k = strlen(types[i].suffix);
        if (n > k && strcmp(name + n - k, types[i].suffix) == 0)
            return types[i].type;
    }
    return "application/octet-stream";
}

enum MHD_Result sbx_http_ui(struct hctx *c)
{
    const char *name = *c->path ? c->path : "index.html";
    struct MHD_Response *resp;

    for (size_t i = 0; i < SBX_ARRAY_SIZE(sbx_ui_assets); i++) {
        const struct sbx_ui_asset *a = &sbx_ui_assets[i];
        if (strcmp(a->name, name) != 0)
            continue;
        resp = MHD_create_response_from_buffer((size_t)(a->end - a->start), (void *)a->start,
                                               MHD_RESPMEM_PERSISTENT);
        if (!resp)
            return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type(name));
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        /* Its own scripts and styles only, and connections to this daemon. */
        MHD_add_response_header(resp, "Content-Security-Policy",
                                "default-src 'self'; connect-src 'self' ws: wss:; "
                                "style-src 'self' 'unsafe-inline'; frame-ancestors 'none'");
        return sbx_http_queue(c, 200, resp);
    }
    return sbx_http_respond_error(c, 404, "NOT_FOUND", "no such file of the page");
}
