/* The daemon's life as PID 1: the signals it reads from a signalfd, the main process it
 * supervises (sandboxd -- cmd) and whose status becomes its own, and the drain that ends it.
 *
 * SIGTERM, SIGINT without a main process, or the main process's exit (unless keep_serving)
 * begins the drain: new work is refused, every process group gets SIGTERM, SIGKILL after the
 * termination grace; the loop stops once no process is left and every waiting hook is done, or
 * at the shutdown timeout (once the waiting hooks are done). Other signals go to the main
 * process. What the servers do at each step they register as hooks: this module knows nothing
 * of gRPC or HTTP. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "loop.h"
#include "proc.h"

struct sbx_lifecycle;

struct sbx_lifecycle_opts {
    uint64_t shutdown_timeout_ms;  /* the drain's bound; then the cancel hooks run */
    uint64_t termination_grace_ms; /* SIGTERM to SIGKILL; 3/4 of the timeout when not below it */
    bool keep_serving;             /* the main process's exit does not begin the drain */
    uint64_t tidy_delay_ms;        /* tidy after the last process ended (0: 2 s) */
    uint64_t tidy_period_ms;       /* and this often while serving (0: 30 s) */
};

/* What a server does at each step; embed it in its owner. Every callback may be NULL and runs on
 * the loop thread; hooks run in the order they were added. */
struct sbx_lifecycle_hook {
    /* The drain began: refuse new work. */
    void (*stop)(struct sbx_lifecycle_hook *h);
    /* Draining, and no process is left. */
    void (*idle)(struct sbx_lifecycle_hook *h);
    /* The shutdown timeout passed: end what still runs. A waiting hook must then report done. */
    void (*cancel)(struct sbx_lifecycle_hook *h);
    /* While serving, shortly after the last process ended and periodically: give back what is
     * left over. */
    void (*tidy)(struct sbx_lifecycle_hook *h);
    bool waits; /* the loop stops only after sbx_lifecycle_hook_done(h) */
    void *arg;  /* the owner's */
    /* Private. */
    struct sbx_lifecycle *lc;
    bool done;
};

/* Blocks the signals it reads (SIGCHLD, SIGTERM, SIGINT and those forwarded: SIGHUP, SIGQUIT,
 * SIGUSR1, SIGUSR2, SIGWINCH), ignores SIGPIPE and opens the signalfd. Call it before any thread
 * starts: a thread made earlier would take the signals itself. Returns 0 or -errno. */
int sbx_lifecycle_new(struct sbx_lifecycle **ret, const struct sbx_lifecycle_opts *o,
                      struct sbx_error *err);

/* After the process table (whose callbacks it is) and before the loop. Accepts NULL. */
void sbx_lifecycle_free(struct sbx_lifecycle *lc);

/* Sets the process table's on_other_exit and on_empty to the lifecycle's (the main process's
 * exit, the drain's end); call before sbx_proctab_new. */
void sbx_lifecycle_watch_procs(struct sbx_lifecycle *lc, struct sbx_proctab_opts *po);

/* Watches the signalfd on loop and makes the timers; procs is the table made with
 * sbx_lifecycle_watch_procs. Returns 0 or -errno. */
int sbx_lifecycle_attach(struct sbx_lifecycle *lc, struct sbx_loop *loop, struct sbx_proctab *procs,
                         struct sbx_error *err);

/* Adds h to the table of hooks (borrowed: it must outlive lc), before sbx_lifecycle_run.
 * Returns 0 or -ENOSPC. */
int sbx_lifecycle_add_hook(struct sbx_lifecycle *lc, struct sbx_lifecycle_hook *h,
                           struct sbx_error *err);

/* A waiting hook has finished (its server's last call ended). Thread-safe; once is enough, more
 * change nothing. A hook never added is only marked. */
void sbx_lifecycle_hook_done(struct sbx_lifecycle_hook *h);

/* Starts the main process when command is not NULL (our stdio and environment; when it cannot
 * start, the drain begins and our status will be 127, not found, or 126), then runs the loop
 * until the drain ends. Call once, after sbx_lifecycle_attach. Returns 0 or -errno (the loop
 * failed). */
int sbx_lifecycle_run(struct sbx_lifecycle *lc, char *const *command, struct sbx_error *err);

/* Whether the drain has begun. Thread-safe (readiness probes ask from server threads). */
bool sbx_lifecycle_draining(const struct sbx_lifecycle *lc);

/* Our exit status, given what setup and sbx_lifecycle_run returned (r): the main process's
 * (128 + signal when killed, as a shell gives), 127 or 126 when it could not start, failure when
 * it has not exited or r < 0, else success. lc may be NULL (setup failed before it). */
int sbx_lifecycle_exit_status(const struct sbx_lifecycle *lc, int r);
