/* The route handlers of the daemon's own state (http_status.c), which the route table names:
 * health, liveness, readiness, metadata and metrics. */
#pragma once

#include <microhttpd.h>

#include "http_internal.h"

/* /v1/health: the reference's JSON health answer; 503 while draining. */
enum MHD_Result sbx_http_health(struct hctx *c);
/* /healthz: liveness as main sees it. */
enum MHD_Result sbx_http_healthz(struct hctx *c);
/* /readyz: readiness as main sees it; 503 while draining. */
enum MHD_Result sbx_http_readyz(struct hctx *c);
/* /v1/metadata: the environment variables of the metadata prefix, minus secret-looking ones. */
enum MHD_Result sbx_http_metadata(struct hctx *c);
/* /metrics: the Prometheus text format. */
enum MHD_Result sbx_http_metrics(struct hctx *c);
