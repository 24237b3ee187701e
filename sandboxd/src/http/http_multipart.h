/* A multipart/form-data body (RFC 7578 over RFC 2046), parsed as it streams in: the content of
 * its one part named "file" is handed to a callback, every other part is skipped. Accepted only
 * whole: every part ends with its boundary, the body with the closing one ("--boundary--"),
 * every part has a name, and there is exactly one "file" part. No libmicrohttpd here: the
 * fuzz targets and unit tests feed it bytes directly. */
#pragma once

#include <stddef.h>

#include "error.h"

#define SBX_MULTIPART_BOUNDARY_MAX 70 /* RFC 2046 */

/* Where the "file" part's content goes; returns 0 or -errno (with err set), which stops the
 * parse. */
typedef int (*sbx_multipart_data_fn)(void *cls, const char *data, size_t len,
                                     struct sbx_error *err);

struct sbx_multipart;

/* The boundary parameter of a Content-Type header value "multipart/form-data; boundary=..."
 * (a token or a quoted string, 1-70 of RFC 2046's characters, not ending in a space). Returns
 * 0, or -EINVAL when there is none or it is not one. */
int sbx_multipart_boundary(const char *content_type, char ret[SBX_MULTIPART_BOUNDARY_MAX + 1]);

/* A parser of a body delimited by boundary. -ENOMEM. */
int sbx_multipart_new(const char *boundary, sbx_multipart_data_fn fn, void *cls,
                      struct sbx_multipart **ret, struct sbx_error *err);
/* The next len bytes of the body, in pieces of any size. 0, the callback's -errno, or -EINVAL
 * with the reason for a body that is not a whole form: a part without a name, a second "file"
 * part, a boundary followed by neither "--" nor a line end, part headers over 8 KiB. After a
 * failure every call fails the same way. */
int sbx_multipart_feed(struct sbx_multipart *m, const char *data, size_t len,
                       struct sbx_error *err);
/* The body has ended: 0 when it was whole and held a "file" part; -EINVAL with the reason
 * otherwise (it ended inside a part, or before the closing boundary; no "file" part). */
int sbx_multipart_finish(struct sbx_multipart *m, struct sbx_error *err);
/* Accepts NULL. */
void sbx_multipart_free(struct sbx_multipart *m);

#define SBX_MULTIPART_FILENAME_MAX 4096 /* a part's filename parameter (a path: PATH_MAX) */

/* Several "file" parts (E2B's /files upload: each part's filename is where it goes): begin
 * runs when a "file" part's headers have ended, with its filename parameter ("" when none;
 * longer than SBX_MULTIPART_FILENAME_MAX fails the parse), its content then goes to the data
 * callback, and end runs when its closing boundary has been read. Both get the parser's cls and
 * stop the parse with -errno. Set before the first feed; parts is borrowed. */
struct sbx_multipart_parts {
    int (*begin)(void *cls, const char *filename, struct sbx_error *err);
    int (*end)(void *cls, struct sbx_error *err);
};
void sbx_multipart_set_parts(struct sbx_multipart *m, const struct sbx_multipart_parts *parts);
