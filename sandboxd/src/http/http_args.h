/* The REST API's query parameters, headers and JSON bodies, parsed from plain strings (no
 * libmicrohttpd here), so that the fuzz targets reach them as the handlers do. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A file mode as the reference accepts it: ^0[0-7]{3}$. Returns 0 or -EINVAL. */
int sbx_http_parse_mode(const char *s, mode_t *ret);

/* Parses true/false like Go's strconv.ParseBool; -EINVAL otherwise. */
int sbx_http_parse_bool(const char *s, bool *ret);

/* Parses a single "bytes=" range against size. 1: use [*start, *end]; 0: ignore the header
 * (absent, malformed or several ranges); -1: unsatisfiable. */
int sbx_http_parse_range(const char *h, uint64_t size, uint64_t *start, uint64_t *end);

struct sbx_http_range {
    uint64_t start, end; /* inclusive, end < size */
};

/* Parses a "bytes=" range set (RFC 9110 §14.1.1: ranges separated by commas, blanks and empty
 * elements allowed) against size, each range as sbx_http_parse_range reads one. Returns the
 * number n >= 1 of satisfiable ranges, in ret[0..n) in the order given; 0 to ignore the header
 * (absent, malformed anywhere, or more than max ranges); -1 when none is satisfiable. */
int sbx_http_parse_ranges(const char *h, uint64_t size, struct sbx_http_range *ret, size_t max);

/* Parses POST /v1/move's body {"from": string, "to": string, "overwrite": bool (optional)}.
 * Returns the document, which holds *from and *to (json_decref it), or NULL when malformed. */
json_t *sbx_http_parse_move(const char *body, size_t len, const char **from, const char **to,
                            bool *overwrite);
