#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int sbx_error_set(struct sbx_error *err, int errnum, const char *fmt, ...)
{
    if (errnum < 0)
        errnum = -errnum;
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
        err->code = errnum;
    }
    return -errnum;
}

int sbx_error_wrap(struct sbx_error *err, const char *fmt, ...)
{
    char buf[sizeof(err->msg)];
    size_t n, old;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    n = strlen(buf);
    if (n + 2 < sizeof(buf)) {
        buf[n++] = ':';
        buf[n++] = ' ';
        old = strnlen(err->msg, sizeof(err->msg) - 1);
        if (old > sizeof(buf) - 1 - n)
            old = sizeof(buf) - 1 - n;
        memcpy(buf + n, err->msg, old);
        n += old;
    }
    buf[n] = '\0';
    memcpy(err->msg, buf, n + 1);
    return -err->code;
}
