/* Scope-bound cleanup helpers (__attribute__((cleanup))). Every destructor accepts NULL / -1. */
#pragma once

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))

static inline void sbx_freep(void *p)
{
    free(*(void **)p);
}

/* Closes *fd when it is open and leaves -1 behind, so that closing again, or a release after a
 * failed setup, cannot close a number another thread has been given since. */
static inline void sbx_closep(int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
    }
    *fd = -1;
}

static inline void sbx_fclosep(FILE **f)
{
    if (*f)
        fclose(*f);
}

#define _cleanup_free_   _cleanup_(sbx_freep)
#define _cleanup_close_  _cleanup_(sbx_closep)
#define _cleanup_fclose_ _cleanup_(sbx_fclosep)

/* Defines a cleanup function `name##p` calling `func` on a non-NULL pointer of `type`. */
#define SBX_DEFINE_CLEANUP(type, func)                                                             \
    static inline void func##p(type *p)                                                            \
    {                                                                                              \
        if (*p)                                                                                    \
            func(*p);                                                                              \
    }

/* Hands ownership over: returns the value and leaves NULL (or -1 for TAKE_FD) behind. */
#define TAKE_PTR(p)                                                                                \
    ({                                                                                             \
        __typeof__(p) _tp = (p);                                                                   \
        (p) = NULL;                                                                                \
        _tp;                                                                                       \
    })
#define TAKE_FD(fd)                                                                                \
    ({                                                                                             \
        int _tf = (fd);                                                                            \
        (fd) = -1;                                                                                 \
        _tf;                                                                                       \
    })

#define SBX_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
