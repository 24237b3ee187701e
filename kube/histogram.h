/* A Prometheus histogram of durations with fixed buckets; lock-free observations. */
#pragma once

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#define SBX_HIST_BUCKETS 14

struct sbx_histogram {
    atomic_uint_least64_t counts[SBX_HIST_BUCKETS]; /* per bucket, not cumulative */
    atomic_uint_least64_t count, sum_us;
};

/* Upper bounds of the buckets in seconds (the last is +Inf). */
extern const double sbx_hist_bounds[SBX_HIST_BUCKETS];

void sbx_histogram_observe(struct sbx_histogram *h, uint64_t ns);

/* Writes the _bucket, _sum and _count lines of `name{labels}` (labels "" or `k="v"`). */
void sbx_histogram_write(FILE *f, const char *name, const char *labels,
                         const struct sbx_histogram *h);
