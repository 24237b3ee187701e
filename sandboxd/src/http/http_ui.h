/* The terminal page at /ui/: a terminal (xterm.js) attached over the terminal WebSocket and a
 * file panel on the files API, served from files embedded in the binary. */
#pragma once

#include "http_internal.h"

enum MHD_Result sbx_http_ui(struct hctx *c);
