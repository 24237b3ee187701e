/* The daemon's life as PID 1: signals, the main process, the drain and its timers. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "lifecycle.h"
#include "log.h"
#include "spawn.h"

#define MAX_HOOKS 8

/* The allocator gives back what a burst left free (a thousand streams leave ~15 MB otherwise):
 * shortly after the last process of a burst ends, and every half minute while idle (connections
 * come and go without processes). */
#define TIDY_DELAY_MS  2000
#define TIDY_PERIOD_MS 30000

struct sbx_lifecycle {
    struct sbx_lifecycle_opts o;
    struct sbx_loop *loop;
    struct sbx_proctab *procs;
    struct sbx_watch signals;
    struct sbx_timer kill_timer, deadline_timer, tidy_timer;
    struct sbx_lifecycle_hook *hooks[MAX_HOOKS];
    size_t n_hooks;
    bool running;      /* the loop runs: tasks run at teardown change nothing */
    bool draining;     /* read by other threads: atomic */
    bool idle;         /* draining, and no process is left */
    bool deadline_hit; /* the shutdown timeout is over */
    bool tidy_soon;    /* the tidy timer is armed for the delay, not the period */
    pid_t main_pid;    /* the main process (sandboxd -- cmd), or 0 */
    bool main_exited;
    int main_status; /* its wait status */
    int main_failed; /* 127 or 126: it could not start */
};

#define owner_of(ptr, member)                                                                      \
    ((struct sbx_lifecycle *)((char *)(ptr)-offsetof(struct sbx_lifecycle, member)))

enum hook_step { STEP_STOP, STEP_IDLE, STEP_CANCEL, STEP_TIDY };

static void run_hooks(struct sbx_lifecycle *lc, enum hook_step step)
{
    for (size_t i = 0; i < lc->n_hooks; i++) {
        struct sbx_lifecycle_hook *h = lc->hooks[i];
        void (*fn)(struct sbx_lifecycle_hook *) = step == STEP_STOP     ? h->stop
                                                  : step == STEP_IDLE   ? h->idle
                                                  : step == STEP_CANCEL ? h->cancel
                                                                        : h->tidy;
        if (fn)
            fn(h);
    }
}

static bool hooks_done(const struct sbx_lifecycle *lc)
{
    for (size_t i = 0; i < lc->n_hooks; i++)
        if (lc->hooks[i]->waits && !__atomic_load_n(&lc->hooks[i]->done, __ATOMIC_ACQUIRE))
            return false;
    return true;
}

/* The drain is over once every waiting hook is done and every process is gone, or at the
 * deadline (the kill timer has fired by then). */
static void maybe_stop(struct sbx_lifecycle *lc)
{
    if (lc->running && (lc->idle || lc->deadline_hit) && hooks_done(lc))
        sbx_loop_stop(lc->loop);
}

static void hook_finished(void *arg)
{
    maybe_stop(arg);
}

void sbx_lifecycle_hook_done(struct sbx_lifecycle_hook *h)
{
    /* Marked first: should the post fail, the next step of the drain still sees it. */
    __atomic_store_n(&h->done, true, __ATOMIC_RELEASE);
    if (h->lc)
        (void)sbx_loop_post(h->lc->loop, hook_finished, h->lc);
}

static void tidy_expired(struct sbx_timer *t)
{
    struct sbx_lifecycle *lc = owner_of(t, tidy_timer);

    lc->tidy_soon = false;
#ifdef __GLIBC__
    if (sbx_proctab_count(lc->procs) == 0)
        (void)malloc_trim(0);
#endif
    run_hooks(lc, STEP_TIDY);
    if (!lc->draining)
        (void)sbx_timer_arm(&lc->tidy_timer, lc->o.tidy_period_ms);
}

/* The last process left the table, or one was reaped while draining. */
static void procs_empty(void *arg)
{
    struct sbx_lifecycle *lc = arg;

    if (!lc->running)
        return;
    if (!lc->draining && !lc->tidy_soon) {
        /* Not pushed back by every process that ends: a steady trickle must not starve it. */
        lc->tidy_soon = true;
        (void)sbx_timer_arm(&lc->tidy_timer, lc->o.tidy_delay_ms);
    }
    if (lc->draining && !lc->idle && sbx_proctab_busy(lc->procs) == 0) {
        lc->idle = true;
        log_info("all processes have exited");
        (void)sbx_timer_arm(&lc->kill_timer, 0);
        run_hooks(lc, STEP_IDLE);
        maybe_stop(lc);
    }
}

static void kill_expired(struct sbx_timer *t)
{
    int n = sbx_proctab_signal_all(owner_of(t, kill_timer)->procs, SIGKILL);

    if (n > 0)
        log_warn(0, "killed %d process groups still running after the termination grace", n);
}

static void deadline_expired(struct sbx_timer *t)
{
    struct sbx_lifecycle *lc = owner_of(t, deadline_timer);

    log_warn(0, "shutdown timeout reached: cancelling the calls still running");
    lc->deadline_hit = true;
    run_hooks(lc, STEP_CANCEL);
    maybe_stop(lc);
}

static void begin_drain(struct sbx_lifecycle *lc, const char *why)
{
    uint64_t timeout = lc->o.shutdown_timeout_ms, grace = lc->o.termination_grace_ms;
    int n;

    if (lc->draining)
        return;
    __atomic_store_n(&lc->draining, true, __ATOMIC_RELEASE);
    log_info("%s: draining", why);
    run_hooks(lc, STEP_STOP);
    sbx_proctab_drain(lc->procs);
    n = sbx_proctab_signal_all(lc->procs, SIGTERM);
    if (n > 0)
        log_info("sent SIGTERM to %d process groups", n);
    if (grace >= timeout)
        grace = timeout * 3 / 4;
    (void)sbx_timer_arm(&lc->kill_timer, grace ? grace : 1);
    (void)sbx_timer_arm(&lc->deadline_timer, timeout ? timeout : 1);
    procs_empty(lc);
}

/* A reaped child outside the table: the main process, or an orphan. */
static void other_exit(void *arg, pid_t pid, int status)
{
    struct sbx_lifecycle *lc = arg;

    if (pid != lc->main_pid || lc->main_exited)
        return;
    lc->main_exited = true;
    lc->main_status = status;
    if (WIFSIGNALED(status))
        log_info("main process %d killed by signal %d", pid, WTERMSIG(status));
    else
        log_info("main process %d exited with code %d", pid, WEXITSTATUS(status));
    if (!lc->o.keep_serving)
        begin_drain(lc, "main process exited");
}

static void drain_on(struct sbx_lifecycle *lc, int sig)
{
    char why[64];

    snprintf(why, sizeof(why), "received %s", strsignal(sig));
    begin_drain(lc, why);
}

static void on_signal(struct sbx_watch *w, uint32_t events)
{
    struct sbx_lifecycle *lc = owner_of(w, signals);
    struct signalfd_siginfo si;

    (void)events;
    while (read(w->fd, &si, sizeof(si)) == sizeof(si)) {
        int sig = (int)si.ssi_signo;

        if (sig == SIGCHLD) {
            sbx_proctab_reap(lc->procs);
            if (lc->draining)
                procs_empty(lc);
        } else if (sig == SIGTERM) {
            /* The drain signals every process, the main one (and its group) included. */
            drain_on(lc, sig);
        } else if (lc->main_pid > 0 && !lc->main_exited) {
            /* With a main process, it decides; SIGINT alone drains without one. */
            (void)kill(lc->main_pid, sig);
        } else if (sig == SIGINT) {
            drain_on(lc, sig);
        } else {
            log_debug("ignoring signal %d", sig);
        }
    }
}

int sbx_lifecycle_new(struct sbx_lifecycle **ret, const struct sbx_lifecycle_opts *o,
                      struct sbx_error *err)
{
    static const int sigs[] = {SIGCHLD, SIGTERM, SIGINT,
                               /* Forwarded to the main process. */
                               SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};
    _cleanup_free_ struct sbx_lifecycle *lc = calloc(1, sizeof(*lc));
    sigset_t set;

    if (!lc)
        return sbx_error_set(err, ENOMEM, "lifecycle");
    lc->o = *o;
    if (!lc->o.tidy_delay_ms)
        lc->o.tidy_delay_ms = TIDY_DELAY_MS;
    if (!lc->o.tidy_period_ms)
        lc->o.tidy_period_ms = TIDY_PERIOD_MS;
    lc->kill_timer.watch.fd = lc->deadline_timer.watch.fd = lc->tidy_timer.watch.fd = -1;
    sigemptyset(&set);
    for (size_t i = 0; i < SBX_ARRAY_SIZE(sigs); i++)
        sigaddset(&set, sigs[i]);
    if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
        return sbx_error_set(err, errno, "sigprocmask");
    signal(SIGPIPE, SIG_IGN);
    lc->signals.fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (lc->signals.fd < 0)
        return sbx_error_set(err, errno, "signalfd");
    lc->signals.fn = on_signal;
    /* Orphans of our processes come to us, as they would to PID 1, to be reaped. */
    if (getpid() != 1)
        (void)prctl(PR_SET_CHILD_SUBREAPER, 1);
    *ret = TAKE_PTR(lc);
    return 0;
}

void sbx_lifecycle_free(struct sbx_lifecycle *lc)
{
    if (!lc)
        return;
    sbx_timer_release(&lc->kill_timer);
    sbx_timer_release(&lc->deadline_timer);
    sbx_timer_release(&lc->tidy_timer);
    if (lc->loop && lc->signals.fd >= 0)
        sbx_loop_del(lc->loop, &lc->signals);
    sbx_closep(&lc->signals.fd);
    free(lc);
}

void sbx_lifecycle_watch_procs(struct sbx_lifecycle *lc, struct sbx_proctab_opts *po)
{
    po->on_other_exit = other_exit;
    po->on_empty = procs_empty;
    po->cb_arg = lc;
}

int sbx_lifecycle_attach(struct sbx_lifecycle *lc, struct sbx_loop *loop, struct sbx_proctab *procs,
                         struct sbx_error *err)
{
    int r;

    lc->procs = procs;
    if ((r = sbx_loop_add(loop, &lc->signals, EPOLLIN, err)) < 0)
        return r;
    lc->loop = loop;
    if ((r = sbx_timer_init(&lc->kill_timer, loop, kill_expired, err)) < 0 ||
        (r = sbx_timer_init(&lc->deadline_timer, loop, deadline_expired, err)) < 0 ||
        (r = sbx_timer_init(&lc->tidy_timer, loop, tidy_expired, err)) < 0)
        return r;
    return 0;
}

int sbx_lifecycle_add_hook(struct sbx_lifecycle *lc, struct sbx_lifecycle_hook *h,
                           struct sbx_error *err)
{
    if (lc->n_hooks == MAX_HOOKS)
        return sbx_error_set(err, ENOSPC, "more than %d lifecycle hooks", MAX_HOOKS);
    h->lc = lc;
    lc->hooks[lc->n_hooks++] = h;
    return 0;
}

/* Starts the main process with our stdio and environment; when it cannot, our status will be
 * the one a shell gives (127 not found, 126 not executable) and the drain begins. */
static void start_main(struct sbx_lifecycle *lc, char *const *command)
{
    _cleanup_free_ char *path = NULL;
    struct sbx_spawn s = {.argv = command, .envp = environ, .cwd_fd = -1, .inherit_stdio = true};
    struct sbx_error err = {0};
    int r;

    r = sbx_spawn_lookup(command[0], getenv("PATH"), &path, &err);
    if (r == 0) {
        s.path = path;
        r = sbx_proctab_spawn_own(lc->procs, &s, &lc->main_pid, &err);
    }
    if (r < 0) {
        log_error(err.code, "main process: %s", err.msg);
        lc->main_failed = r == -ENOENT ? 127 : 126;
        begin_drain(lc, "main process could not start");
        return;
    }
    log_info("main process %d: %s", lc->main_pid, command[0]);
}

int sbx_lifecycle_run(struct sbx_lifecycle *lc, char *const *command, struct sbx_error *err)
{
    int r;

    lc->running = true;
    (void)sbx_timer_arm(&lc->tidy_timer, lc->o.tidy_period_ms);
    if (command)
        start_main(lc, command);
    r = sbx_loop_run(lc->loop, err);
    lc->running = false;
    return r;
}

bool sbx_lifecycle_draining(const struct sbx_lifecycle *lc)
{
    return __atomic_load_n(&lc->draining, __ATOMIC_ACQUIRE);
}

int sbx_lifecycle_exit_status(const struct sbx_lifecycle *lc, int r)
{
    if (lc && lc->main_failed)
        return lc->main_failed;
    if (r < 0)
        return EXIT_FAILURE;
    if (!lc || lc->main_pid <= 0)
        return EXIT_SUCCESS;
    if (!lc->main_exited)
        return EXIT_FAILURE;
    if (WIFSIGNALED(lc->main_status))
        return 128 + WTERMSIG(lc->main_status);
    return WEXITSTATUS(lc->main_status);
}
