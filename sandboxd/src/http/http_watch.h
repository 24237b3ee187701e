/* The REST route of directory watches: GET /v1/watch/{path} as Server-Sent Events. */
#pragma once

#include <microhttpd.h>

#include "http_internal.h"

/* ?recursive=bool&include=GLOB&exclude=GLOB&watch=ID&since=SEQ&rescan_interval=DURATION;
 * Last-Event-ID stands for since when watch is given. */
enum MHD_Result sbx_http_watch(struct hctx *c);
