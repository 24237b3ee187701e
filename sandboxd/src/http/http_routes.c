/* The route table, and matching a request's URL and method against it. */
#include "http_routes.h"

#include <string.h>

#include "cleanup.h"
#include "http_files.h"
#include "http_status.h"
#include "http_terminal.h"
#include "http_ui.h"
#include "http_watch.h"

static const struct route routes[] = {
    {"/v1/files/", "GET HEAD PUT DELETE", sbx_http_files, ROUTE_AUTH},
    {"/v1/files", "GET HEAD PUT DELETE", sbx_http_files, ROUTE_AUTH},
    {"/v1/stat/", "GET HEAD", sbx_http_stat, ROUTE_AUTH},
    {"/v1/dirs/", "PUT", sbx_http_dirs, ROUTE_AUTH},
    {"/v1/move", "POST", sbx_http_move, ROUTE_AUTH},
    {"/v1/processes/", "GET", sbx_http_terminal_attach, ROUTE_UPGRADE},
    {"/v1/terminal", "GET", sbx_http_terminal_new, ROUTE_UPGRADE},
    /* The page holds no secret: a browser opens it without the token, which the page then
     * takes from its URL fragment (never sent to us). */
    {"/ui/", "GET HEAD", sbx_http_ui, ROUTE_PAGE},
    {"/v1/watch/", "GET", sbx_http_watch, ROUTE_AUTH},
    {"/v1/watch", "GET", sbx_http_watch, ROUTE_AUTH},
    /* The reference's health route: probes written for the reference daemon call it. */
    {"/v1/health", "GET HEAD", sbx_http_health, ROUTE_OPEN},
    {"/v1/metadata", "GET HEAD", sbx_http_metadata, ROUTE_AUTH},
    {"/healthz", "GET HEAD", sbx_http_healthz, ROUTE_OPEN},
    {"/readyz", "GET HEAD", sbx_http_readyz, ROUTE_OPEN},
    {"/metrics", "GET HEAD", sbx_http_metrics, ROUTE_METRICS},
};

bool sbx_http_route_allows(const struct route *rt, const char *method)
{
    size_t n = strlen(method);

    for (const char *p = rt->methods; (p = strstr(p, method)); p += n)
        if ((p == rt->methods || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return true;
    return false;
}

const struct route *sbx_http_route_find(const struct sbx_http *h, const char *url,
                                        const char **rest)
{
    const struct route *table = h && h->o.routes ? h->o.routes : routes;
    size_t n_table = h && h->o.routes ? h->o.n_routes : SBX_ARRAY_SIZE(routes);

    for (size_t i = 0; i < n_table; i++) {
        const char *prefix = table[i].prefix;
        size_t n = strlen(prefix);
        if (prefix[n - 1] == '/' ? strncmp(url, prefix, n) == 0 : strcmp(url, prefix) == 0) {
            *rest = url + (prefix[n - 1] == '/' ? n : strlen(url));
            return &table[i];
        }
    }
    return NULL;
}
