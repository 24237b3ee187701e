/* Conditional requests (RFC 9110 §13) on a file's validators: its entity tag and its
 * modification time. Plain strings in and out (no libmicrohttpd here), so that the unit tests and
 * fuzz targets reach them as the download handler does. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#define SBX_HTTP_ETAG_MAX 80
#define SBX_HTTP_DATE_MAX 32

/* A strong entity tag (with its quotes) from the inode, size and mtime to the nanosecond: every
 * write through the API renames a new inode into place, so each gives a new tag. (A process that
 * rewrites a file in place, to the same size, within one tick of the kernel's clock keeps it.) */
void sbx_http_etag(const struct stat *st, char ret[SBX_HTTP_ETAG_MAX]);

/* An HTTP-date: "Sun, 06 Nov 1994 08:49:37 GMT", or the obsolete RFC 850 and asctime forms a
 * recipient must also accept. 0, or -EINVAL. */
int sbx_http_parse_date(const char *s, time_t *ret);
/* t as an IMF-fixdate. */
void sbx_http_format_date(time_t t, char ret[SBX_HTTP_DATE_MAX]);

/* GET and HEAD: whether the answer is 304 Not Modified. If-None-Match ("*" or a list of tags,
 * compared weakly) decides when present; otherwise If-Modified-Since (a valid date not before
 * mtime). Either may be NULL; a malformed If-None-Match matches nothing. */
bool sbx_http_not_modified(const char *if_none_match, const char *if_modified_since,
                           const char *etag, time_t mtime);

/* Whether a Range is to be honoured under If-Range (NULL: yes): an entity tag must equal etag
 * by strong comparison (a weak one never does); a date must equal mtime, and mtime must be a
 * strong validator, i.e. at least a second before now. */
bool sbx_http_if_range(const char *if_range, const char *etag, time_t mtime, time_t now);
