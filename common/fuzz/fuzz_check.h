/* CHECK for fuzz targets: abort, which libFuzzer reports as a crash with the input saved (not
 * assert(), which NDEBUG would drop). */
#pragma once

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz: check failed: %s: ", #cond);                                    \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)
