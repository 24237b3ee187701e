/* The REST files API's route handlers (http_files.c), which the route table names. */
#pragma once

#include <microhttpd.h>

#include "http_internal.h"

/* GET/HEAD/PUT/DELETE /v1/files/{path}: a file, a directory listing or a tar archive. */
enum MHD_Result sbx_http_files(struct hctx *c);
/* GET/HEAD /v1/stat/{path}. */
enum MHD_Result sbx_http_stat(struct hctx *c);
/* PUT /v1/dirs/{path}. */
enum MHD_Result sbx_http_dirs(struct hctx *c);
/* POST /v1/move. */
enum MHD_Result sbx_http_move(struct hctx *c);
