/* The process table and spawn, driven like the gRPC adapter drives them: the loop on its own
 * thread, requests from this one. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "loop.h"
#include "proc.h"
#include "proc_stdin.h"
#include "tap.h"

extern char **environ;

static struct sbx_loop *loop;
static struct sbx_proctab *procs;
static struct sbx_watch sigw;
static atomic_int empties; /* on_empty calls */

static void on_empty(void *arg)
{
    (void)arg;
    atomic_fetch_add(&empties, 1);
}

/* What a sink saw. */
struct seen {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    char out[1 << 16];
    size_t out_len, err_len, chunks;
    bool exited;
    struct sbx_exit ex;
    struct sbx_proc *proc; /* acked after every chunk when auto_ack */
    bool auto_ack;
};

static void seen_init(struct seen *s)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
}

static void on_output(void *data, enum sbx_stream st, const uint8_t *buf, size_t len, bool more)
{
    struct seen *s = data;

    (void)more;
    pthread_mutex_lock(&s->lock);
    if (st == SBX_STDOUT) {
        size_t n = len < sizeof(s->out) - 1 - s->out_len ? len : sizeof(s->out) - 1 - s->out_len;
        memcpy(s->out + s->out_len, buf, n);
        s->out_len += n;
    } else {
        s->err_len += len;
    }
    s->chunks++;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    if (s->auto_ack && s->proc)
        sbx_proc_ack(s->proc);
}

static void on_exit_(void *data, const struct sbx_exit *ex)
{
    struct seen *s = data;

    pthread_mutex_lock(&s->lock);
    s->exited = true;
    s->ex = *ex;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

static const struct sbx_proc_sink sink = {.output = on_output, .exit = on_exit_};

/* Waits up to 10 s for the exit; false on timeout. */
static bool wait_exit(struct seen *s)
{
    struct timespec ts;
    bool r;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    pthread_mutex_lock(&s->lock);
    while (!s->exited)
        if (pthread_cond_timedwait(&s->cond, &s->lock, &ts) != 0)
            break;
    r = s->exited;
    pthread_mutex_unlock(&s->lock);
    return r;
}

static struct sbx_proc *start(struct seen *s, char *const *argv, int credit, bool pty,
                              bool anonymous)
{
    struct sbx_proc_opts o = {.argv = argv,
                              .envp = environ,
                              .cwd_fd = -1,
                              .pty = pty,
                              .credit = credit,
                              .anonymous = anonymous};
    struct sbx_error e = {0};
    struct sbx_proc *p = NULL;
    int r = sbx_proc_start(procs, &o, &sink, s, &p, &e);

    if (r < 0)
        printf("# start: %s\n", e.msg);
    s->proc = p;
    return p;
}

static void on_signal(struct sbx_watch *w, uint32_t events)
{
    struct signalfd_siginfo si;

    (void)events;
    while (read(w->fd, &si, sizeof(si)) == sizeof(si))
        sbx_proctab_reap(procs);
}

static void *run_loop(void *arg)
{
    struct sbx_error e;

    (void)arg;
    sbx_loop_run(loop, &e);
    return NULL;
}

static void test_echo(void)
{
    struct seen s;
    char *argv[] = {"sh", "-c", "echo hello; echo oops >&2; exit 7", NULL};
    struct sbx_proc *p;

    seen_init(&s);
    p = start(&s, argv, SBX_CREDIT_UNLIMITED, false, false);
    ok(p && sbx_proc_id(p) > 0, "started with an id");
    ok(wait_exit(&s), "exit delivered");
    ok(s.ex.exit_code == 7 && s.ex.signal == 0, "exit code 7 (got %d)", s.ex.exit_code);
    ok(s.out_len == 6 && memcmp(s.out, "hello\n", 6) == 0, "stdout captured");
    ok(s.err_len == 5, "stderr captured (%zu)", s.err_len);
    ok(sbx_proc_get(procs, sbx_proc_id(p)) == NULL, "gone from the table after exit");
    sbx_proc_unref(p);
}

static void test_missing(void)
{
    char *argv[] = {"surely-not-a-command", NULL};
    char *empty[] = {NULL};
    struct sbx_proc_opts o = {.argv = argv, .envp = environ, .cwd_fd = -1};
    struct sbx_error e = {0};
    struct sbx_proc *p = NULL;

    ok(sbx_proc_start(procs, &o, &sink, NULL, &p, &e) == -ENOENT && !p, "missing: -ENOENT (%s)",
       e.msg);
    o.argv = empty;
    ok(sbx_proc_start(procs, &o, &sink, NULL, &p, &e) == -EINVAL, "empty argv: -EINVAL");
}

static void test_credit(void)
{
    struct seen s;
    char *argv[] = {"sh", "-c", "echo one; echo two; echo three", NULL};
    struct sbx_proc *p;
    struct timespec pause = {0, 200 * 1000 * 1000};
    size_t chunks;

    seen_init(&s);
    p = start(&s, argv, 0, false, false);
    nanosleep(&pause, NULL);
    pthread_mutex_lock(&s.lock);
    chunks = s.chunks;
    pthread_mutex_unlock(&s.lock);
    ok(chunks == 0 && !s.exited, "nothing delivered without credit");
    s.auto_ack = true;
    sbx_proc_ack(p);
    ok(wait_exit(&s), "exit delivered once credit flows");
    ok(s.out_len == 14 && memcmp(s.out, "one\ntwo\nthree\n", 14) == 0, "all output, in order");
    sbx_proc_unref(p);
}

static void written(void *data, int result)
{
    *(int *)data = result;
}

static void test_stdin(void)
{
    struct seen s;
    char *argv[] = {"cat", NULL};
    struct sbx_error e = {0};
    static char big[256 * 1024];
    int w1 = 1, w2 = 1;
    struct sbx_proc *p;

    memset(big, 'x', sizeof(big));
    seen_init(&s);
    p = start(&s, argv, SBX_CREDIT_UNLIMITED, false, false);
    ok(sbx_proc_write(p, (const uint8_t *)"ping\n", 5, written, &w1, &e) == 0, "write");
    /* More than a pipe holds: completes later, from the loop. */
    ok(sbx_proc_write(p, (const uint8_t *)big, sizeof(big), written, &w2, &e) == 0, "big write");
    ok(sbx_proc_close_stdin(p, NULL, NULL, &e) == 0, "close stdin");
    ok(wait_exit(&s), "cat exits at EOF");
    ok(w1 == 0 && w2 == 0, "writes completed (%d %d)", w1, w2);
    ok(s.ex.exit_code == 0 && s.out_len >= 5 && memcmp(s.out, "ping\n", 5) == 0, "echoed back");
    ok(sbx_proc_write(p, (const uint8_t *)"x", 1, written, &w1, &e) == -EPIPE, "write after exit");
    sbx_proc_unref(p);
}

/* A process that never reads: its stdin holds at most SBX_PROC_STDIN_MAX, a write past it is
 * refused while the others wait, and the waiting ones fail once the process is gone. */
static void test_stdin_bound(void)
{
    struct seen s;
    char *argv[] = {"sleep", "30", NULL};
    struct sbx_error e = {0};
    size_t half = SBX_PROC_STDIN_MAX / 2 + 1;
    uint8_t *buf = calloc(1, half);
    int w1 = 1, w2 = 1, w3 = 1;
    struct sbx_proc *p;

    seen_init(&s);
    p = start(&s, argv, SBX_CREDIT_UNLIMITED, false, false);
    ok(p && buf && sbx_proc_write(p, buf, half, written, &w1, &e) == 0,
       "a write of more than half the bound is held");
    ok(p && sbx_proc_write(p, buf, half, written, &w2, &e) == -EAGAIN && strstr(e.msg, "not read"),
       "a second one past the bound is refused: %s", e.msg);
    ok(p && sbx_proc_write(p, buf, 1000, written, &w3, &e) == 0, "one within it is held");
    ok(p && sbx_proc_signal(p, SIGKILL, &e) == 0 && wait_exit(&s), "the process is killed");
    ok(w1 == -EPIPE && w2 == 1 && w3 == -EPIPE,
       "the held writes fail, the refused one never ran "
       "(%d %d %d)",
       w1, w2, w3);
    free(buf);
    sbx_proc_unref(p);
}

static void test_anonymous_stdin(void)
{
    struct seen s;
    char *argv[] = {"cat", NULL};
    struct sbx_proc *p;

    seen_init(&s);
    p = start(&s, argv, SBX_CREDIT_UNLIMITED, false, true);
    ok(p && sbx_proc_id(p) == 0, "anonymous process has no id");
    ok(wait_exit(&s) && s.ex.exit_code == 0 && s.out_len == 0, "stdin is /dev/null");
    sbx_proc_unref(p);
}

/* Waits up to 10 s for every member of a process group to be gone and reaped: the reaper
 * collects re-parented members asynchronously. */
static bool group_gone(pid_t pgid)
{
    for (int i = 0; i < 200; i++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        if (kill(-pgid, 0) < 0 && errno == ESRCH)
            return true;
        nanosleep(&ts, NULL);
    }
    return false;
}

static void test_signal_group(void)
{
    struct seen s;
    char *argv[] = {"sh", "-c", "sleep 1000 & sleep 1000; echo not reached", NULL};
    struct sbx_error e = {0};
    struct sbx_proc *p;

    seen_init(&s);
    p = start(&s, argv, SBX_CREDIT_UNLIMITED, false, false);
    ok(sbx_proc_signal(p, SIGTERM, &e) == 0, "signal");
    /* The background sleep holds stdout too: only the group signal lets the exit through
     * without waiting for it. */
    ok(wait_exit(&s), "exit delivered");
    ok(s.ex.exit_code == -1 && s.ex.signal == SIGTERM, "killed by SIGTERM (%d %d)", s.ex.exit_code,
       s.ex.signal);
    ok(group_gone(sbx_proc_pid(p)), "whole group gone");
    ok(sbx_proc_signal(p, SIGTERM, &e) == 0, "signal after exit is a no-op");
    sbx_proc_unref(p);
}

static void test_background_holder(void)
{
    struct seen s;
    char *argv[] = {"sh", "-c", "sleep 1000 & echo done", NULL};
    struct sbx_proc *p;
    pid_t pgid;

    seen_init(&s);
    p = start(&s, argv, SBX_CREDIT_UNLIMITED, false, false);
    pgid = sbx_proc_pid(p);
    ok(wait_exit(&s), "exit delivered while a background job holds stdout");
    ok(s.out_len == 5 && s.ex.exit_code == 0, "output before the exit kept");
    kill(-pgid, SIGKILL);
    sbx_proc_unref(p);
}

static void test_late_output(void)
{
    struct seen s;
    char *argv[] = {"sh", "-c", "echo early; (sleep 0.2; echo late) & exit 0", NULL};
    struct sbx_proc *p;

    seen_init(&s);
    p = start(&s, argv, SBX_CREDIT_UNLIMITED, false, false);
    ok(wait_exit(&s), "exit delivered");
    s.out[s.out_len] = '\0';
    ok(strcmp(s.out, "early\nlate\n") == 0,
       "output of a background job shortly after the exit "
       "kept: \"%s\"",
       s.out);
    sbx_proc_unref(p);
}

static void test_pty(void)
{
    struct seen s;
    char *argv[] = {"sh", "-c", "stty size; test -t 0 && echo tty", NULL};
    struct sbx_proc_opts o = {.argv = argv,
                              .envp = environ,
                              .cwd_fd = -1,
                              .pty = true,
                              .cols = 91,
                              .rows = 17,
                              .credit = SBX_CREDIT_UNLIMITED};
    struct sbx_error e = {0};
    struct sbx_proc *p = NULL;

    seen_init(&s);
    ok(sbx_proc_start(procs, &o, &sink, &s, &p, &e) == 0, "pty start %s", e.msg);
    ok(wait_exit(&s), "pty exit delivered");
    s.out[s.out_len] = '\0';
    ok(strstr(s.out, "17 91") && strstr(s.out, "tty"), "pty size and tty: \"%s\"", s.out);
    ok(sbx_proc_resize(p, 10, 10, &e) == -ENOTTY, "resize after exit");
    sbx_proc_unref(p);
}

static void test_signals_reset(void)
{
    struct seen s;
    char *argv[] = {"grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status", NULL};
    struct sbx_proc *p;

    seen_init(&s);
    p = start(&s, argv, SBX_CREDIT_UNLIMITED, false, false);
    ok(wait_exit(&s), "exit delivered");
    s.out[s.out_len] = '\0';
    ok(strstr(s.out, "SigBlk:\t0000000000000000") && strstr(s.out, "SigIgn:\t0000000000000000"),
       "child starts with no blocked or ignored signal: %s", s.out);
    sbx_proc_unref(p);
}

/* Counts our zombie children (orphans re-parented to us included). */
static int zombies(void)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    int n = 0;

    while (d && (de = readdir(d))) {
        char path[300], buf[512];
        FILE *f;
        int ppid = 0;
        char state = 0;
        snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
        f = fopen(path, "re");
        if (!f)
            continue;
        if (fgets(buf, sizeof(buf), f)) {
            char *rp = strrchr(buf, ')');
            if (rp && sscanf(rp + 2, "%c %d", &state, &ppid) == 2 && ppid == getpid() &&
                state == 'Z')
                n++;
        }
        fclose(f);
    }
    if (d)
        closedir(d);
    return n;
}

static void test_orphans(void)
{
    struct seen s;
    char *argv[] = {"sh", "-c", "(sleep 0.2; exit 3) >/dev/null 2>&1 & exit 0", NULL};
    struct sbx_proc *p;
    int z = -1;

    seen_init(&s);
    p = start(&s, argv, SBX_CREDIT_UNLIMITED, false, false);
    ok(wait_exit(&s), "parent exit delivered");
    for (int i = 0; i < 100 && z != 0; i++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        z = zombies();
    }
    ok(z == 0, "orphan re-parented to us was reaped");
    sbx_proc_unref(p);
}

/* Last: the table refuses every start once it drains. */
/* A start that fails once its place is reserved (execve: ENOEXEC) with nothing else in the
 * table: on_empty runs, as when the last process leaves (a drain waiting for that start ends). */
static void test_failed_start_empties(void)
{
    char path[] = "/tmp/sbx-test-noexec-XXXXXX";
    char *argv[] = {path, NULL};
    struct sbx_proc_opts o = {.argv = argv, .envp = environ, .cwd_fd = -1};
    struct sbx_error e = {0};
    struct sbx_proc *p = NULL;
    struct timespec tick = {0, 10 * 1000 * 1000};
    int fd = mkstemp(path), before, r;

    if (fd < 0 ||
        write(fd,
              "\x7f"
              "ELF garbage",
              12) != 12 ||
        fchmod(fd, 0700) < 0)
        abort();
    close(fd);
    ok(sbx_proctab_count(procs) == 0, "the table is empty");
    before = atomic_load(&empties);
    r = sbx_proc_start(procs, &o, &sink, NULL, &p, &e);
    ok(r == -ENOEXEC && !p, "a file that is not a program: -ENOEXEC (%d: %s)", r, e.msg);
    for (int i = 0; i < 500 && atomic_load(&empties) == before; i++)
        nanosleep(&tick, NULL);
    ok(atomic_load(&empties) == before + 1, "on_empty ran once for the failed start");
    unlink(path);
}

static void test_drain(void)
{
    char *argv[] = {"true", NULL};
    struct sbx_proc_opts o = {.argv = argv, .envp = environ, .cwd_fd = -1};
    struct sbx_error e = {0};
    struct sbx_proc *p = NULL;

    sbx_proctab_drain(procs);
    ok(sbx_proc_start(procs, &o, &sink, NULL, &p, &e) == -ESHUTDOWN && !p,
       "a start after the drain: -ESHUTDOWN (%s)", e.msg);
}

int main(void)
{
    struct sbx_proctab_opts po = {.chunk_size = 4096, .exit_drain_ms = 1000, .on_empty = on_empty};
    struct sbx_error e = {0};
    sigset_t set;
    pthread_t th;

    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, NULL);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    if (sbx_loop_new(&loop, &e) < 0 || sbx_proctab_new(&procs, loop, &po, &e) < 0)
        return 1;
    sigw.fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    sigw.fn = on_signal;
    sbx_loop_add(loop, &sigw, EPOLLIN, &e);
    pthread_create(&th, NULL, run_loop, NULL);

    signal(SIGPIPE, SIG_IGN); /* as gRPC does */
    test_signals_reset();
    test_echo();
    test_missing();
    test_credit();
    test_stdin();
    test_stdin_bound();
    test_anonymous_stdin();
    test_signal_group();
    test_background_holder();
    test_late_output();
    test_pty();
    test_orphans();
    test_failed_start_empties();
    test_drain();

    sbx_loop_stop(loop);
    pthread_join(th, NULL);
    ok(sbx_proctab_count(procs) == 0, "table empty at the end");
    sbx_proctab_free(procs);
    close(sigw.fd);
    sbx_loop_free(loop);
    return done_testing();
}
