/* sbx_tree_signal against trees that fork as fast as they can: nothing may escape the kill. We are
 * a subreaper, so every descendant, orphaned or not, comes back to us; a survivor is one that
 * is still not reaped after the kill. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"
#include "cgroup.h"
#include "tree.h"

#define ROUNDS 60

static double now_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The read end of a pipe whose write end only this test holds: when the test dies (a timeout
 * of its runner kills it mid-round), the pipe says so and every member of a bomb still forking
 * exits, rather than forking on for ever under init. */
static int test_alive[2] = {-1, -1};

static bool test_gone(void)
{
    struct pollfd p = {.fd = test_alive[0], .events = POLLIN};

    return poll(&p, 1, 0) != 0;
}

/* Each member keeps two children; those past a depth exit at once, so that their parents fork
 * again without pause. At most 2^(DEPTH+1) processes, forking all the time. */
#define DEPTH 6
static void bomb(void)
{
    int depth = 0, kids = 0;

    close(test_alive[1]);
    for (;;) {
        if (test_gone())
            _exit(0);
        if (kids == 2) {
            if (waitpid(-1, NULL, 0) > 0)
                kids--;
            continue;
        }
        pid_t p = fork();
        if (p == 0) {
            kids = 0;
            if (++depth > DEPTH)
                _exit(0);
        } else if (p > 0) {
            kids++;
        } else {
            usleep(100);
        }
    }
}

/* Reaps every child; alarm() bounds it. */
static void reap_all(void)
{
    alarm(20);
    while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
        ;
    alarm(0);
}

/* Whether some of top's group outlived a kill (still there after 2 s): those are killed by
 * group, so that the next round starts clean. */
static bool survived(pid_t top)
{
    double end = now_s() + 2.0;
    int r;

    while ((r = (int)waitpid(-1, NULL, WNOHANG)) >= 0 && now_s() < end)
        if (r == 0)
            usleep(1000);
    if (r < 0)
        return false;
    (void)kill(-top, SIGKILL);
    reap_all();
    return true;
}

static void test_bomb_dies_whole(void)
{
    int escaped_rounds = 0;

    for (int round = 0; round < ROUNDS; round++) {
        pid_t top = fork();
        int n;

        if (top == 0) {
            (void)setpgid(0, 0); /* its own group: survivors can be killed by hand below */
            bomb();
        }
        (void)setpgid(top, top);
        usleep(20 * 1000); /* let it spread */
        n = sbx_tree_signal(top, SIGKILL);
        if (n <= 0) {
            ok(0, "round %d: sbx_tree_signal reached nothing (%d)", round, n);
            return;
        }
        escaped_rounds += survived(top);
    }
    ok(escaped_rounds == 0,
       "a forking tree dies whole under sbx_tree_signal (%d of %d rounds "
       "left survivors)",
       escaped_rounds, ROUNDS);
}

/* The same in a cgroup with a pids limit (as a Spawn with limits.pids has it), killed with
 * sbx_cgroup_signal: the bomb runs into the limit all the time, as a shell fork bomb does. */
static void test_cgroup_bomb_dies_whole(void)
{
    struct sbx_error err = {0};
    struct sbx_cgroups *c = NULL;
    int escaped_rounds = 0, rounds = 0;

    if (sbx_cgroups_open(&c, &err) < 0 || !sbx_cgroups_has_pids(c)) {
        printf("# skip: no pids cgroup here (%s)\n", err.msg);
        sbx_cgroups_free(c);
        return;
    }
    for (; rounds < ROUNDS; rounds++) {
        struct sbx_cgroup *g = NULL;
        const int *fds;
        char name[64];
        pid_t top;
        int joined[2];

        snprintf(name, sizeof(name), "test-tree-%d-%d", (int)getpid(), rounds);
        if (sbx_cgroup_new(c, name, 0, 100, &g, &err) < 0) {
            ok(0, "sbx_cgroup_new: %s", err.msg);
            break;
        }
        if (pipe(joined) < 0) {
            ok(0, "pipe: %d", errno);
            sbx_cgroup_free(g);
            break;
        }
        top = fork();
        if (top == 0) {
            int n = sbx_cgroup_join_fds(g, &fds);
            for (int i = 0; i < n; i++)
                if (write(fds[i], "0", 1) != 1)
                    _exit(100);
            (void)setpgid(0, 0);
            if (write(joined[1], "j", 1) != 1)
                _exit(101);
            bomb();
        }
        (void)setpgid(top, top);
        close(joined[1]);
        /* The kill is meant for a bomb in its cgroup: not before the top has joined it. */
        if (read(joined[0], name, 1) != 1) {
            ok(0, "the bomb's top did not join its cgroup");
            close(joined[0]);
            (void)kill(-top, SIGKILL);
            reap_all();
            sbx_cgroup_free(g);
            break;
        }
        close(joined[0]);
        usleep(20 * 1000);
        (void)sbx_cgroup_signal(g, SIGKILL);
        escaped_rounds += survived(top);
        sbx_cgroup_free(g);
        sbx_cgroups_sweep(c);
    }
    ok(escaped_rounds == 0,
       "a forking tree in a pids cgroup dies whole under sbx_cgroup_signal "
       "(%d of %d rounds left survivors)",
       escaped_rounds, rounds);
    sbx_cgroups_free(c);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (pipe2(test_alive, O_CLOEXEC) < 0) {
        ok(0, "pipe2: %d", errno);
        return done_testing();
    }
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
        ok(0, "PR_SET_CHILD_SUBREAPER: %d", errno);
        return done_testing();
    }
    test_bomb_dies_whole();
    test_cgroup_bomb_dies_whole();
    return done_testing();
}
