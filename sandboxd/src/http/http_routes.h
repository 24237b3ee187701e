/* The route table of the REST API: which handler serves a URL, with which methods, and who may
 * call it. The server dispatches through it and so knows no handler. */
#pragma once

#include <stdbool.h>

#include "http_internal.h"

/* The route of url in the server's table (its opts.routes, else the REST API's), with *rest set
 * to what follows its prefix ("" for an exact route); NULL when none matches. */
const struct route *sbx_http_route_find(const struct sbx_http *h, const char *url,
                                        const char **rest);

/* Whether rt serves method. */
bool sbx_http_route_allows(const struct route *rt, const char *method);
