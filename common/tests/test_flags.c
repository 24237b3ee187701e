/* The flag table parser shared by sandboxd and the controller. */
#include <getopt.h>
#include <stdint.h>
#include <string.h>

#include "cleanup.h"
#include "flags.h"
#include "tap.h"

static const char *name;
static uint64_t wait_ms;
static bool on, sw;

static const struct sbx_flag table[] = {
    {"name", sbx_flag_string, &name, "a string"},
    {"wait", sbx_flag_duration, &wait_ms, "a duration"},
    {"on", sbx_flag_bool, &on, "a bool"},
    {"switch", NULL, &sw, "a switch"},
};

static const struct sbx_flags flags = {.flag = table,
                                       .n = SBX_ARRAY_SIZE(table),
                                       .prog = "t",
                                       .version = "1",
                                       .synopsis = "usage: t\n"};

static int parse(char **argv, int *rest, bool *dd)
{
    int argc = 0;

    while (argv[argc])
        argc++;
    name = NULL, wait_ms = 0, on = false, sw = false;
    optind = 0; /* getopt starts over */
    return sbx_flags_parse(&flags, argc, argv, rest, dd);
}

int main(void)
{
    char *a1[] = {"t",        "--name", "x",   "-wait=2s", "--on=1",
                  "--switch", "--",     "cmd", "--name",   NULL};
    char *a2[] = {"t", "--on", "maybe", NULL};
    char *a3[] = {"t", "--nope", NULL};
    char *a4[] = {"t", "cmd", "-x", NULL};
    int rest = -1;
    bool dd = false;

    ok(parse(a1, &rest, &dd) == 0 && strcmp(name, "x") == 0 && wait_ms == 2000 && on && sw,
       "values, Go's single dash, a switch");
    ok(rest == 7 && dd, "-- ends the flags; the command's own flags are left (rest %d)", rest);
    ok(parse(a2, &rest, &dd) == -1, "an invalid value is bad usage");
    ok(parse(a3, &rest, &dd) == -1, "an unknown flag is bad usage");
    ok(parse(a4, &rest, &dd) == 0 && rest == 1 && !dd, "stops at the first non-flag");
    return done_testing();
}
