/* Parsing of flag values. */
#pragma once

#include <stdint.h>

/* Parses a Go-style duration ("10s", "1m30s", "250ms", "1.5h"; a bare "0") into milliseconds.
 * Returns 0 or -EINVAL / -ERANGE. */
int sbx_parse_duration_ms(const char *s, uint64_t *ret);

/* Parses a decimal integer in [min, max]. Returns 0, -EINVAL or -ERANGE. */
int sbx_parse_int(const char *s, long long min, long long max, long long *ret);
