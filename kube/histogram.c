#include "histogram.h"

const double sbx_hist_bounds[SBX_HIST_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                  1,     2.5,  5,     10,   30,  60,   1e300};

void sbx_histogram_observe(struct sbx_histogram *h, uint64_t ns)
{
    double s = (double)ns / 1e9;
    int i = 0;

    while (i < SBX_HIST_BUCKETS - 1 && s > sbx_hist_bounds[i])
        i++;
    atomic_fetch_add(&h->counts[i], 1);
    atomic_fetch_add(&h->count, 1);
    atomic_fetch_add(&h->sum_us, ns / 1000);
}

void sbx_histogram_write(FILE *f, const char *name, const char *labels,
                         const struct sbx_histogram *h)
{
    const char *sep = *labels ? "," : "";
    uint64_t cum = 0;

    for (int i = 0; i < SBX_HIST_BUCKETS; i++) {
        cum += atomic_load(&h->counts[i]);
        if (i == SBX_HIST_BUCKETS - 1)
            fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                    (unsigned long long)cum);
        else
            fprintf(f, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, sbx_hist_bounds[i],
                    (unsigned long long)cum);
    }
    fprintf(f, "%s_sum{%s} %.6f\n%s_count{%s} %llu\n", name, labels,
            (double)atomic_load(&h->sum_us) / 1e6, name, labels,
            (unsigned long long)atomic_load(&h->count));
}
