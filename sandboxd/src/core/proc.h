/* The process table: processes started on request, addressed by virtual ids (a counter from 1),
 * their output read on the loop thread with credit-based flow control, their exits delivered by
 * the one reaper. Knows nothing of gRPC. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "loop.h"
#include "spawn.h"

struct sbx_proc;
struct sbx_proctab;

enum sbx_stream {
    SBX_STDOUT = 0,
    SBX_STDERR = 1,
};

struct sbx_exit {
    int status;    /* raw wait status */
    int exit_code; /* the exit code, or -1 when killed by a signal */
    int signal;    /* terminating signal, or 0 */
    bool core_dumped;
};

/* How a process's owner hears of it. Both run on the loop thread; each consumes one credit. */
struct sbx_proc_sink {
    /* A chunk of output; the callee copies what it keeps. more: the fd has more to read right
     * now, so another chunk follows as soon as credit allows (a transport may batch). */
    void (*output)(void *data, enum sbx_stream stream, const uint8_t *buf, size_t len, bool more);
    /* Once, after the process exited and its output was drained. */
    void (*exit)(void *data, const struct sbx_exit *ex);
};

#define SBX_CREDIT_UNLIMITED (-1)

struct sbx_proc_opts {
    char *const *argv; /* argv[0] is looked up in PATH (from envp, else the default) */
    char *const *envp; /* the whole environment */
    int cwd_fd;        /* directory to run in, or -1 */
    bool pty;
    unsigned short cols, rows;
    int credit;      /* initial output credit: 0 to wait for sbx_proc_ack, or unlimited */
    bool anonymous;  /* no id (not found by sbx_proc_get), stdin from /dev/null */
    bool stdin_null; /* stdin from /dev/null */
    struct sbx_spawn_confine confine;
};

struct sbx_proctab_opts {
    size_t chunk_size; /* largest output chunk */
    /* Output awaited after an exit while a pipe stays open: a background job may write a little
     * more and close its copy (or hold it forever), and a tty delivers asynchronously. */
    uint64_t exit_drain_ms;
    /* Every process's /proc/self/oom_score_adj ("" or NULL: inherited). */
    const char *oom_score_adj;
    /* Processes at once (running, or exited and not yet delivered); 0 for no limit. */
    size_t max_procs;
    /* Runs on the loop thread for each reaped child that is not in the table: the caller's own
     * (sbx_proctab_spawn_own) or an orphan re-parented to us. */
    void (*on_other_exit)(void *arg, pid_t pid, int status);
    /* Runs on the loop thread whenever the last process leaves the table, or the last start
     * under way fails with the table empty. */
    void (*on_empty)(void *arg);
    void *cb_arg; /* for on_other_exit and on_empty */
};

int sbx_proctab_new(struct sbx_proctab **ret, struct sbx_loop *loop,
                    const struct sbx_proctab_opts *opts, struct sbx_error *err);
/* After the loop stopped. */
void sbx_proctab_free(struct sbx_proctab *t);

/* Reaps every exited child (waitpid(-1)); call on SIGCHLD, on the loop thread. Exits of pids
 * outside the table go to on_other_exit. */
void sbx_proctab_reap(struct sbx_proctab *t);

/* Shutting down: refuses every start from now on (ESHUTDOWN), and sends SIGTERM to what a start
 * already under way adds to the table. Call before signalling the table. */
void sbx_proctab_drain(struct sbx_proctab *t);

/* Sends sig to the process group of every process in the table, and to each of our other
 * children and its group; returns how many table processes were signalled. */
int sbx_proctab_signal_all(struct sbx_proctab *t, int sig);

/* Processes in the table, starts under way, and our children outside it (orphans re-parented to
 * us): what a shutdown waits for. */
size_t sbx_proctab_busy(struct sbx_proctab *t);

/* Spawns a process outside the table (the main process); its exit reaches on_other_exit. Call it
 * on the loop thread or before the loop runs, so that the reaper cannot report the pid before
 * the caller knows it. Returns 0 or -errno. */
int sbx_proctab_spawn_own(struct sbx_proctab *t, const struct sbx_spawn *s, pid_t *pid,
                          struct sbx_error *err);

/* Number of processes in the table (running, or exited and not yet delivered). */
size_t sbx_proctab_count(struct sbx_proctab *t);

/* Starts a process and registers it. The sink hears of it once credit allows. Returns 0 and a
 * reference in *ret, or -errno (-ENOENT: executable not found; -EAGAIN: max_procs reached). */
int sbx_proc_start(struct sbx_proctab *t, const struct sbx_proc_opts *o,
                   const struct sbx_proc_sink *sink, void *sink_data, struct sbx_proc **ret,
                   struct sbx_error *err);

/* Looks a process up by id; returns a reference or NULL. */
struct sbx_proc *sbx_proc_get(struct sbx_proctab *t, int32_t id);
void sbx_proc_unref(struct sbx_proc *p);

/* The virtual id (a counter from 1), 0 for an anonymous process. */
int32_t sbx_proc_id(const struct sbx_proc *p);
pid_t sbx_proc_pid(const struct sbx_proc *p);

/* The largest chunk of output a sink is handed (sbx_proctab_opts.chunk_size). */
size_t sbx_proctab_chunk_size(const struct sbx_proctab *t);

/* Gives the sink one more credit (its last delivery is done). Thread-safe. */
void sbx_proc_ack(struct sbx_proc *p);

/* Credit without limit from now on (a sink that counted its credit no longer does). Thread-safe. */
void sbx_proc_unlimit(struct sbx_proc *p);

/* Stops delivering output: it is read and dropped from now on, with no credit needed. The exit is
 * still delivered, so the sink's owner can release what it holds there. Thread-safe. */
void sbx_proc_detach(struct sbx_proc *p);

/* Sends sig to the process group; a no-op once the process has exited. */
int sbx_proc_signal(struct sbx_proc *p, int sig, struct sbx_error *err);

/* Runs fn(pid, arg) under the process's lock unless it has exited (its pid may be reused once
 * reaped); returns what fn returned, or 0 after the exit. */
int sbx_proc_with_pid(struct sbx_proc *p, int (*fn)(pid_t pid, void *arg), void *arg);

/* Sets the window size; -ENOTTY when the process has no pty. */
int sbx_proc_resize(struct sbx_proc *p, unsigned short cols, unsigned short rows,
                    struct sbx_error *err);

/* Writes to stdin. done(data, 0 or -errno) runs once everything is written (maybe before this
 * returns, maybe on the loop thread). Writes are kept in order. -EPIPE once stdin is closed. */
typedef void (*sbx_write_done_fn)(void *data, int result);
int sbx_proc_write(struct sbx_proc *p, const uint8_t *buf, size_t len, sbx_write_done_fn done,
                   void *data, struct sbx_error *err);

/* Closes stdin after queued writes (for a pty: sends the EOF character). */
int sbx_proc_close_stdin(struct sbx_proc *p, sbx_write_done_fn done, void *data,
                         struct sbx_error *err);
/* Writes buf, then closes stdin, queued together: a process that exits in between fails both
 * (done gets -EPIPE), never the close alone after the data went in. */
int sbx_proc_write_close(struct sbx_proc *p, const uint8_t *buf, size_t len, sbx_write_done_fn done,
                         void *data, struct sbx_error *err);
