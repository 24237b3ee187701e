/* Command-line flags from a table, for sandboxd and the controller: --name value, --name=value
 * or Go's -name value, plus --version and --help; and the value parsers they share. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct sbx_flag {
    const char *name;
    int (*parse)(const char *value, void *dst); /* NULL: a switch, dst is a bool */
    void *dst;
    const char *help;
};

struct sbx_flags {
    const struct sbx_flag *flag;
    size_t n;
    const char *prog; /* in messages and --version */
    const char *version;
    const char *synopsis; /* the usage's first lines */
};

/* Parses argv up to the first non-flag. Returns 0 to run, 1 to exit successfully (--version,
 * --help, printed), -1 on bad usage (told on stderr). *rest is the index of the first argument
 * left, after a "--" when one ended the flags (then *dashdash is true). */
int sbx_flags_parse(const struct sbx_flags *f, int argc, char **argv, int *rest, bool *dashdash);
void sbx_flags_usage(const struct sbx_flags *f, FILE *out);

int sbx_flag_string(const char *v, void *dst);        /* const char * */
int sbx_flag_duration(const char *v, void *dst);      /* uint64_t ms ("10s", "500ms") */
int sbx_flag_bool(const char *v, void *dst);          /* bool: true, false, 1, 0 */
int sbx_flag_log_level(const char *v, void *unused);  /* sets the log's level */
int sbx_flag_log_format(const char *v, void *unused); /* text or json */
