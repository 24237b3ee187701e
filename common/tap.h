/* A tiny TAP producer for unit tests: ok(cond, fmt, ...) and done_testing(). */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

static int tap_count, tap_failures;

__attribute__((format(printf, 4, 5))) static bool tap_ok(bool pass, const char *file, int line,
                                                         const char *fmt, ...)
{
    va_list ap;

    printf("%s %d - ", pass ? "ok" : "not ok", ++tap_count);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    if (!pass) {
        printf("#   failed at %s:%d\n", file, line);
        tap_failures++;
    }
    fflush(stdout);
    return pass;
}

#define ok(cond, ...) tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

static inline int done_testing(void)
{
    printf("1..%d\n", tap_count);
    return tap_failures ? 1 : 0;
}
