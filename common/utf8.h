/* UTF-8 as JSON and protobuf want it: no overlong forms, no surrogates, nothing past U+10FFFF. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* The length of the valid character at p (1 to 4), or 0 when p does not start one (p points
 * into a NUL-terminated string; its NUL is never part of a character). */
size_t sbx_utf8_char(const unsigned char *p);

bool sbx_utf8_valid(const char *s);

/* A copy of s with each byte that starts no valid character replaced by U+FFFD (what Go's
 * encoding/json writes for such bytes); malloc'ed, NULL when out of memory. */
char *sbx_utf8_sanitize(const char *s);
