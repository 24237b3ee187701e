/* What a route handler does with its request: reads its query arguments and headers, and answers
 * it (JSON, an error, an errno mapped to a status, an empty body), the answer held back until the
 * request body has ended; and what an upload leaves in the request's state, released. The server
 * and the route modules use it; it knows neither. */
#pragma once

#include <jansson.h>
#include <microhttpd.h>

#include "error.h"
#include "http_internal.h"

/* A query argument, or NULL. */
const char *sbx_http_arg(struct hctx *c, const char *name);
const char *sbx_http_header(struct hctx *c, const char *name);

/* Responses; each queues and returns MHD's verdict. sbx_http_queue takes resp (NULL: MHD_NO),
 * and holds it back while body remains (libmicrohttpd hangs the connection otherwise). */
enum MHD_Result sbx_http_queue(struct hctx *c, unsigned status, struct MHD_Response *resp);
enum MHD_Result sbx_http_respond_json(struct hctx *c, unsigned status, json_t *body /* stolen */);
enum MHD_Result sbx_http_respond_error(struct hctx *c, unsigned status, const char *code,
                                       const char *msg);
/* The status, code and message of a core error (-errno + message). */
enum MHD_Result sbx_http_respond_errno(struct hctx *c, int r, const struct sbx_error *e);
enum MHD_Result sbx_http_respond_empty(struct hctx *c, unsigned status);

/* A JSON body (stolen) with a trailing newline, as the reference's json.Encoder writes it, for a
 * response that needs more headers before it is queued; NULL without memory. */
struct MHD_Response *sbx_http_json_response(json_t *body);

/* Frees what an upload holds, removing its temp file unless committed. */
void sbx_http_upload_release(struct hreq *r);
