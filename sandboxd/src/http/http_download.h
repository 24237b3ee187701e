/* GET/HEAD of a regular file (http_download.c). */
#pragma once

#include <microhttpd.h>
#include <sys/stat.h>

#include "http_internal.h"

/* Answers with the file open at fd (taken, closed in any case) and st its fstat: 200, 206 (one
 * range, or several as multipart/byteranges), 304 under If-None-Match or If-Modified-Since, or
 * 416; always with ETag and Last-Modified. */
enum MHD_Result sbx_http_send_file(struct hctx *c, int fd, const struct stat *st);
/* The same with more headers on every answer: name and value pairs, NULL-terminated (e.g. the
 * E2B port's Content-Disposition). */
enum MHD_Result sbx_http_send_file_with(struct hctx *c, int fd, const struct stat *st,
                                        const char *const *headers);
