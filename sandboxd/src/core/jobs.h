/* Detached processes ("jobs"): started through the process table with a sink that never
 * blocks them, their output kept in per-stream rings addressed by absolute offsets, their
 * record and output tail kept after the exit for a bounded time. Knows nothing of the wire. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "budget.h"
#include "error.h"
#include "loop.h"
#include "cgroup.h"
#include "proc.h"

struct sbx_jobs;
struct sbx_job;

enum sbx_exit_reason {
    SBX_EXIT_RUNNING = 0,
    SBX_EXIT_EXITED,    /* exited on its own */
    SBX_EXIT_SIGNALED,  /* a signal nobody here sent */
    SBX_EXIT_KILLED,    /* after a client's signal */
    SBX_EXIT_TIMED_OUT, /* after its timeout */
    SBX_EXIT_OOM,       /* by the OOM killer */
    SBX_EXIT_SHUTDOWN,  /* the daemon shut down */
};

enum sbx_signal_scope {
    SBX_SIGNAL_GROUP = 0,
    SBX_SIGNAL_PROCESS,
    SBX_SIGNAL_TREE,
};

struct sbx_jobs_opts {
    size_t ring_bytes;                /* output held per stream */
    struct sbx_budget *output_budget; /* what all rings hold at once; NULL: no bound */
    uint64_t retain_ms;               /* an exited job is kept this long */
    size_t max_exited;                /* and at most this many exited jobs (the oldest go first) */
    uint64_t default_grace_ms;
    struct sbx_cgroups *cgroups; /* NULL: no cgroups */
    const char *cgroups_why;     /* why not, when NULL */
};

struct sbx_job_spec {
    struct sbx_proc_opts proc; /* credit and anonymous are set here */
    const char *tag;
    uint64_t timeout_ms; /* 0: none */
    uint64_t grace_ms;   /* 0: the default */
    size_t ring_bytes;   /* output held per stream; 0: the default */
    /* Its output is read from the process no faster than one holder takes it (sbx_job_hold), so
     * nothing the holder has not read is dropped from the ring: the process waits instead, as
     * on a pipe. For a client that must see every byte (E2B's Start); sbx_job_unhold lets go. */
    bool held;
    uint64_t memory_bytes, pids; /* cgroup limits; 0: none */
    /* Kept with the job for whoever lists it, as the client asked (the environment and the
     * directory the process got hold more): variables as NAME=value, NULL-terminated (NULL:
     * none), and the working directory (NULL: none asked for). */
    char *const *envs;
    const char *cwd;
};

/* A snapshot of a job. */
struct sbx_job_info {
    int32_t id;
    pid_t pid;
    const char *tag;   /* the job's, valid while the caller holds its reference */
    char *const *argv; /* likewise */
    char *const *envs; /* the spec's, NULL-terminated (never NULL); likewise */
    const char *cwd;   /* the spec's, or NULL; likewise */
    bool pty, stdin_open;
    bool exited;
    struct timespec started, ended; /* CLOCK_REALTIME */
    struct sbx_exit ex;
    enum sbx_exit_reason reason;
    uint64_t start[2], end[2]; /* ring offsets per stream */
};

int sbx_jobs_new(struct sbx_jobs **ret, struct sbx_loop *loop, struct sbx_proctab *procs,
                 const struct sbx_jobs_opts *o, struct sbx_error *err);
/* On the loop thread, after the loop stopped. */
void sbx_jobs_free(struct sbx_jobs *j);

/* The daemon is shutting down: jobs still running will exit for that reason. */
void sbx_jobs_shutdown(struct sbx_jobs *j);

/* Starts a job, in a cgroup of its own when cgroups are given; returns 0 and a reference, or
 * -errno like sbx_proc_start (-EOPNOTSUPP: a limit no cgroup can enforce). */
int sbx_job_start(struct sbx_jobs *j, const struct sbx_job_spec *s, struct sbx_job **ret,
                  struct sbx_error *err);

/* Looks a job up; a reference or NULL. */
struct sbx_job *sbx_job_get(struct sbx_jobs *j, int32_t id);
void sbx_job_unref(struct sbx_job *job);

/* References to every job (with the tag, when not NULL) in start order; *ret is malloc'ed. */
size_t sbx_jobs_list(struct sbx_jobs *j, const char *tag, struct sbx_job ***ret);

void sbx_job_info(struct sbx_job *job, struct sbx_job_info *out);
struct sbx_proc *sbx_job_proc(struct sbx_job *job);

/* Copies output held from offset on; *at is the offset of the first byte copied (beyond
 * offset when older output was dropped from the ring). Returns the bytes copied. */
size_t sbx_job_read(struct sbx_job *job, enum sbx_stream s, uint64_t offset, uint8_t *buf, size_t n,
                    uint64_t *at);

/* One-shot wake-up for a reader: fn runs (on the loop thread) once output beyond the given ends
 * arrives or the job exits. */
struct sbx_job_waiter {
    void (*fn)(struct sbx_job_waiter *w);
    struct sbx_job_waiter *next;
    uint64_t seen[2]; /* ends the reader has read up to; UINT64_MAX: stream not wanted */
    bool armed;
};

/* Arms w; returns false (w not armed) when there is news already, so the caller reads again. */
bool sbx_job_watch(struct sbx_job *job, struct sbx_job_waiter *w);
/* Disarms w; returns true when it was armed (fn will not run), false when fn ran or will. */
bool sbx_job_unwatch(struct sbx_job *job, struct sbx_job_waiter *w);

/* The holder of a held job has read stream s up to offset: the process may write more. A
 * no-op for a job not held. Thread-safe. */
void sbx_job_hold(struct sbx_job *job, enum sbx_stream s, uint64_t offset);
/* The holder is gone: the job's output is read as any job's from now on (the oldest drops when
 * nobody keeps up). Thread-safe; idempotent. */
void sbx_job_unhold(struct sbx_job *job);

/* Signals the job (group, process alone, or tree); returns how many processes were signalled
 * (0 once it has exited), or -errno. */
int sbx_job_signal(struct sbx_job *job, int sig, enum sbx_signal_scope scope,
                   struct sbx_error *err);

/* Forgets an exited job; -EBUSY while it runs, -ENOENT when unknown. */
int sbx_job_remove(struct sbx_jobs *j, int32_t id, struct sbx_error *err);
