#define _GNU_SOURCE
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <pty.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"

#define CHILD_STACK_SIZE    (64 * 1024)
#define DEFAULT_SEARCH_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* Signals whose disposition is "ignore" in the daemon (gRPC and we ignore SIGPIPE): ignored
 * dispositions survive exec, so the child resets them. Handlers do not survive exec, and we
 * install none anyway. Computed once, at the first spawn (after gRPC is initialised). */
static int ignored[NSIG];
static int n_ignored;
static pthread_once_t ignored_once = PTHREAD_ONCE_INIT;

static void find_ignored(void)
{
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction sa;
        if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
            ignored[n_ignored++] = sig;
    }
}

/* /dev/null, opened once, for processes whose stdin is nothing. */
static int devnull = -1;
static pthread_once_t devnull_once = PTHREAD_ONCE_INIT;

static void open_devnull(void)
{
    devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* The stack a spawning thread's child runs on until it execs: one per thread, kept, since an
 * munmap per spawn costs a TLB shootdown across every CPU our threads ran on. */
static __thread void *child_stack;

static void *get_child_stack(void)
{
    if (!child_stack) {
        void *s = mmap(NULL, CHILD_STACK_SIZE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (s == MAP_FAILED)
            return NULL;
        child_stack = s;
    }
    return (char *)child_stack + CHILD_STACK_SIZE;
}

/* Isolation of every child (sbx_spawn_set_isolation), and the default profile a request may
 * ask for whatever the daemon's. */
static const struct sock_fprog *iso_seccomp, *iso_default;
static bool iso_no_new_privs;

void sbx_spawn_set_isolation(const struct sock_fprog *seccomp, const struct sock_fprog *dflt,
                             bool no_new_privs)
{
    iso_seccomp = seccomp;
    iso_default = dflt;
    iso_no_new_privs = no_new_privs;
}

bool sbx_spawn_has_default_profile(void)
{
    return iso_default != NULL;
}

static const struct sock_fprog *profile_of(const struct sbx_spawn *s)
{
    switch (s->confine.seccomp) {
    case SBX_SPAWN_SECCOMP_OFF:
        return NULL;
    case SBX_SPAWN_SECCOMP_DEFAULT:
        return iso_default;
    default:
        return iso_seccomp;
    }
}

/* The program the calling thread runs under (sbx_spawn_confine_thread), which its children
 * inherit; NULL on a thread without one. */
static __thread const struct sock_fprog *thread_prog;

/* One thread kept without a filter, made before the first thread takes one (a thread inherits
 * its creator's filter), for the children a filtered thread cannot give what they ask: it runs
 * their spawns one at a time, each for a caller that waits. */
struct handoff {
    const struct sbx_spawn *s;
    struct sbx_spawned *ret;
    struct sbx_error *err;
    int r;
    bool done;
};

static pthread_mutex_t handoff_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t handoff_cv = PTHREAD_COND_INITIALIZER;
static struct handoff *handoff_slot;
static pthread_once_t handoff_once = PTHREAD_ONCE_INIT;
static int handoff_error = EAGAIN; /* 0 once the thread runs */

static void *handoff_thread(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&handoff_mu);
    for (;;) {
        while (!handoff_slot || handoff_slot->done)
            pthread_cond_wait(&handoff_cv, &handoff_mu);
        struct handoff *h = handoff_slot;
        pthread_mutex_unlock(&handoff_mu);
        h->r = sbx_spawn_run(h->s, h->ret, h->err);
        pthread_mutex_lock(&handoff_mu);
        h->done = true;
        pthread_cond_broadcast(&handoff_cv);
    }
    return NULL;
}

static void start_handoff(void)
{
    pthread_t t;
    sigset_t all, old;

    /* Signals are for the daemon's own threads to take. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    handoff_error = pthread_create(&t, NULL, handoff_thread, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (handoff_error == 0)
        pthread_detach(t);
}

static int spawn_elsewhere(const struct sbx_spawn *s, struct sbx_spawned *ret,
                           struct sbx_error *err)
{
    struct handoff h = {.s = s, .ret = ret, .err = err};

    pthread_mutex_lock(&handoff_mu);
    while (handoff_slot)
        pthread_cond_wait(&handoff_cv, &handoff_mu);
    handoff_slot = &h;
    pthread_cond_broadcast(&handoff_cv);
    while (!h.done)
        pthread_cond_wait(&handoff_cv, &handoff_mu);
    handoff_slot = NULL;
    pthread_cond_broadcast(&handoff_cv);
    pthread_mutex_unlock(&handoff_mu);
    return h.r;
}

int sbx_spawn_confine_thread(struct sbx_error *err)
{
    if (!iso_seccomp || thread_prog)
        return 0;
    pthread_once(&handoff_once, start_handoff);
    if (handoff_error)
        return sbx_error_set(err, handoff_error, "start the spawning thread without a filter");
    /* The daemon's filter always comes with no_new_privs (main refuses the one without). */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1L, 0L, 0L, 0L) < 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, iso_seccomp, 0L, 0L) < 0)
        return sbx_error_set(err, errno, "load the seccomp filter onto a spawning thread");
    thread_prog = iso_seccomp;
    return 0;
}

/* What the child reads, prepared by the parent. */
struct child_args {
    const struct sbx_spawn *s;
    const struct sock_fprog *prog; /* to load, or NULL (none, or inherited from the thread) */
    int stdio[3];                  /* become 0, 1, 2 */
    int ctty;                      /* fd of the pty slave to make the controlling tty, or -1 */
    volatile int error;            /* errno of the failed step, written by the child */
};

static int is_executable_file(const char *path)
{
    struct stat st;

    if (stat(path, &st) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return -EACCES;
    if (access(path, X_OK) < 0)
        return -errno;
    return 0;
}

int sbx_spawn_lookup(const char *name, const char *search_path, char **ret, struct sbx_error *err)
{
    const char *p;
    int last = -ENOENT;

    if (strchr(name, '/')) {
        *ret = strdup(name);
        return *ret ? 0 : sbx_error_set(err, ENOMEM, "allocate path");
    }
    if (!search_path)
        search_path = DEFAULT_SEARCH_PATH;
    for (p = search_path;; p++) {
        const char *end = strchrnul(p, ':');
        char buf[PATH_MAX];
        size_t dlen = (size_t)(end - p);
        int r;

        if (dlen == 0)
            r = snprintf(buf, sizeof(buf), "./%s", name);
        else
            r = snprintf(buf, sizeof(buf), "%.*s/%s", (int)dlen, p, name);
        if (r > 0 && (size_t)r < sizeof(buf)) {
            r = is_executable_file(buf);
            if (r == 0) {
                *ret = strdup(buf);
                return *ret ? 0 : sbx_error_set(err, ENOMEM, "allocate path");
            }
            if (r == -EACCES)
                last = r;
        }
        if (*end == '\0')
            break;
        p = end;
    }
    return sbx_error_set(err, -last, "exec: \"%s\": executable file not found in $PATH", name);
}

static struct rlimit base_nofile;
static bool have_base_nofile;

void sbx_spawn_set_base_nofile(const struct rlimit *lim)
{
    base_nofile = *lim;
    have_base_nofile = true;
}

int sbx_rlimit_resource(const char *name)
{
    static const struct {
        const char *name;
        int resource;
    } names[] = {
        {"as", RLIMIT_AS},
        {"core", RLIMIT_CORE},
        {"cpu", RLIMIT_CPU},
        {"data", RLIMIT_DATA},
        {"fsize", RLIMIT_FSIZE},
        {"locks", RLIMIT_LOCKS},
        {"memlock", RLIMIT_MEMLOCK},
        {"msgqueue", RLIMIT_MSGQUEUE},
        {"nice", RLIMIT_NICE},
        {"nofile", RLIMIT_NOFILE},
        {"nproc", RLIMIT_NPROC},
        {"rss", RLIMIT_RSS},
        {"rtprio", RLIMIT_RTPRIO},
        {"rttime", RLIMIT_RTTIME},
        {"sigpending", RLIMIT_SIGPENDING},
        {"stack", RLIMIT_STACK},
    };

    for (size_t i = 0; i < SBX_ARRAY_SIZE(names); i++)
        if (strcmp(names[i].name, name) == 0)
            return names[i].resource;
    return -1;
}

/* Runs in the child, on its own stack, sharing the parent's memory until execve: only
 * async-signal-safe calls, no allocation, no instrumentation. */
__attribute__((no_sanitize("address", "undefined"))) static int child_main(void *arg)
{
    struct child_args *a = arg;
    const struct sbx_spawn *s = a->s;
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    const struct sock_fprog *prog = a->prog;
    sigset_t none, ttou;

    for (int i = 0; i < s->confine.n_cgroup_fds; i++)
        if (write(s->confine.cgroup_fds[i], "0", 1) < 0)
            goto fail;
    for (int i = 0; i < n_ignored; i++)
        (void)sigaction(ignored[i], &dfl, NULL);
    if (s->inherit_stdio) {
        /* Our terminal's foreground, taken from what is now a background group: allowed while
         * SIGTTOU is blocked. No terminal is fine. */
        sigemptyset(&ttou);
        sigaddset(&ttou, SIGTTOU);
        (void)sigprocmask(SIG_BLOCK, &ttou, NULL);
        if (setpgid(0, 0) < 0)
            goto fail;
        (void)tcsetpgrp(0, getpid());
    } else if (setsid() < 0) {
        goto fail;
    }
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) < 0)
        goto fail;
    if (a->ctty >= 0 && ioctl(a->ctty, TIOCSCTTY, 0) < 0)
        goto fail;
    for (int i = 0; !s->inherit_stdio && i < 3; i++) {
        /* dup2 onto itself would keep O_CLOEXEC; dup3-less fcntl clears it instead. */
        if (a->stdio[i] == i) {
            if (fcntl(i, F_SETFD, 0) < 0)
                goto fail;
        } else if (dup2(a->stdio[i], i) < 0) {
            goto fail;
        }
    }
    if (s->cwd_fd >= 0 && fchdir(s->cwd_fd) < 0)
        goto fail;
    if (have_base_nofile && syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, &base_nofile, NULL) < 0)
        goto fail;
    for (size_t i = 0; i < s->confine.n_rlimits; i++)
        if (syscall(SYS_prlimit64, 0, s->confine.rlimits[i].resource, &s->confine.rlimits[i].lim,
                    NULL) < 0)
            goto fail;
    if (s->oom_score_adj && s->oom_score_adj[0]) {
        int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            (void)!write(fd, s->oom_score_adj, strlen(s->oom_score_adj));
            close(fd);
        }
    }
    if (s->confine.set_user &&
        (syscall(SYS_setgroups, s->confine.n_groups, s->confine.groups) < 0 ||
         syscall(SYS_setresgid, s->confine.gid, s->confine.gid, s->confine.gid) < 0 ||
         syscall(SYS_setresuid, s->confine.uid, s->confine.uid, s->confine.uid) < 0))
        goto fail;
    /* Anything a library opened without O_CLOEXEC must not leak into user code. */
    (void)syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
    /* Last, so that nothing above runs under the filter (unless inherited from the thread,
     * whose filter lets all of the above through); execve itself stays allowed. A filter always
     * comes with no_new_privs. */
    if ((iso_no_new_privs || prog) && prctl(PR_SET_NO_NEW_PRIVS, 1L, 0L, 0L, 0L) < 0)
        goto fail;
    if (prog && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog, 0L, 0L) < 0)
        goto fail;
    execve(s->path, s->argv, s->envp);
fail:
    a->error = errno ? errno : EINVAL;
    _exit(127);
}

static void close_all(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sbx_closep(&fds[i]);
}

/* Makes the parent's ends: pipes, or a pty whose master is shared by stdin and stdout. */
static int make_stdio(const struct sbx_spawn *s, int parent[3], int child[3], int *ctty,
                      struct sbx_error *err)
{
    int p[2];

    if (s->pty) {
        struct winsize ws = {.ws_col = s->cols, .ws_row = s->rows};
        int master, slave;

        if (openpty(&master, &slave, NULL, NULL, (ws.ws_col && ws.ws_row) ? &ws : NULL) < 0)
            return sbx_error_set(err, errno, "openpty");
        (void)fcntl(master, F_SETFD, FD_CLOEXEC);
        (void)fcntl(slave, F_SETFD, FD_CLOEXEC);
        (void)fcntl(master, F_SETFL, O_NONBLOCK | O_RDWR);
        parent[1] = master;
        parent[0] = fcntl(master, F_DUPFD_CLOEXEC, 3);
        if (parent[0] < 0)
            return sbx_error_set(err, errno, "dup pty master");
        child[0] = slave;
        child[1] = fcntl(slave, F_DUPFD_CLOEXEC, 3);
        child[2] = fcntl(slave, F_DUPFD_CLOEXEC, 3);
        if (child[1] < 0 || child[2] < 0)
            return sbx_error_set(err, errno, "dup pty slave");
        *ctty = slave;
        return 0;
    }
    for (int i = 0; i < 3; i++) {
        if (i == 0 && s->stdin_null)
            continue; /* devnull, shared */
        if (pipe2(p, O_CLOEXEC) < 0)
            return sbx_error_set(err, errno, "pipe");
        /* stdin: the child reads p[0]; stdout/stderr: the child writes p[1]. */
        parent[i] = i == 0 ? p[1] : p[0];
        child[i] = i == 0 ? p[0] : p[1];
        (void)fcntl(parent[i], F_SETFL, O_NONBLOCK);
    }
    return 0;
}

int sbx_spawn_run(const struct sbx_spawn *s, struct sbx_spawned *ret, struct sbx_error *err)
{
    int parent[3] = {-1, -1, -1}, child[3] = {-1, -1, -1};
    struct child_args a = {.s = s, .ctty = -1};
    void *stack;
    pid_t pid;
    int r;

    a.prog = profile_of(s);
    if (thread_prog && a.prog != thread_prog)
        return spawn_elsewhere(s, ret, err); /* a filter cannot be taken off */
    if (thread_prog)
        a.prog = NULL; /* inherited */
    pthread_once(&ignored_once, find_ignored);
    pthread_once(&devnull_once, open_devnull);
    r = s->inherit_stdio ? 0 : make_stdio(s, parent, child, &a.ctty, err);
    if (r < 0)
        goto out;
    memcpy(a.stdio, child, sizeof(child));
    if (s->stdin_null && !s->pty && !s->inherit_stdio) {
        if (devnull < 0) {
            r = sbx_error_set(err, ENOENT, "open /dev/null");
            goto out;
        }
        a.stdio[0] = devnull;
    }
    stack = get_child_stack();
    if (!stack) {
        r = sbx_error_set(err, errno, "allocate child stack");
        goto out;
    }
    /* CLONE_VFORK: we resume once the child has exec'ed or exited, so a.error is final. */
    pid = clone(child_main, stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
    r = pid < 0 ? -errno : 0;
    if (r < 0) {
        r = sbx_error_set(err, -r, "clone");
        goto out;
    }
    if (a.error) {
        (void)waitpid(pid, NULL, 0);
        r = sbx_error_set(err, a.error, "exec \"%s\": %s", s->path, strerror(a.error));
        goto out;
    }
    ret->pid = pid;
    ret->in_fd = TAKE_FD(parent[0]);
    ret->out_fd = TAKE_FD(parent[1]);
    ret->err_fd = TAKE_FD(parent[2]);
out:
    close_all(parent, 3);
    close_all(child, 3);
    return r;
}

__attribute__((no_sanitize("address", "undefined"))) static int probe_main(void *arg)
{
    (void)arg;
    _exit(0);
}

int sbx_spawn_probe(void)
{
    void *stack = get_child_stack();

    if (!stack)
        return -errno;
    return clone(probe_main, stack, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL) < 0 ? -errno : 0;
}
