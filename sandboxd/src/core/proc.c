#define _GNU_SOURCE
#include "proc.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "metrics.h"
#include "proc_internal.h"
#include "spawn.h"

/* Output is read this much at a time (rounded down to whole chunks) and delivered a chunk at a
 * time: a burst of small chunks costs one read, not a read and a FIONREAD each. */
#define READAHEAD (64u << 10)

static void dir_closep(DIR **d)
{
    if (*d)
        closedir(*d);
}

static void on_readable(struct sbx_watch *w, uint32_t events);
static void finish_locked(struct sbx_proc *p);
static void pump_locked(struct sbx_proc *p, struct out *o, int batch);

int sbx_proctab_new(struct sbx_proctab **ret, struct sbx_loop *loop,
                    const struct sbx_proctab_opts *opts, struct sbx_error *err)
{
    struct sbx_proctab *t = calloc(1, sizeof(*t));
    pthread_rwlockattr_t attr;

    if (!t)
        return sbx_error_set(err, ENOMEM, "allocate process table");
    t->loop = loop;
    t->opts = *opts;
    t->chunk_size = opts->chunk_size ? opts->chunk_size : 4096;
    t->readahead =
        READAHEAD > t->chunk_size ? READAHEAD / t->chunk_size * t->chunk_size : t->chunk_size;
    t->next_id = 1;
    pthread_mutex_init(&t->lock, NULL);
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&t->reap_lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    *ret = t;
    return 0;
}

void sbx_proctab_free(struct sbx_proctab *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < NBUCKETS; i++) {
        while (t->by_pid[i]) {
            struct sbx_proc *p = t->by_pid[i];
            t->by_pid[i] = p->next_pid;
            p->registered = false;
            sbx_proc_unref(p);
        }
    }
    /* Their frees, posted to the loop, reach t: run them before t goes. */
    sbx_loop_run_pending(t->loop);
    pthread_rwlock_destroy(&t->reap_lock);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

static size_t bucket(uint32_t key)
{
    return (key * 2654435761u) % NBUCKETS;
}

static void table_insert(struct sbx_proctab *t, struct sbx_proc *p)
{
    size_t bi = bucket((uint32_t)p->id), bp = bucket((uint32_t)p->pid);

    if (p->id > 0) {
        p->next_id = t->by_id[bi];
        t->by_id[bi] = p;
    }
    p->next_pid = t->by_pid[bp];
    t->by_pid[bp] = p;
    p->registered = true;
    t->count++;
}

/* Unlinks p; returns true when it was registered (the caller then drops the table's ref). */
static bool table_remove(struct sbx_proctab *t, struct sbx_proc *p)
{
    struct sbx_proc **pp;
    bool was, empty = false;

    pthread_mutex_lock(&t->lock);
    was = p->registered;
    if (was) {
        if (p->id > 0) {
            for (pp = &t->by_id[bucket((uint32_t)p->id)]; *pp != p; pp = &(*pp)->next_id)
                ;
            *pp = p->next_id;
        }
        for (pp = &t->by_pid[bucket((uint32_t)p->pid)]; *pp != p; pp = &(*pp)->next_pid)
            ;
        *pp = p->next_pid;
        p->registered = false;
        empty = --t->count == 0;
    }
    pthread_mutex_unlock(&t->lock);
    if (empty && t->opts.on_empty)
        t->opts.on_empty(t->opts.cb_arg);
    return was;
}

static struct sbx_proc *proc_ref(struct sbx_proc *p)
{
    __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
    return p;
}

struct sbx_proc *sbx_proc_get(struct sbx_proctab *t, int32_t id)
{
    struct sbx_proc *p;

    pthread_mutex_lock(&t->lock);
    for (p = t->by_id[bucket((uint32_t)id)]; p && p->id != id; p = p->next_id)
        ;
    if (p)
        proc_ref(p);
    pthread_mutex_unlock(&t->lock);
    return p;
}

static struct sbx_proc *get_by_pid(struct sbx_proctab *t, pid_t pid)
{
    struct sbx_proc *p;

    pthread_mutex_lock(&t->lock);
    for (p = t->by_pid[bucket((uint32_t)pid)]; p && p->pid != pid; p = p->next_pid)
        ;
    if (p)
        proc_ref(p);
    pthread_mutex_unlock(&t->lock);
    return p;
}

size_t sbx_proctab_count(struct sbx_proctab *t)
{
    size_t n;

    pthread_mutex_lock(&t->lock);
    n = t->count;
    pthread_mutex_unlock(&t->lock);
    return n;
}

/* Removes w from the loop and closes its fd; -1 afterwards. Called with p->lock held. */
static void close_watch(struct sbx_proc *p, struct sbx_watch *w)
{
    if (w->fd < 0)
        return;
    sbx_loop_del(p->t->loop, w);
    close(w->fd);
    w->fd = -1;
}

static void proc_free(void *arg)
{
    struct sbx_proc *p = arg;
    struct sbx_proc_stdin_write *writes;

    for (int i = 0; i < 2; i++) {
        close_watch(p, &p->out[i].w);
        free(p->out[i].buf);
    }
    writes = sbx_proc_stdin_shut_locked(&p->in);
    sbx_timer_release(&p->drain);
    sbx_proc_stdin_complete(writes, -EPIPE);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

void sbx_proc_unref(struct sbx_proc *p)
{
    if (!p || __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    /* On the loop, between batches: an event fetched in this batch may still point to one of
     * p's watches (epoll reports a hang-up on an fd another thread is closing). */
    if (sbx_loop_post(p->t->loop, proc_free, p) < 0)
        proc_free(p);
}

int32_t sbx_proc_id(const struct sbx_proc *p)
{
    return p->id;
}

pid_t sbx_proc_pid(const struct sbx_proc *p)
{
    return p->pid;
}

static const char *env_get(char *const *envp, const char *name)
{
    size_t n = strlen(name);

    for (; envp && *envp; envp++)
        if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
            return *envp + n + 1;
    return NULL;
}

/* Adds the fds of a freshly spawned process to the loop, all unarmed. */
static int watch_fds(struct sbx_proc *p, const struct sbx_spawned *sp, struct sbx_error *err)
{
    int fds[2] = {sp->out_fd, sp->err_fd};
    int r;

    p->in.w.fd = sp->in_fd;
    for (int i = 0; i < 2; i++) {
        p->out[i].w.fd = fds[i];
        p->out[i].w.fn = on_readable;
        p->out[i].stream = (enum sbx_stream)i;
        p->out[i].paused = true;
    }
    for (int i = 0; i < 2; i++) {
        if (p->out[i].w.fd < 0)
            continue;
        p->out[i].buf = malloc(p->t->readahead);
        if (!p->out[i].buf)
            return sbx_error_set(err, ENOMEM, "allocate output buffer");
        /* Oneshot even while unarmed: epoll reports a hang-up whatever the events asked. */
        r = sbx_loop_add(p->t->loop, &p->out[i].w, EPOLLONESHOT, err);
        if (r < 0)
            return r;
    }
    return p->in.w.fd >= 0 ? sbx_loop_add(p->t->loop, &p->in.w, EPOLLONESHOT, err) : 0;
}

static struct sbx_proc *proc_alloc(struct sbx_proctab *t, const struct sbx_proc_opts *o,
                                   const struct sbx_proc_sink *sink, void *sink_data)
{
    struct sbx_proc *p = calloc(1, sizeof(*p));

    if (!p)
        return NULL;
    p->t = t;
    p->refs = 1;
    p->pty = o->pty;
    p->credit = o->credit;
    p->sink = sink;
    p->sink_data = sink_data;
    p->out[0].w.fd = p->out[1].w.fd = p->drain.watch.fd = -1;
    pthread_mutex_init(&p->lock, NULL);
    sbx_proc_stdin_init(&p->in, t->loop, &p->lock, o->pty);
    return p;
}

static void drain_expired(struct sbx_timer *timer);

/* Takes one of the --max-processes places, or fails with -EAGAIN. */
static int reserve(struct sbx_proctab *t, struct sbx_error *err)
{
    size_t in_use;
    int r = 0;

    pthread_mutex_lock(&t->lock);
    in_use = t->count + t->starting;
    if (t->draining)
        r = sbx_error_set(err, ESHUTDOWN, "sandboxd is shutting down");
    else if (t->opts.max_procs && in_use >= t->opts.max_procs)
        r = sbx_error_set(err, EAGAIN, "too many processes: %zu of --max-processes %zu", in_use,
                          t->opts.max_procs);
    else
        t->starting++;
    pthread_mutex_unlock(&t->lock);
    return r;
}

static void run_on_empty(void *arg)
{
    struct sbx_proctab *t = arg;

    t->opts.on_empty(t->opts.cb_arg);
}

/* Gives a failed start's place back. When nothing else is in the table or starting, on_empty
 * runs, posted to the loop thread (this is the starting thread): a drain that waited for this
 * start ends now, not at its deadline. */
static void unreserve(struct sbx_proctab *t)
{
    bool empty;

    pthread_mutex_lock(&t->lock);
    t->starting--;
    empty = t->count == 0 && t->starting == 0;
    pthread_mutex_unlock(&t->lock);
    if (empty && t->opts.on_empty)
        (void)sbx_loop_post(t->loop, run_on_empty, t);
}

int sbx_proc_start(struct sbx_proctab *t, const struct sbx_proc_opts *o,
                   const struct sbx_proc_sink *sink, void *sink_data, struct sbx_proc **ret,
                   struct sbx_error *err)
{
    _cleanup_free_ char *path = NULL;
    struct sbx_spawned sp;
    struct timespec t0, t1;
    struct sbx_spawn s = {.argv = o->argv,
                          .envp = o->envp,
                          .cwd_fd = o->cwd_fd,
                          .pty = o->pty,
                          .cols = o->cols,
                          .rows = o->rows,
                          .stdin_null = o->anonymous || o->stdin_null,
                          .confine = o->confine,
                          .oom_score_adj = t->opts.oom_score_adj};
    struct sbx_proc *p;
    bool late;
    int r;

    if (!o->argv || !o->argv[0] || !o->argv[0][0])
        return sbx_error_set(err, EINVAL, "command must not be empty");
    r = sbx_spawn_lookup(o->argv[0], env_get(o->envp, "PATH"), &path, err);
    if (r < 0)
        return r;
    s.path = path;
    r = reserve(t, err);
    if (r < 0)
        return r;
    p = proc_alloc(t, o, sink, sink_data);
    if (!p) {
        unreserve(t);
        return sbx_error_set(err, ENOMEM, "allocate process");
    }

    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_rwlock_rdlock(&t->reap_lock);
    r = sbx_spawn_run(&s, &sp, err);
    if (r < 0) {
        pthread_rwlock_unlock(&t->reap_lock);
        unreserve(t);
        goto fail;
    }
    p->pid = sp.pid;
    *ret = p; /* before any output can reach the sink */
    r = watch_fds(p, &sp, err);
    if (r < 0) {
        /* Its sink, which the caller frees on failure, must not hear of it: silenced before
         * the reaper, held off by reap_lock, can see its exit. */
        pthread_mutex_lock(&p->lock);
        p->sink = NULL;
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_lock(&t->lock);
    p->id = p->in.id = o->anonymous ? 0 : t->next_id++;
    table_insert(t, proc_ref(p));
    t->starting--;      /* the reservation became an entry */
    late = t->draining; /* reserved before the drain, registered after its signals */
    pthread_mutex_unlock(&t->lock);
    pthread_rwlock_unlock(&t->reap_lock);
    if (late && r == 0)
        (void)sbx_proc_signal(p, SIGTERM, NULL);
    if (r < 0) {
        /* Registered already, so the reaper will collect it; it must not run unobserved. */
        kill(-p->pid, SIGKILL);
        sbx_proc_detach(p);
        goto fail;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    sbx_metrics_process_started((uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u +
                                (uint64_t)(t1.tv_nsec - t0.tv_nsec));
    if (o->credit != 0) {
        /* Credit from the start: arm the fds; the loop reads them once there is something. */
        pthread_mutex_lock(&p->lock);
        for (int i = 0; i < 2; i++) {
            if (p->out[i].w.fd >= 0 && p->out[i].paused) {
                p->out[i].paused = false;
                (void)sbx_loop_mod(t->loop, &p->out[i].w, EPOLLIN | EPOLLONESHOT);
            }
        }
        pthread_mutex_unlock(&p->lock);
    }
    return 0;
fail:
    *ret = NULL;
    sbx_proc_unref(p);
    return r;
}

/* Output fds move between three states, under p->lock:
 *   armed  - waiting in epoll (oneshot), only the loop thread touches it;
 *   paused - out of epoll for want of credit; whoever gives credit pumps it;
 *   busy   - a thread is reading it and delivering; others leave a note (again) and go.
 * A sink's credit thus pulls the next chunk on the thread that returned it (a completion-queue
 * thread when streaming), with no hop through the loop while output keeps coming. */

/* Reads a chunk at most this many times per epoll event before yielding to other fds. */
#define PUMP_BATCH 16

static void finish_task(void *arg)
{
    struct sbx_proc *p = arg;

    pthread_mutex_lock(&p->lock);
    finish_locked(p);
    sbx_proc_unref(p);
}

/* Delivers the exit if that is all that is left, on the loop thread. Releases p->lock. */
static void maybe_finish_locked(struct sbx_proc *p)
{
    if (!p->exited || p->delivered || p->out[0].w.fd >= 0 || p->out[1].w.fd >= 0) {
        pthread_mutex_unlock(&p->lock);
        return;
    }
    if (sbx_loop_is_current(p->t->loop)) {
        finish_locked(p);
        return;
    }
    if (sbx_loop_post(p->t->loop, finish_task, p) == 0)
        proc_ref(p);
    pthread_mutex_unlock(&p->lock);
}

static void pump_task(void *arg)
{
    struct out *o = arg;
    struct sbx_proc *p = container_of(o, struct sbx_proc, out[o->stream]);

    pthread_mutex_lock(&p->lock);
    pump_locked(p, o, PUMP_BATCH);
    sbx_proc_unref(p);
}

/* Lets other fds have the loop: re-arms o, or, when read-ahead is left or the drain expired
 * (an empty pipe may never wake epoll again), queues another pump. */
static void yield_locked(struct sbx_proc *p, struct out *o)
{
    if (p->drain_expired || o->pos < o->len) {
        if (sbx_loop_post(p->t->loop, pump_task, o) == 0)
            proc_ref(p);
        return;
    }
    (void)sbx_loop_mod(p->t->loop, &o->w, EPOLLIN | EPOLLONESHOT);
}

/* Reads o and delivers chunks while credit lasts (batch: how many chunks at most, -1 for no
 * limit). Called with p->lock held; releases it. */
static void pump_locked(struct sbx_proc *p, struct out *o, int batch)
{
    if (o->busy) {
        o->again = true;
        pthread_mutex_unlock(&p->lock);
        return;
    }
    o->busy = true;
    o->paused = false;
    for (;;) {
        const struct sbx_proc_sink *sink;
        void *data;
        ssize_t n = 0; /* what the read below returned, when it ran */

        o->again = false;
        if (o->w.fd < 0)
            break;
        if (p->credit == 0) {
            o->paused = true;
            break;
        }
        if (batch-- == 0) {
            yield_locked(p, o);
            break;
        }
        if (o->pos == o->len) {
            do {
                n = read(o->w.fd, o->buf, p->t->readahead);
            } while (n < 0 && errno == EINTR);
            if (n > 0) {
                o->pos = 0;
                o->len = (size_t)n;
            }
        }
        if (o->pos < o->len) {
            const uint8_t *chunk = o->buf + o->pos;
            size_t len = o->len - o->pos < p->t->chunk_size ? o->len - o->pos : p->t->chunk_size;
            bool more;
            int avail = 0;

            o->pos += len;
            more = o->pos < o->len;
            /* A read that filled the buffer may have left more in the pipe. */
            if (!more && o->len == p->t->readahead && ioctl(o->w.fd, FIONREAD, &avail) == 0)
                more = avail > 0;
            if (p->credit > 0)
                p->credit--;
            sink = p->discard ? NULL : p->sink;
            data = p->sink_data;
            pthread_mutex_unlock(&p->lock);
            if (sink)
                sink->output(data, o->stream, chunk, len, more);
            pthread_mutex_lock(&p->lock);
            continue;
        }
        if (n < 0 && errno == EAGAIN && !p->drain_expired) {
            if (o->again)
                continue;
            (void)sbx_loop_mod(p->t->loop, &o->w, EPOLLIN | EPOLLONESHOT);
            break;
        }
        /* EOF; EIO from a pty whose slave is closed; or nothing left once the drain after the
         * exit expired (a background job may hold the write end forever). */
        close_watch(p, &o->w);
    }
    o->busy = false;
    maybe_finish_locked(p);
}

static void on_readable(struct sbx_watch *w, uint32_t events)
{
    struct out *o = container_of(w, struct out, w);
    struct sbx_proc *p = container_of(o, struct sbx_proc, out[o->stream]);

    (void)events;
    pthread_mutex_lock(&p->lock);
    pump_locked(p, o, PUMP_BATCH);
}

/* Pumps what waited for credit, then delivers the exit when it is all that is left. */
static void wake(struct sbx_proc *p)
{
    for (int i = 0; i < 2; i++) {
        pthread_mutex_lock(&p->lock);
        if (p->out[i].paused)
            pump_locked(p, &p->out[i], -1);
        else
            pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_lock(&p->lock);
    maybe_finish_locked(p);
}

size_t sbx_proctab_chunk_size(const struct sbx_proctab *t)
{
    return t->chunk_size;
}

void sbx_proc_ack(struct sbx_proc *p)
{
    pthread_mutex_lock(&p->lock);
    if (p->credit >= 0)
        p->credit++;
    pthread_mutex_unlock(&p->lock);
    wake(p);
}

void sbx_proc_unlimit(struct sbx_proc *p)
{
    pthread_mutex_lock(&p->lock);
    p->credit = SBX_CREDIT_UNLIMITED;
    pthread_mutex_unlock(&p->lock);
    wake(p);
}

void sbx_proc_detach(struct sbx_proc *p)
{
    pthread_mutex_lock(&p->lock);
    p->discard = true;
    p->credit = SBX_CREDIT_UNLIMITED;
    pthread_mutex_unlock(&p->lock);
    wake(p);
}

/* Delivers the exit once output is drained and credit allows, then unregisters p. Called with
 * p->lock held, on the loop thread; releases it. */
static void finish_locked(struct sbx_proc *p)
{
    const struct sbx_proc_sink *sink = p->discard ? NULL : p->sink;
    void *data = p->sink_data;
    struct sbx_exit ex = p->ex;

    if (!p->exited || p->delivered || p->out[0].w.fd >= 0 || p->out[1].w.fd >= 0 ||
        (sink && p->credit == 0)) {
        pthread_mutex_unlock(&p->lock);
        return;
    }
    p->delivered = true;
    if (p->credit > 0)
        p->credit--;
    sbx_timer_release(&p->drain);
    pthread_mutex_unlock(&p->lock);
    if (table_remove(p->t, p))
        sbx_proc_unref(p);
    /* A detached sink still hears of the exit, so that its owner can let go. */
    if (p->sink)
        p->sink->exit(data, &ex);
}

/* The drain after the exit is over: each fd is read until empty, then closed. A paused one is
 * left to its reader (output from before the exit is never dropped); a busy one re-checks. */
static void expire_drain(struct sbx_proc *p)
{
    pthread_mutex_lock(&p->lock);
    p->drain_expired = true;
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < 2; i++) {
        pthread_mutex_lock(&p->lock);
        if (p->out[i].w.fd >= 0 && !p->out[i].paused)
            pump_locked(p, &p->out[i], PUMP_BATCH);
        else
            pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_lock(&p->lock);
    maybe_finish_locked(p);
}

static void drain_expired(struct sbx_timer *timer)
{
    expire_drain(container_of(timer, struct sbx_proc, drain));
}

static void fill_exit(struct sbx_exit *ex, int status)
{
    ex->status = status;
    if (WIFEXITED(status)) {
        ex->exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        ex->exit_code = -1;
        ex->signal = WTERMSIG(status);
        ex->core_dumped = WCOREDUMP(status);
    } else {
        ex->exit_code = -1;
    }
}

static void proc_exited(struct sbx_proc *p, int status)
{
    struct sbx_proc_stdin_write *writes;
    bool open;

    sbx_metrics_process_exited();
    pthread_mutex_lock(&p->lock);
    p->exited = true;
    fill_exit(&p->ex, status);
    writes = sbx_proc_stdin_shut_locked(&p->in);
    /* Read what is there now: usually the pipes are at EOF already. */
    for (int i = 0; i < 2; i++) {
        if (p->out[i].w.fd >= 0 && !p->out[i].paused) {
            pump_locked(p, &p->out[i], PUMP_BATCH);
            pthread_mutex_lock(&p->lock);
        }
    }
    open = p->out[0].w.fd >= 0 || p->out[1].w.fd >= 0;
    if (open && p->t->opts.exit_drain_ms &&
        sbx_timer_init(&p->drain, p->t->loop, drain_expired, NULL) == 0) {
        (void)sbx_timer_arm(&p->drain, p->t->opts.exit_drain_ms);
        open = false;
    }
    maybe_finish_locked(p);
    if (open)
        expire_drain(p);
    sbx_proc_stdin_complete(writes, -EPIPE);
}

void sbx_proctab_reap(struct sbx_proctab *t)
{
    for (;;) {
        struct sbx_proc *p;
        int status;
        pid_t pid;

        pthread_rwlock_wrlock(&t->reap_lock);
        pid = waitpid(-1, &status, WNOHANG);
        p = pid > 0 ? get_by_pid(t, pid) : NULL;
        pthread_rwlock_unlock(&t->reap_lock);
        if (pid <= 0)
            break;
        if (p) {
            proc_exited(p, status);
            sbx_proc_unref(p);
        } else if (t->opts.on_other_exit) {
            t->opts.on_other_exit(t->opts.cb_arg, pid, status);
        }
    }
}

int sbx_proctab_spawn_own(struct sbx_proctab *t, const struct sbx_spawn *s, pid_t *pid,
                          struct sbx_error *err)
{
    struct sbx_spawned sp;
    int r;

    pthread_rwlock_rdlock(&t->reap_lock);
    r = sbx_spawn_run(s, &sp, err);
    pthread_rwlock_unlock(&t->reap_lock);
    if (r < 0)
        return r;
    for (int i = 0; i < 3; i++) {
        int fd = i == 0 ? sp.in_fd : i == 1 ? sp.out_fd : sp.err_fd;
        if (fd >= 0)
            close(fd);
    }
    *pid = sp.pid;
    return 0;
}

/* Calls fn on each of our children, orphans re-parented to us included (we are PID 1 or a
 * subreaper). Returns how many, or -errno without /proc. */
static int for_each_child(void (*fn)(pid_t pid, int sig), int sig)
{
    _cleanup_(dir_closep) DIR *d = opendir("/proc/self/task");
    struct dirent *de;
    int n = 0;

    if (!d)
        return -errno;
    while ((de = readdir(d))) {
        char path[64];
        _cleanup_fclose_ FILE *f = NULL;
        long pid;

        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%.16s/children", de->d_name);
        f = fopen(path, "re");
        while (f && fscanf(f, "%ld", &pid) == 1) {
            if (fn)
                fn((pid_t)pid, sig);
            n++;
        }
    }
    return n;
}

static void signal_child(pid_t pid, int sig)
{
    pid_t pgid = getpgid(pid);

    (void)kill(pid, sig);
    if (pgid > 0 && pgid != getpgrp())
        (void)kill(-pgid, sig);
}

int sbx_proctab_signal_all(struct sbx_proctab *t, int sig)
{
    int n = 0;

    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < NBUCKETS; i++)
        for (struct sbx_proc *p = t->by_pid[i]; p; p = p->next_pid)
            if (kill(-p->pid, sig) == 0)
                n++;
    pthread_mutex_unlock(&t->lock);
    /* Members of those groups whose leader is gone, and other orphans. */
    (void)for_each_child(signal_child, sig);
    return n;
}

void sbx_proctab_drain(struct sbx_proctab *t)
{
    pthread_mutex_lock(&t->lock);
    t->draining = true;
    pthread_mutex_unlock(&t->lock);
}

size_t sbx_proctab_busy(struct sbx_proctab *t)
{
    int children = for_each_child(NULL, 0);
    size_t n;

    pthread_mutex_lock(&t->lock);
    n = t->count + t->starting;
    pthread_mutex_unlock(&t->lock);
    return n + (children > 0 ? (size_t)children : 0);
}

int sbx_proc_signal(struct sbx_proc *p, int sig, struct sbx_error *err)
{
    int r = 0;

    pthread_mutex_lock(&p->lock);
    /* Exited but not yet delivered: like the reference, succeed without signalling (the pid
     * may be reused once reaped). */
    if (!p->exited && kill(-p->pid, sig) < 0)
        r = sbx_error_set(err, errno, "signal process %d", p->id);
    pthread_mutex_unlock(&p->lock);
    return r;
}

int sbx_proc_with_pid(struct sbx_proc *p, int (*fn)(pid_t pid, void *arg), void *arg)
{
    int r = 0;

    pthread_mutex_lock(&p->lock);
    if (!p->exited)
        r = fn(p->pid, arg);
    pthread_mutex_unlock(&p->lock);
    return r;
}

int sbx_proc_resize(struct sbx_proc *p, unsigned short cols, unsigned short rows,
                    struct sbx_error *err)
{
    struct winsize ws = {.ws_col = cols, .ws_row = rows};
    int r = 0;

    if (!p->pty)
        return sbx_error_set(err, ENOTTY, "process is completed or has no active PTY");
    pthread_mutex_lock(&p->lock);
    if (p->exited || p->out[0].w.fd < 0)
        r = sbx_error_set(err, ENOTTY, "process is completed or has no active PTY");
    else if (ioctl(p->out[0].w.fd, TIOCSWINSZ, &ws) < 0)
        r = sbx_error_set(err, errno, "resize tty of process %d", p->id);
    pthread_mutex_unlock(&p->lock);
    return r;
}

int sbx_proc_write(struct sbx_proc *p, const uint8_t *buf, size_t len, sbx_write_done_fn done,
                   void *data, struct sbx_error *err)
{
    return sbx_proc_stdin_queue(&p->in, buf, len, false, done, data, err);
}

int sbx_proc_close_stdin(struct sbx_proc *p, sbx_write_done_fn done, void *data,
                         struct sbx_error *err)
{
    return sbx_proc_stdin_queue(&p->in, NULL, 0, true, done, data, err);
}

int sbx_proc_write_close(struct sbx_proc *p, const uint8_t *buf, size_t len, sbx_write_done_fn done,
                         void *data, struct sbx_error *err)
{
    return sbx_proc_stdin_queue(&p->in, buf, len, true, done, data, err);
}
