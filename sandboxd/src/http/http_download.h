/* GET/HEAD of a regular file (http_download.c). */
#pragma once

#include <microhttpd.h>
#include <sys/stat.h>

#include "http_internal.h"

/* Answers with the file open at fd (taken, closed in any case) and st its fstat: 200, 206 (one
 * range, or several as multipart/byteranges), 304 under If-None-Match or If-Modified-Since, or
 * 416; always with ETag and Last-Modified. */
enum MHD_Result sbx_http_send_file(struct hctx *c, int fd, const struct stat *st);
