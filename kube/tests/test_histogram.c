/* The Prometheus text of a histogram: cumulative buckets, +Inf, count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "histogram.h"
#include "tap.h"

int main(void)
{
    struct sbx_histogram h = {0};
    sbx_histogram_observe(&h, 3000000);      /* 3 ms */
    sbx_histogram_observe(&h, 40000000);     /* 40 ms */
    sbx_histogram_observe(&h, 100000000000); /* 100 s */
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    sbx_histogram_write(f, "x", "a=\"b\"", &h);
    fclose(f);
    ok(strstr(out, "x_bucket{a=\"b\",le=\"0.005\"} 1\n") != NULL, "first bucket");
    ok(strstr(out, "x_bucket{a=\"b\",le=\"0.05\"} 2\n") != NULL, "cumulative");
    ok(strstr(out, "x_bucket{a=\"b\",le=\"60\"} 2\n") != NULL, "100 s is beyond 60");
    ok(strstr(out, "x_bucket{a=\"b\",le=\"+Inf\"} 3\n") != NULL, "+Inf holds all");
    ok(strstr(out, "x_count{a=\"b\"} 3\n") != NULL, "count");
    free(out);
    return done_testing();
}
