/* The cgroup module on the machine's real cgroups (v1 or v2, whichever the kernel gives us):
 * membership of what a process leaves behind, the reasons given for limits that cannot be set,
 * and removal. Skipped, saying why, where we get no writable cgroup. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "tap.h"

/* Polls has_members until it equals want, for up to a second. */
static bool members_become(struct sbx_cgroup *g, bool want)
{
    const struct timespec pause = {.tv_nsec = 10 * 1000 * 1000};

    for (int i = 0; i < 100; i++) {
        if (sbx_cgroup_has_members(g) == want)
            return true;
        nanosleep(&pause, NULL);
    }
    return false;
}

/* A child that joins g and waits to be killed; its pid, or -1. */
static pid_t member_of(struct sbx_cgroup *g)
{
    int ready[2];
    const int *fds;
    char c;
    pid_t pid;

    if (pipe(ready) < 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        int n = sbx_cgroup_join_fds(g, &fds);
        for (int i = 0; i < n; i++)
            if (write(fds[i], "0", 1) != 1)
                _exit(100);
        if (write(ready[1], "j", 1) != 1)
            _exit(101);
        pause();
        _exit(0);
    }
    close(ready[1]);
    if (pid > 0 && read(ready[0], &c, 1) != 1) {
        (void)kill(pid, SIGKILL);
        (void)waitpid(pid, NULL, 0);
        pid = -1;
    }
    close(ready[0]);
    return pid;
}

static void test_members(struct sbx_cgroups *c)
{
    struct sbx_error err = {0};
    struct sbx_cgroup *g = NULL;
    char name[64];
    pid_t pid;

    snprintf(name, sizeof(name), "test-cgroup-%d", (int)getpid());
    if (!ok(sbx_cgroup_new(c, name, 0, sbx_cgroups_has_pids(c) ? 10 : 0, &g, &err) == 0,
            "a cgroup is made%s%s", err.msg[0] ? ": " : "", err.msg))
        return;
    ok(!sbx_cgroup_has_members(g), "a new cgroup has no member");
    pid = member_of(g);
    ok(pid > 0, "a child joined the cgroup");
    ok(pid > 0 && members_become(g, true), "its member is seen");
    ok(pid > 0 && sbx_cgroup_signal(g, SIGKILL) >= 1, "the cgroup's signal reaches it");
    if (pid > 0)
        (void)waitpid(pid, NULL, 0);
    ok(members_become(g, false), "once reaped, it is no member any more");
    sbx_cgroup_free(g);
    sbx_cgroups_sweep(c);
}

static void test_refusals(struct sbx_cgroups *c)
{
    struct sbx_error err = {0};
    struct sbx_cgroup *g = NULL;
    int r;

    ok(!strcmp(sbx_cgroups_why_no_memory(NULL), "no cgroups"), "no cgroups: says so");
    ok(sbx_cgroups_has_memory(c) == (sbx_cgroups_why_no_memory(c) == NULL),
       "a reason exactly when memory limits cannot be set");
    ok(sbx_cgroups_has_pids(c) == (sbx_cgroups_why_no_pids(c) == NULL),
       "a reason exactly when pids limits cannot be set");
    if (sbx_cgroups_has_memory(c)) {
        printf("# skip: memory limits can be set here, none to refuse\n");
        return;
    }
    r = sbx_cgroup_new(c, "test-cgroup-refused", 1 << 20, 0, &g, &err);
    ok(r == -EOPNOTSUPP && g == NULL, "a memory limit that cannot be set is refused");
    ok(strstr(err.msg, sbx_cgroups_why_no_memory(c)) != NULL, "with the reason: %s", err.msg);
}

int main(void)
{
    struct sbx_error err = {0};
    struct sbx_cgroups *c = NULL;

    if (sbx_cgroups_open(&c, &err) < 0) {
        printf("# skip: no cgroups here (%s)\n", err.msg);
        ok(err.code == EOPNOTSUPP && err.msg[0], "no cgroups, and why");
        return done_testing();
    }
    printf("# cgroups %s%s%s\n", sbx_cgroups_version(c), sbx_cgroups_has_memory(c) ? " memory" : "",
           sbx_cgroups_has_pids(c) ? " pids" : "");
    test_members(c);
    test_refusals(c);
    sbx_cgroups_free(c);
    return done_testing();
}
