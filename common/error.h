/* Errors: functions return >= 0 or -errno and fill a struct sbx_error on failure only. */
#pragma once

#include <stddef.h>

struct sbx_error {
    int code; /* positive errno */
    char msg[256];
};

/* Sets err (when not NULL) to errnum and a printf-formatted message; returns -errnum. */
int sbx_error_set(struct sbx_error *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes the message already in err with more context ("context: old message"). */
int sbx_error_wrap(struct sbx_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
