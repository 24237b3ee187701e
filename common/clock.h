/* The monotonic clock in milliseconds, for deadlines and ages. */
#pragma once

#include <stdint.h>
#include <time.h>

static inline uint64_t sbx_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}
