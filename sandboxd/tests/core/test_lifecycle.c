/* The lifecycle without a network: a real loop, process table and signalfd, signals raised to
 * ourselves, main processes run by sh, and fake hooks that count what they were asked to do. A
 * script ticks on the loop every few milliseconds, as the outside world would. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "lifecycle.h"
#include "loop.h"
#include "proc.h"
#include "tap.h"

#define TICK_MS 5

struct fake {
    struct sbx_lifecycle_hook hook;
    int stops, idles, cancels, tidies;
    int stop_order;      /* the how-many-th stop of all hooks */
    bool done_on_cancel; /* a waiting hook that is done once cancelled (as gRPC is) */
};

static int stops_seen;

static void fake_stop(struct sbx_lifecycle_hook *h)
{
    struct fake *f = h->arg;

    f->stops++;
    f->stop_order = ++stops_seen;
}

static void fake_idle(struct sbx_lifecycle_hook *h)
{
    ((struct fake *)h->arg)->idles++;
}

static void fake_cancel(struct sbx_lifecycle_hook *h)
{
    struct fake *f = h->arg;

    f->cancels++;
    if (f->done_on_cancel)
        sbx_lifecycle_hook_done(h);
}

static void fake_tidy(struct sbx_lifecycle_hook *h)
{
    ((struct fake *)h->arg)->tidies++;
}

static void fake_init(struct fake *f, bool waits)
{
    *f = (struct fake){.hook = {.stop = fake_stop,
                                .idle = fake_idle,
                                .cancel = fake_cancel,
                                .tidy = fake_tidy,
                                .waits = waits,
                                .arg = f}};
}

/* One daemon's life. */
struct life {
    struct sbx_lifecycle_opts o;
    struct fake *hooks[4];
    size_t n_hooks;
    char *const *command;
    void (*script)(struct life *l, double ms); /* each tick, ms since the run began */
    int step;                                  /* the script's own */
    bool flag[4];                              /* what the script saw */
    int seen[4];
    double mark; /* ms when the script last moved on */
    /* Set by live(). */
    struct sbx_loop *loop;
    struct sbx_proctab *procs;
    struct sbx_lifecycle *lc;
    struct sbx_timer tick;
    struct timespec t0;
    double secs; /* how long sbx_lifecycle_run ran */
};

static double since(const struct timespec *t0)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static void on_tick(struct sbx_timer *t)
{
    struct life *l = (struct life *)((char *)t - offsetof(struct life, tick));

    if (l->script)
        l->script(l, since(&l->t0) * 1000);
    (void)sbx_timer_arm(&l->tick, TICK_MS);
}

/* Leaves nothing to the next life: no child, no pending signal. */
static void clean_up(struct life *l)
{
    static const struct timespec zero = {0, 0};
    sigset_t set;

    if (l->procs)
        (void)sbx_proctab_signal_all(l->procs, SIGKILL);
    while (waitpid(-1, NULL, 0) > 0)
        ;
    sigemptyset(&set);
    for (int sig = 1; sig < 32; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaddset(&set, sig);
    while (sigtimedwait(&set, NULL, &zero) > 0)
        ;
    sbx_timer_release(&l->tick);
    sbx_proctab_free(l->procs);
    sbx_lifecycle_free(l->lc);
    sbx_loop_free(l->loop);
}

/* Runs the life to its end; returns the exit status the daemon would have. */
static int live(struct life *l)
{
    struct sbx_proctab_opts po = {.chunk_size = 4096, .exit_drain_ms = 100};
    struct sbx_error err = {0};
    int r, status;

    l->tick.watch.fd = -1;
    r = sbx_lifecycle_new(&l->lc, &l->o, &err);
    if (r == 0)
        r = sbx_loop_new(&l->loop, &err);
    if (r == 0) {
        sbx_lifecycle_watch_procs(l->lc, &po);
        r = sbx_proctab_new(&l->procs, l->loop, &po, &err);
    }
    if (r == 0)
        r = sbx_lifecycle_attach(l->lc, l->loop, l->procs, &err);
    for (size_t i = 0; r == 0 && i < l->n_hooks; i++)
        r = sbx_lifecycle_add_hook(l->lc, &l->hooks[i]->hook, &err);
    if (r == 0)
        r = sbx_timer_init(&l->tick, l->loop, on_tick, &err);
    if (r == 0) {
        (void)sbx_timer_arm(&l->tick, TICK_MS);
        clock_gettime(CLOCK_MONOTONIC, &l->t0);
        r = sbx_lifecycle_run(l->lc, l->command, &err);
        l->secs = since(&l->t0);
    }
    if (r < 0)
        printf("# %s\n", err.msg);
    status = sbx_lifecycle_exit_status(l->lc, r);
    clean_up(l);
    return status;
}

static void raise_(int sig)
{
    (void)kill(getpid(), sig);
}

static void *report_done(void *arg)
{
    sbx_lifecycle_hook_done(arg);
    return NULL;
}

/* SIGTERM at 20 ms, again at 60 ms; the waiting hook is done at 150 ms, from another thread. */
static void script_sigterm_twice(struct life *l, double ms)
{
    pthread_t th;

    if (l->step == 0 && ms >= 20) {
        raise_(SIGTERM);
        l->step++;
    } else if (l->step == 1 && ms >= 60) {
        l->flag[0] = sbx_lifecycle_draining(l->lc);
        raise_(SIGTERM);
        l->step++;
    } else if (l->step == 2 && ms >= 150) {
        l->flag[1] = true; /* still running: the drain waits for the hook */
        if (pthread_create(&th, NULL, report_done, &l->hooks[1]->hook) == 0)
            pthread_detach(th);
        l->step++;
    }
}

static void test_sigterm_drains_once(void)
{
    struct fake a, b;
    struct life l = {.o = {.shutdown_timeout_ms = 5000, .termination_grace_ms = 2000},
                     .hooks = {&a, &b},
                     .n_hooks = 2,
                     .script = script_sigterm_twice};
    int status;

    fake_init(&a, false);
    fake_init(&b, true);
    stops_seen = 0;
    status = live(&l);
    ok(status == 0, "no main process: status 0 (%d)", status);
    ok(l.step == 3 && l.flag[0], "SIGTERM began the drain");
    ok(a.stops == 1 && b.stops == 1, "each stop hook ran once, the second SIGTERM too (%d, %d)",
       a.stops, b.stops);
    ok(a.stop_order == 1 && b.stop_order == 2, "stop hooks ran in the order they were added");
    ok(a.idles == 1 && b.idles == 1, "the idle hooks ran once: no process was left");
    ok(l.flag[1], "the drain waited for the waiting hook");
    ok(a.cancels == 0 && b.cancels == 0, "nothing cancelled before the timeout");
    ok(l.secs < 2.5, "the hook's done ended the drain, not the 5 s timeout (%.2f s)", l.secs);
}

static void test_main_status(void)
{
    static char *const exits7[] = {"sh", "-c", "exit 7", NULL};
    static char *const killed[] = {"sh", "-c", "kill -USR1 $$", NULL};
    static char *const missing[] = {"/nonexistent/sbx-main", NULL};
    static char *const not_exec[] = {"/dev/null", NULL};
    struct {
        char *const *command;
        int want;
        const char *what;
    } cases[] = {{exits7, 7, "its exit code"},
                 {killed, 128 + SIGUSR1, "128 + the signal that killed it"},
                 {missing, 127, "127: not found"},
                 {not_exec, 126, "126: not executable"}};

    for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
        struct fake a;
        struct life l = {.o = {.shutdown_timeout_ms = 5000, .termination_grace_ms = 2000},
                         .hooks = {&a},
                         .n_hooks = 1,
                         .command = cases[i].command};
        int status;

        fake_init(&a, false);
        status = live(&l);
        ok(status == cases[i].want, "main process's end: %s (%d)", cases[i].what, status);
        ok(a.stops == 1 && l.secs < 2.5, "and the drain began and ended at once (%d, %.2f s)",
           a.stops, l.secs);
    }
}

/* Whether every child of ours has been reaped (by the lifecycle, on the loop). */
static bool no_children(void)
{
    siginfo_t si;

    return waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD;
}

/* Once the main process has exited and been reaped, SIGHUP (ignored), then SIGTERM. */
static void script_keep_serving(struct life *l, double ms)
{
    if (l->step == 0 && no_children()) {
        l->flag[0] = sbx_lifecycle_draining(l->lc);
        l->seen[0] = l->hooks[0]->stops;
        raise_(SIGHUP);
        l->mark = ms;
        l->step++;
    } else if (l->step == 1 && ms >= l->mark + 50) {
        l->flag[1] = sbx_lifecycle_draining(l->lc);
        raise_(SIGTERM);
        l->step++;
    }
}

static void test_keep_serving(void)
{
    static char *const command[] = {"sh", "-c", "exit 9", NULL};
    struct fake a;
    struct life l = {
        .o = {.shutdown_timeout_ms = 5000, .termination_grace_ms = 2000, .keep_serving = true},
        .hooks = {&a},
        .n_hooks = 1,
        .command = command,
        .script = script_keep_serving};
    int status;

    fake_init(&a, false);
    status = live(&l);
    ok(l.step == 2 && !l.flag[0] && l.seen[0] == 0,
       "keep_serving: the main process's exit did not drain");
    ok(!l.flag[1], "SIGHUP with the main process gone: ignored");
    ok(status == 9 && a.stops == 1, "SIGTERM drained; status the main process's (%d)", status);
}

/* Where the main processes leave marks: "up" once their traps are set, "hup" on SIGHUP. */
static char dir[] = "/tmp/sbx-lifecycle-XXXXXX";

static bool exists(const char *name)
{
    char path[256];
    struct stat st;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

static void clear_marks(void)
{
    char path[256];

    snprintf(path, sizeof(path), "%s/up", dir);
    (void)unlink(path);
    snprintf(path, sizeof(path), "%s/hup", dir);
    (void)unlink(path);
}

/* Once the main process is up, SIGHUP; once it saw it, SIGINT; at 4 s, SIGTERM (the test failed).
 */
static void script_forward(struct life *l, double ms)
{
    if (l->step == 0 && exists("up")) {
        raise_(SIGHUP);
        l->step++;
    } else if (l->step == 1 && exists("hup")) {
        l->flag[0] = true;
        l->flag[1] = sbx_lifecycle_draining(l->lc);
        raise_(SIGINT);
        l->step++;
    } else if (l->step < 3 && ms >= 4000) {
        raise_(SIGTERM);
        l->step = 3;
    }
}

static void test_forwarding(void)
{
    char script[512];
    char *const command[] = {"sh", "-c", script, NULL};
    struct fake a;
    struct life l = {.o = {.shutdown_timeout_ms = 3000, .termination_grace_ms = 300},
                     .hooks = {&a},
                     .n_hooks = 1,
                     .command = command,
                     .script = script_forward};
    int status;

    /* TERM ignored: had SIGINT drained instead of reaching it, the grace's SIGKILL ends it. */
    snprintf(script, sizeof(script),
             "trap 'touch %s/hup' HUP; trap 'exit 5' INT; trap '' TERM; touch %s/up; "
             "while :; do sleep 0.01; done",
             dir, dir);
    fake_init(&a, false);
    clear_marks();
    status = live(&l);
    ok(l.flag[0], "SIGHUP reached the main process");
    ok(!l.flag[1], "and did not drain");
    ok(status == 5, "SIGINT reached the main process, which exited 5 (%d)", status);
    ok(a.stops == 1, "its exit drained");
}

/* Without a main process: SIGHUP at 20 ms is ignored, SIGINT at 80 ms drains. */
static void script_no_main(struct life *l, double ms)
{
    if (l->step == 0 && ms >= 20) {
        raise_(SIGHUP);
        l->step++;
    } else if (l->step == 1 && ms >= 80) {
        l->flag[0] = sbx_lifecycle_draining(l->lc);
        raise_(SIGINT);
        l->step++;
    } else if (l->step == 2 && ms >= 3000) {
        raise_(SIGTERM);
        l->step++;
    }
}

static void test_no_main_signals(void)
{
    struct fake a;
    struct life l = {.o = {.shutdown_timeout_ms = 5000, .termination_grace_ms = 2000},
                     .hooks = {&a},
                     .n_hooks = 1,
                     .script = script_no_main};
    int status;

    fake_init(&a, false);
    status = live(&l);
    ok(l.step >= 2 && !l.flag[0], "no main process: SIGHUP ignored");
    ok(a.stops == 1 && status == 0 && l.secs < 2.5, "SIGINT drained (%.2f s)", l.secs);
}

/* SIGTERM once the main process (which ignores it) is up. At 5 s (the test failed), every hook
 * is done. */
static void script_term_when_up(struct life *l, double ms)
{
    if (l->step == 0 && exists("up")) {
        raise_(SIGTERM);
        l->step++;
    } else if (l->step == 1 && ms >= 5000) {
        for (size_t i = 0; i < l->n_hooks; i++)
            sbx_lifecycle_hook_done(&l->hooks[i]->hook);
        l->step++;
    }
}

static void test_grace_and_timeout(void)
{
    char script[256];
    char *const command[] = {"sh", "-c", script, NULL};
    struct fake a, w;
    struct life l = {.o = {.shutdown_timeout_ms = 3000, .termination_grace_ms = 100},
                     .hooks = {&a},
                     .n_hooks = 1,
                     .command = command,
                     .script = script_term_when_up};
    int status;

    snprintf(script, sizeof(script), "trap '' TERM; touch %s/up; while :; do sleep 0.01; done",
             dir);
    fake_init(&a, false);
    clear_marks();
    status = live(&l);
    ok(status == 128 + SIGKILL, "SIGTERM ignored: SIGKILL after the grace (%d)", status);
    ok(a.cancels == 0 && a.idles == 1 && l.secs < 2.5,
       "then nothing was left: no cancel, no timeout (%.2f s)", l.secs);

    /* A grace past the timeout: the kill comes at 3/4 of it, the cancel at the timeout, and the
     * waiting hook is done only then. */
    clear_marks();
    fake_init(&w, true);
    w.done_on_cancel = true;
    l = (struct life){.o = {.shutdown_timeout_ms = 400, .termination_grace_ms = 10000},
                      .hooks = {&w},
                      .n_hooks = 1,
                      .command = command,
                      .script = script_term_when_up};
    status = live(&l);
    ok(status == 128 + SIGKILL, "grace past the timeout: killed before it (%d)", status);
    ok(w.cancels == 1, "the timeout ran the cancel hook once (%d)", w.cancels);
    ok(l.secs >= 0.4 && l.secs < 3, "the drain lasted until the timeout (%.2f s)", l.secs);
}

static void ignore_output(void *data, enum sbx_stream st, const uint8_t *buf, size_t len, bool more)
{
    (void)data, (void)st, (void)buf, (void)len, (void)more;
}

static void ignore_exit(void *data, const struct sbx_exit *ex)
{
    (void)data, (void)ex;
}

/* A process at 20 ms, whose end brings a tidy soon. Once seen[3] tidies are counted (or at 3 s),
 * 200 ms more; then SIGTERM, and the waiting hook is done 300 ms after the drain began. */
static void script_tidy(struct life *l, double ms)
{
    static char *const argv[] = {"true", NULL};
    static const struct sbx_proc_sink sink = {ignore_output, ignore_exit}; /* borrowed */
    struct sbx_proc_opts o = {
        .argv = argv, .envp = environ, .cwd_fd = -1, .credit = SBX_CREDIT_UNLIMITED};
    struct sbx_proc *p = NULL;
    struct sbx_error err = {0};
    int tidies = l->hooks[0]->tidies;

    if (l->step == 0 && ms >= 20) {
        if (sbx_proc_start(l->procs, &o, &sink, NULL, &p, &err) == 0)
            sbx_proc_unref(p);
        l->step++;
    } else if (l->step == 1 && (tidies >= l->seen[3] || ms >= 3000)) {
        l->seen[0] = tidies;
        l->mark = ms;
        l->step++;
    } else if (l->step == 2 && ms >= l->mark + 200) {
        l->seen[1] = tidies;
        raise_(SIGTERM);
        l->step++;
    } else if (l->step == 3 && sbx_lifecycle_draining(l->lc)) {
        l->seen[2] = tidies;
        l->mark = ms;
        l->step++;
    } else if (l->step == 4 && ms >= l->mark + 300) {
        l->seen[2] = tidies - l->seen[2];
        sbx_lifecycle_hook_done(&l->hooks[0]->hook);
        l->step++;
    }
}

static void test_tidy(void)
{
    struct fake t;
    struct life l = {.o = {.shutdown_timeout_ms = 5000,
                           .termination_grace_ms = 2000,
                           .tidy_delay_ms = 50,
                           .tidy_period_ms = 60000},
                     .hooks = {&t},
                     .n_hooks = 1,
                     .script = script_tidy,
                     .seen[3] = 1};

    fake_init(&t, true);
    (void)live(&l);
    ok(l.seen[0] == 1 && l.seen[1] == 1,
       "the last process's end brought one tidy, the period none (%d, %d)", l.seen[0], l.seen[1]);

    fake_init(&t, true);
    l = (struct life){.o = {.shutdown_timeout_ms = 5000,
                            .termination_grace_ms = 2000,
                            .tidy_delay_ms = 50,
                            .tidy_period_ms = 40},
                      .hooks = {&t},
                      .n_hooks = 1,
                      .script = script_tidy,
                      .seen[3] = 4};
    (void)live(&l);
    ok(l.seen[0] >= 4, "while serving, a tidy every period (%d)", l.seen[0]);
    ok(l.step == 5 && l.seen[2] <= 1, "none once draining, but one armed before (%d in 300 ms)",
       l.seen[2]);
}

static void test_hook_table_bound(void)
{
    struct sbx_lifecycle_opts o = {.shutdown_timeout_ms = 1000};
    struct sbx_lifecycle *lc = NULL;
    struct sbx_error err = {0};
    struct fake f[9];
    int r = 0, added = 0;

    if (sbx_lifecycle_new(&lc, &o, &err) < 0) {
        ok(false, "new: %s", err.msg);
        return;
    }
    for (size_t i = 0; i < SBX_ARRAY_SIZE(f) && r == 0; i++) {
        fake_init(&f[i], false);
        if ((r = sbx_lifecycle_add_hook(lc, &f[i].hook, &err)) == 0)
            added++;
    }
    ok(added == 8 && r == -ENOSPC, "a table of 8 hooks; the 9th: -ENOSPC (%s)", err.msg);
    sbx_lifecycle_free(lc);
    ok(sbx_lifecycle_exit_status(NULL, 0) == 0 && sbx_lifecycle_exit_status(NULL, -EIO) == 1,
       "no lifecycle: the status says whether setup failed");
}

int main(void)
{
    if (!mkdtemp(dir)) {
        ok(false, "mkdtemp: %s", strerror(errno));
        return done_testing();
    }
    test_hook_table_bound();
    test_sigterm_drains_once();
    test_main_status();
    test_keep_serving();
    test_forwarding();
    test_no_main_signals();
    test_grace_and_timeout();
    test_tidy();
    clear_marks();
    (void)rmdir(dir);
    return done_testing();
}
