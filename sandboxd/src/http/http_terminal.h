/* The terminal routes (WebSocket): GET /v1/processes/{id}/terminal attaches to a process spawned
 * with a pty, GET /v1/terminal spawns a login shell (or "sh -lc COMMAND") in the root dir and
 * attaches to it. */
#pragma once

#include "http_internal.h"

enum MHD_Result sbx_http_terminal_attach(struct hctx *c);
enum MHD_Result sbx_http_terminal_new(struct hctx *c);
