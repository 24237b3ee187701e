#define _GNU_SOURCE
#include "flags.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "parse.h"

int sbx_flag_string(const char *v, void *dst)
{
    *(const char **)dst = v;
    return 0;
}

int sbx_flag_duration(const char *v, void *dst)
{
    return sbx_parse_duration_ms(v, dst);
}

int sbx_flag_bool(const char *v, void *dst)
{
    if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
        *(bool *)dst = true;
    else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
        *(bool *)dst = false;
    else
        return -EINVAL;
    return 0;
}

int sbx_flag_log_level(const char *v, void *unused)
{
    (void)unused;
    return sbx_log_parse_level(v, &sbx_log_max_level);
}

int sbx_flag_log_format(const char *v, void *unused)
{
    (void)unused;
    if (strcmp(v, "json") != 0 && strcmp(v, "text") != 0)
        return -EINVAL;
    sbx_log_json = strcmp(v, "json") == 0;
    return 0;
}

void sbx_flags_usage(const struct sbx_flags *f, FILE *out)
{
    int w = (int)strlen("version");

    for (size_t i = 0; i < f->n; i++)
        if ((int)strlen(f->flag[i].name) > w)
            w = (int)strlen(f->flag[i].name);
    fprintf(out, "%s\nflags (--name value or --name=value):\n", f->synopsis);
    for (size_t i = 0; i < f->n; i++)
        fprintf(out, "  --%-*s  %s\n", w, f->flag[i].name, f->flag[i].help);
    fprintf(out, "  --%-*s  %s\n  --%-*s  %s\n", w, "version", "print the version", w, "help",
            "print this help");
}

int sbx_flags_parse(const struct sbx_flags *f, int argc, char **argv, int *rest, bool *dashdash)
{
    struct option *longopts = calloc(f->n + 3, sizeof(*longopts));
    int c, idx, r = 0;

    if (!longopts) {
        fprintf(stderr, "%s: out of memory\n", f->prog);
        return -1;
    }
    for (size_t i = 0; i < f->n; i++)
        longopts[i] = (struct option){
            f->flag[i].name, f->flag[i].parse ? required_argument : no_argument, NULL, (int)i};
    longopts[f->n] = (struct option){"version", no_argument, NULL, 'V'};
    longopts[f->n + 1] = (struct option){"help", no_argument, NULL, 'h'};
    /* "+": stop at the first non-flag, so that a command's own flags are left alone. */
    while (r == 0 && (c = getopt_long_only(argc, argv, "+", longopts, &idx)) != -1) {
        if (c == 'V') {
            printf("%s %s\n", f->prog, f->version);
            r = 1;
        } else if (c == 'h') {
            sbx_flags_usage(f, stdout);
            r = 1;
        } else if (c < 0 || (size_t)c >= f->n) {
            sbx_flags_usage(f, stderr);
            r = -1;
        } else if (!f->flag[c].parse) {
            *(bool *)f->flag[c].dst = true;
        } else if (f->flag[c].parse(optarg, f->flag[c].dst) < 0) {
            fprintf(stderr, "%s: invalid value \"%s\" for --%s\n", f->prog, optarg,
                    f->flag[c].name);
            r = -1;
        }
    }
    free(longopts);
    *rest = optind;
    *dashdash = optind > 0 && optind <= argc && strcmp(argv[optind - 1], "--") == 0;
    return r;
}
