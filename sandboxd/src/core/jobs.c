#define _GNU_SOURCE
#include "jobs.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "ring.h"
#include "tree.h"

enum timer_phase {
    PHASE_NONE,
    PHASE_TIMEOUT, /* running; SIGTERM at expiry */
    PHASE_GRACE,   /* SIGTERM sent; SIGKILL at expiry */
    PHASE_RETAIN,  /* exited; forgotten at expiry */
};

struct sbx_job {
    struct sbx_jobs *j;
    int refs;
    struct sbx_job *prev, *next; /* the table's list, under j->lock */
    bool listed;

    int32_t id; /* 0 until started */
    pid_t pid;
    char *tag;
    char **argv;
    char **envs; /* sbx_job_spec's, for listings */
    char *cwd;
    bool pty, has_stdin;
    struct sbx_proc *proc;
    struct sbx_cgroup *cg;
    uint64_t timeout_ms, grace_ms;

    pthread_mutex_t lock; /* everything below */
    struct sbx_ring ring[2];
    /* A held job (sbx_job_spec.held) gets its output one chunk per credit, and the credit goes
     * back only while the holder's unread bytes leave room for another chunk in each ring. */
    bool held;
    bool counted;     /* its credit is counted (held, and not let go yet) */
    bool owed;        /* a chunk came whose credit is not back yet */
    uint64_t hold[2]; /* what the holder has read of each stream */
    size_t chunk;     /* the largest chunk the process table delivers */
    struct sbx_job_waiter *waiters;
    bool exited;
    struct sbx_exit ex;
    enum sbx_exit_reason reason;
    bool timed_out, shutdown;
    bool deadline_passed;    /* the timeout fired, for the process or what it left behind */
    uint64_t client_signals; /* bit n-1: a client sent signal n */
    struct timespec started, ended;
    struct sbx_timer timer;
    bool timer_ok;
    enum timer_phase phase;
};

struct sbx_jobs {
    struct sbx_loop *loop;
    struct sbx_proctab *procs;
    struct sbx_jobs_opts o;
    pthread_mutex_t lock;
    struct sbx_job *head, *tail;
    unsigned long long next_cgroup;
};

int sbx_jobs_new(struct sbx_jobs **ret, struct sbx_loop *loop, struct sbx_proctab *procs,
                 const struct sbx_jobs_opts *o, struct sbx_error *err)
{
    struct sbx_jobs *j = calloc(1, sizeof(*j));

    if (!j)
        return sbx_error_set(err, ENOMEM, "allocate job table");
    j->loop = loop;
    j->procs = procs;
    j->o = *o;
    pthread_mutex_init(&j->lock, NULL);
    *ret = j;
    return 0;
}

static struct sbx_job *job_ref(struct sbx_job *job)
{
    __atomic_add_fetch(&job->refs, 1, __ATOMIC_RELAXED);
    return job;
}

static void strv_free(char **v)
{
    if (v)
        for (char **a = v; *a; a++)
            free(*a);
    free(v);
}

static void job_free(void *arg)
{
    struct sbx_job *job = arg;

    if (job->timer_ok)
        sbx_timer_release(&job->timer);
    sbx_proc_unref(job->proc);
    /* A tree with a deadline dies whole no later than at it: when its record goes first (a
     * Remove, a Run answered, the oldest exited trimmed) or before the grace is over, what the
     * process left in its cgroup dies now, not never. */
    if (job->cg && (job->deadline_passed || job->timeout_ms))
        (void)sbx_cgroup_signal(job->cg, SIGKILL);
    sbx_cgroup_free(job->cg);
    for (int i = 0; i < 2; i++)
        sbx_ring_release(&job->ring[i]);
    strv_free(job->argv);
    strv_free(job->envs);
    free(job->cwd);
    free(job->tag);
    pthread_mutex_destroy(&job->lock);
    free(job);
}

void sbx_job_unref(struct sbx_job *job)
{
    if (!job || __atomic_sub_fetch(&job->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    /* The timer's watch goes on the loop thread, between batches. */
    if (sbx_loop_post(job->j->loop, job_free, job) < 0)
        job_free(job);
}

/* Takes job off the table's list; drops the list's reference. */
static void unlist(struct sbx_job *job)
{
    struct sbx_jobs *j = job->j;
    bool was;

    pthread_mutex_lock(&j->lock);
    was = job->listed;
    if (was) {
        if (job->prev)
            job->prev->next = job->next;
        else
            j->head = job->next;
        if (job->next)
            job->next->prev = job->prev;
        else
            j->tail = job->prev;
        job->listed = false;
    }
    pthread_mutex_unlock(&j->lock);
    if (was)
        sbx_job_unref(job);
}

void sbx_jobs_free(struct sbx_jobs *j)
{
    if (!j)
        return;
    while (j->head)
        unlist(j->head);
    pthread_mutex_destroy(&j->lock);
    free(j);
}

void sbx_jobs_shutdown(struct sbx_jobs *j)
{
    pthread_mutex_lock(&j->lock);
    for (struct sbx_job *job = j->head; job; job = job->next) {
        pthread_mutex_lock(&job->lock);
        if (!job->exited)
            job->shutdown = true;
        pthread_mutex_unlock(&job->lock);
    }
    pthread_mutex_unlock(&j->lock);
}

/* Calls each waiter of a list taken off a job. */
static void wake_all(struct sbx_job_waiter *w)
{
    while (w) {
        struct sbx_job_waiter *next = w->next;
        w->fn(w);
        w = next;
    }
}

/* Takes the waiters that have news off the job; with job->lock held. */
static struct sbx_job_waiter *take_woken_locked(struct sbx_job *job)
{
    struct sbx_job_waiter **pp = &job->waiters, *woken = NULL;

    while (*pp) {
        struct sbx_job_waiter *w = *pp;
        bool news = job->exited;
        for (int s = 0; s < 2; s++)
            news |= w->seen[s] != UINT64_MAX && job->ring[s].end > w->seen[s];
        if (news) {
            *pp = w->next;
            w->armed = false;
            w->next = woken;
            woken = w;
        } else {
            pp = &w->next;
        }
    }
    return woken;
}

/* Whether the owed credit of a held job goes back now: the holder's unread bytes leave room for
 * a whole chunk in both rings (or the holder read everything: a ring smaller than a chunk). */
static bool credit_due_locked(struct sbx_job *job)
{
    if (!job->owed)
        return false;
    for (int s = 0; job->held && s < 2; s++) {
        const struct sbx_ring *r = &job->ring[s];
        uint64_t unread = r->end - job->hold[s];
        if (unread > 0 && unread + job->chunk > r->max)
            return false;
    }
    job->owed = false;
    return true;
}

static void on_output(void *data, enum sbx_stream s, const uint8_t *buf, size_t len, bool more)
{
    struct sbx_job *job = data;
    struct sbx_job_waiter *woken;
    bool ack = false;

    (void)more;
    pthread_mutex_lock(&job->lock);
    sbx_ring_append(&job->ring[s], buf, len);
    if (job->counted) {
        job->owed = true;
        ack = credit_due_locked(job);
    }
    woken = take_woken_locked(job);
    pthread_mutex_unlock(&job->lock);
    wake_all(woken);
    if (ack) /* job->proc is set before any output reaches us (sbx_proc_start) */
        sbx_proc_ack(job->proc);
}

void sbx_job_hold(struct sbx_job *job, enum sbx_stream s, uint64_t offset)
{
    bool ack;

    pthread_mutex_lock(&job->lock);
    if (job->held && offset > job->hold[s])
        job->hold[s] = offset < job->ring[s].end ? offset : job->ring[s].end;
    ack = credit_due_locked(job);
    pthread_mutex_unlock(&job->lock);
    if (ack)
        sbx_proc_ack(job->proc);
}

void sbx_job_unhold(struct sbx_job *job)
{
    bool was;

    pthread_mutex_lock(&job->lock);
    was = job->counted;
    job->held = job->counted = job->owed = false;
    pthread_mutex_unlock(&job->lock);
    if (was) /* read as fast as it comes from now on, as any job's */
        sbx_proc_unlimit(job->proc);
}

static enum sbx_exit_reason reason_of(const struct sbx_job *job)
{
    bool killed = job->ex.signal == SIGKILL || job->ex.exit_code == 128 + SIGKILL;

    if (killed && job->cg && sbx_cgroup_oom_killed(job->cg))
        return SBX_EXIT_OOM;
    if (job->timed_out)
        return SBX_EXIT_TIMED_OUT;
    if (job->shutdown)
        return SBX_EXIT_SHUTDOWN;
    if (job->ex.signal == 0)
        return SBX_EXIT_EXITED;
    if (job->ex.signal <= 64 && (job->client_signals & (1ULL << (job->ex.signal - 1))))
        return SBX_EXIT_KILLED;
    return SBX_EXIT_SIGNALED;
}

/* Keeps at most max_exited exited jobs: forgets the oldest beyond. */
static void trim_exited(struct sbx_jobs *j)
{
    for (;;) {
        struct sbx_job *oldest = NULL;
        size_t n = 0;

        pthread_mutex_lock(&j->lock);
        for (struct sbx_job *job = j->head; job; job = job->next) {
            bool exited;
            pthread_mutex_lock(&job->lock);
            exited = job->exited;
            if (exited && (!oldest || job->ended.tv_sec < oldest->ended.tv_sec ||
                           (job->ended.tv_sec == oldest->ended.tv_sec &&
                            job->ended.tv_nsec < oldest->ended.tv_nsec)))
                oldest = job;
            pthread_mutex_unlock(&job->lock);
            n += exited;
        }
        if (n <= j->o.max_exited)
            oldest = NULL;
        else
            job_ref(oldest);
        pthread_mutex_unlock(&j->lock);
        if (!oldest)
            return;
        unlist(oldest);
        sbx_job_unref(oldest);
    }
}

static void on_timer(struct sbx_timer *t);

/* The job's timer, made when first needed (a timeout, or the retention after the exit): an fd
 * only for the jobs that need one. With job->lock held; false when it cannot be made. */
static bool timer_locked(struct sbx_job *job)
{
    struct sbx_error e = {0};

    if (!job->timer_ok && sbx_timer_init(&job->timer, job->j->loop, on_timer, &e) == 0)
        job->timer_ok = true;
    if (!job->timer_ok)
        log_warn(e.code, "job %d: no timer: %s", job->id, e.msg);
    return job->timer_ok;
}

static void on_exit_(void *data, const struct sbx_exit *ex)
{
    struct sbx_job *job = data;
    struct sbx_job_waiter *woken;

    pthread_mutex_lock(&job->lock);
    job->exited = true;
    job->ex = *ex;
    clock_gettime(CLOCK_REALTIME, &job->ended);
    job->reason = reason_of(job);
    /* After a timeout's SIGTERM the SIGKILL still comes at the end of the grace, for whatever
     * of the tree outlived the process; a timeout still to come holds for what the process left
     * in its cgroup (a fork bomb's top returns at once). The retention starts after them. */
    if (!job->cg || (job->phase != PHASE_GRACE &&
                     (job->phase != PHASE_TIMEOUT || !sbx_cgroup_has_members(job->cg)))) {
        job->phase = PHASE_RETAIN;
        if (timer_locked(job))
            (void)sbx_timer_arm(&job->timer, job->j->o.retain_ms ? job->j->o.retain_ms : 1);
    }
    woken = take_woken_locked(job);
    pthread_mutex_unlock(&job->lock);
    /* From the process: job->id and job->pid are set once the start returns, which may be
     * after this exit (the process table orders its own fields before any exit). */
    log_debug("job %d (pid %d) exited: code %d signal %d", sbx_proc_id(job->proc),
              (int)sbx_proc_pid(job->proc), ex->exit_code, ex->signal);
    /* Trimmed before the waiters hear of the exit: a list they make then is within the bound. */
    trim_exited(job->j);
    wake_all(woken);
    sbx_job_unref(job); /* the sink's */
}

static const struct sbx_proc_sink job_sink = {.output = on_output, .exit = on_exit_};

/* The whole tree and the group: what a timeout and a tree signal reach. */
static int signal_tree(pid_t pid, int sig)
{
    int n = sbx_tree_signal(pid, sig);

    /* Members of the group already orphaned (re-parented to us) are still in the group. */
    (void)kill(-pid, sig);
    return n;
}

static int signal_pid(pid_t pid, void *arg);

struct signal_args {
    int sig;
    enum sbx_signal_scope scope;
};

static void on_timer(struct sbx_timer *t)
{
    struct sbx_job *job = (struct sbx_job *)((char *)t - offsetof(struct sbx_job, timer));
    struct signal_args a = {.sig = 0, .scope = SBX_SIGNAL_TREE};
    enum timer_phase phase;

    pthread_mutex_lock(&job->lock);
    phase = job->phase;
    if (phase == PHASE_TIMEOUT && job->exited && job->cg && !sbx_cgroup_has_members(job->cg)) {
        /* What the process left in its cgroup has ended on its own before the deadline. */
        job->phase = PHASE_RETAIN;
        (void)sbx_timer_arm(&job->timer, job->j->o.retain_ms ? job->j->o.retain_ms : 1);
    } else if (phase == PHASE_TIMEOUT) {
        /* Exited: only leftovers in its cgroup kept the timer; the exit's reason stands. */
        job->timed_out = !job->exited;
        job->deadline_passed = true;
        job->phase = PHASE_GRACE;
        a.sig = SIGTERM;
        (void)sbx_timer_arm(&job->timer, job->grace_ms ? job->grace_ms : 1);
    } else if (phase == PHASE_GRACE && (!job->exited || job->cg)) {
        a.sig = SIGKILL;
        job->phase = job->exited ? PHASE_RETAIN : PHASE_NONE;
        if (job->exited)
            (void)sbx_timer_arm(&job->timer, job->j->o.retain_ms ? job->j->o.retain_ms : 1);
    }
    pthread_mutex_unlock(&job->lock);
    if (a.sig) {
        log_info("job %d (pid %d): timeout of %llu ms: %s to its tree", job->id, job->pid,
                 (unsigned long long)job->timeout_ms, a.sig == SIGTERM ? "SIGTERM" : "SIGKILL");
        if (job->cg)
            (void)sbx_cgroup_signal(job->cg, a.sig);
        else
            (void)sbx_proc_with_pid(job->proc, signal_pid, &a);
    }
    if (phase == PHASE_RETAIN)
        unlist(job);
}

static char **copy_strv(char *const *argv)
{
    size_t n = 0;
    char **a;

    while (argv[n])
        n++;
    a = calloc(n + 1, sizeof(char *));
    if (!a)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        a[i] = strdup(argv[i]);
        if (!a[i]) {
            while (i > 0)
                free(a[--i]);
            free(a);
            return NULL;
        }
    }
    return a;
}

static struct sbx_job *job_new(struct sbx_jobs *j, const struct sbx_job_spec *s,
                               struct sbx_error *err)
{
    struct sbx_job *job = calloc(1, sizeof(*job));

    if (!job) {
        sbx_error_set(err, ENOMEM, "allocate job");
        return NULL;
    }
    job->j = j;
    job->refs = 1;
    job->pty = s->proc.pty;
    job->has_stdin = !s->proc.stdin_null || s->proc.pty;
    job->timeout_ms = s->timeout_ms;
    job->phase = s->timeout_ms ? PHASE_TIMEOUT : PHASE_NONE; /* the timer is armed once started */
    job->grace_ms = s->grace_ms ? s->grace_ms : j->o.default_grace_ms;
    job->held = job->counted = s->held;
    job->chunk = sbx_proctab_chunk_size(j->procs);
    job->timer.watch.fd = -1;
    pthread_mutex_init(&job->lock, NULL);
    for (int i = 0; i < 2; i++)
        sbx_ring_init(&job->ring[i], s->ring_bytes ? s->ring_bytes : j->o.ring_bytes,
                      j->o.output_budget);
    job->argv = copy_strv(s->proc.argv);
    job->envs = copy_strv(s->envs ? s->envs : (char *const[]){NULL});
    job->cwd = s->cwd ? strdup(s->cwd) : NULL;
    job->tag = strdup(s->tag ? s->tag : "");
    if (!job->argv || !job->envs || (s->cwd && !job->cwd) || !job->tag) {
        job_free(job);
        sbx_error_set(err, ENOMEM, "allocate job");
        return NULL;
    }
    return job;
}

/* A cgroup of the job's own when we have cgroups (for its limits, its tree and OOM kills);
 * limits without the controller to enforce them are refused. */
static int make_cgroup(struct sbx_jobs *j, const struct sbx_job_spec *s, struct sbx_job *job,
                       struct sbx_error *err)
{
    char name[64];

    if (s->memory_bytes && !sbx_cgroups_has_memory(j->o.cgroups))
        return sbx_error_set(err, EOPNOTSUPP, "memory limits are unsupported here: %s",
                             j->o.cgroups ? sbx_cgroups_why_no_memory(j->o.cgroups)
                                          : j->o.cgroups_why);
    if (s->pids && !sbx_cgroups_has_pids(j->o.cgroups))
        return sbx_error_set(err, EOPNOTSUPP, "pids limits are unsupported here: %s",
                             j->o.cgroups ? sbx_cgroups_why_no_pids(j->o.cgroups)
                                          : j->o.cgroups_why);
    if (!j->o.cgroups)
        return 0;
    pthread_mutex_lock(&j->lock);
    snprintf(name, sizeof(name), "sandboxd-%d-%llu", getpid(), ++j->next_cgroup);
    pthread_mutex_unlock(&j->lock);
    return sbx_cgroup_new(j->o.cgroups, name, s->memory_bytes, s->pids, &job->cg, err);
}

int sbx_job_start(struct sbx_jobs *j, const struct sbx_job_spec *s, struct sbx_job **ret,
                  struct sbx_error *err)
{
    struct sbx_proc_opts o = s->proc;
    struct sbx_job *job = job_new(j, s, err);
    int r;

    if (!job)
        return -err->code;
    /* Listed (as not yet started, id 0) before the process exists, so that its exit, which may
     * come at once on the loop thread, finds it there. */
    pthread_mutex_lock(&j->lock);
    job->prev = j->tail;
    if (j->tail)
        j->tail->next = job;
    else
        j->head = job;
    j->tail = job_ref(job);
    job->listed = true;
    pthread_mutex_unlock(&j->lock);

    r = make_cgroup(j, s, job, err);
    if (r < 0) {
        unlist(job);
        sbx_job_unref(job);
        return r;
    }
    if (job->cg)
        o.confine.n_cgroup_fds = sbx_cgroup_join_fds(job->cg, &o.confine.cgroup_fds);
    /* A held job's credit comes back chunk by chunk (on_output); once let go, at once. */
    o.credit = s->held ? 1 : SBX_CREDIT_UNLIMITED;
    o.anonymous = false;
    clock_gettime(CLOCK_REALTIME, &job->started);
    job_ref(job); /* the sink's, dropped at the exit */
    r = sbx_proc_start(j->procs, &o, &job_sink, job, &job->proc, err);
    if (r < 0) {
        sbx_job_unref(job); /* the sink's: it never runs */
        unlist(job);
        sbx_job_unref(job);
        return r;
    }
    pthread_mutex_lock(&j->lock);
    job->id = sbx_proc_id(job->proc);
    job->pid = sbx_proc_pid(job->proc);
    pthread_mutex_unlock(&j->lock);
    /* Armed now that the process is known. Its exit may have come first: the phase, set before
     * the start, kept the timeout for what it left in its cgroup (a fork bomb's top returns at
     * once), or the exit already moved on to the retention. */
    pthread_mutex_lock(&job->lock);
    if (job->phase == PHASE_TIMEOUT && timer_locked(job))
        (void)sbx_timer_arm(&job->timer, job->timeout_ms);
    pthread_mutex_unlock(&job->lock);
    *ret = job;
    return 0;
}

struct sbx_job *sbx_job_get(struct sbx_jobs *j, int32_t id)
{
    struct sbx_job *job;

    if (id <= 0)
        return NULL;
    pthread_mutex_lock(&j->lock);
    for (job = j->head; job && job->id != id; job = job->next)
        ;
    if (job)
        job_ref(job);
    pthread_mutex_unlock(&j->lock);
    return job;
}

size_t sbx_jobs_list(struct sbx_jobs *j, const char *tag, struct sbx_job ***ret)
{
    struct sbx_job **v = NULL;
    size_t n = 0, cap = 0;

    pthread_mutex_lock(&j->lock);
    for (struct sbx_job *job = j->head; job; job = job->next) {
        if (job->id == 0 || (tag && strcmp(tag, job->tag) != 0))
            continue;
        if (n == cap) {
            struct sbx_job **nv;
            cap = cap ? cap * 2 : 16;
            nv = realloc(v, cap * sizeof(*v));
            if (!nv)
                break;
            v = nv;
        }
        v[n++] = job_ref(job);
    }
    pthread_mutex_unlock(&j->lock);
    *ret = v;
    return n;
}

void sbx_job_info(struct sbx_job *job, struct sbx_job_info *out)
{
    memset(out, 0, sizeof(*out));
    out->id = job->id;
    out->pid = job->pid;
    out->tag = job->tag;
    out->argv = job->argv;
    out->envs = job->envs;
    out->cwd = job->cwd;
    out->pty = job->pty;
    pthread_mutex_lock(&job->lock);
    out->exited = job->exited;
    out->stdin_open = job->has_stdin && !job->exited;
    out->started = job->started;
    out->ended = job->ended;
    out->ex = job->ex;
    out->reason = job->exited ? job->reason : SBX_EXIT_RUNNING;
    for (int s = 0; s < 2; s++) {
        out->start[s] = job->ring[s].start;
        out->end[s] = job->ring[s].end;
    }
    pthread_mutex_unlock(&job->lock);
}

struct sbx_proc *sbx_job_proc(struct sbx_job *job)
{
    return job->proc;
}

size_t sbx_job_read(struct sbx_job *job, enum sbx_stream s, uint64_t offset, uint8_t *buf, size_t n,
                    uint64_t *at)
{
    size_t got;

    pthread_mutex_lock(&job->lock);
    got = sbx_ring_read(&job->ring[s], offset, buf, n, at);
    pthread_mutex_unlock(&job->lock);
    return got;
}

bool sbx_job_watch(struct sbx_job *job, struct sbx_job_waiter *w)
{
    bool news;

    pthread_mutex_lock(&job->lock);
    news = job->exited;
    for (int s = 0; s < 2; s++)
        news |= w->seen[s] != UINT64_MAX && job->ring[s].end > w->seen[s];
    if (!news) {
        w->next = job->waiters;
        job->waiters = w;
        w->armed = true;
    }
    pthread_mutex_unlock(&job->lock);
    return !news;
}

bool sbx_job_unwatch(struct sbx_job *job, struct sbx_job_waiter *w)
{
    bool was;

    pthread_mutex_lock(&job->lock);
    was = w->armed;
    if (was) {
        struct sbx_job_waiter **pp = &job->waiters;
        while (*pp != w)
            pp = &(*pp)->next;
        *pp = w->next;
        w->armed = false;
    }
    pthread_mutex_unlock(&job->lock);
    return was;
}

static int signal_pid(pid_t pid, void *arg)
{
    const struct signal_args *a = arg;

    switch (a->scope) {
    case SBX_SIGNAL_PROCESS:
        return kill(pid, a->sig) < 0 ? -errno : 1;
    case SBX_SIGNAL_TREE:
        return signal_tree(pid, a->sig);
    default:
        return kill(-pid, a->sig) < 0 ? -errno : 1;
    }
}

int sbx_job_signal(struct sbx_job *job, int sig, enum sbx_signal_scope scope, struct sbx_error *err)
{
    struct signal_args a = {.sig = sig, .scope = scope};
    int r;

    if (sig < 1 || sig > 64)
        return sbx_error_set(err, EINVAL, "signal %d out of range", sig);
    pthread_mutex_lock(&job->lock);
    if (!job->exited)
        job->client_signals |= 1ULL << (sig - 1);
    pthread_mutex_unlock(&job->lock);
    /* The job's cgroup holds its whole tree, orphans included, even after the exit. */
    if (scope == SBX_SIGNAL_TREE && job->cg)
        return sbx_cgroup_signal(job->cg, sig);
    /* Under the process's own lock, so that a reaped pid is never signalled. */
    r = sbx_proc_with_pid(job->proc, signal_pid, &a);
    if (r < 0)
        return sbx_error_set(err, -r, "signal process %d", job->id);
    return r;
}

int sbx_job_remove(struct sbx_jobs *j, int32_t id, struct sbx_error *err)
{
    struct sbx_job *job = sbx_job_get(j, id);
    bool exited;

    if (!job)
        return sbx_error_set(err, ENOENT, "process %d not found", id);
    pthread_mutex_lock(&job->lock);
    exited = job->exited;
    pthread_mutex_unlock(&job->lock);
    if (exited)
        unlist(job);
    sbx_job_unref(job);
    return exited ? 0 : sbx_error_set(err, EBUSY, "process %d is still running", id);
}
