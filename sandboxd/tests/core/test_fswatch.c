/* Directory watches against a real tree and the real kernel: events of each kind with
 * consecutive sequence numbers, a tree made at once seen whole, a reader fallen behind told
 * exactly what it lost, resume, symlinks never followed out, limits, globs. The loop runs on a
 * thread of its own, as in the daemon; readers wait on their waiter. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fswatch.h"
#include "tap.h"

static char base[64];
static struct sbx_root root;
static struct sbx_loop *loop;
static struct sbx_fswatches *ws;
static pthread_t loop_thread;
static bool loop_running;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int woken;

static void on_wake(struct sbx_fswatch_waiter *wt)
{
    (void)wt;
    pthread_mutex_lock(&mu);
    woken++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static struct sbx_fswatch_waiter waiter = {.fn = on_wake};

static void reset_woken(void)
{
    pthread_mutex_lock(&mu);
    woken = 0;
    pthread_mutex_unlock(&mu);
}

static void *run_loop(void *arg)
{
    struct sbx_error e;

    (void)arg;
    sbx_loop_run(loop, &e);
    return NULL;
}

static void start_loop(void)
{
    loop_running = pthread_create(&loop_thread, NULL, run_loop, NULL) == 0;
}

/* A fresh tree, loop and registry; the loop starts unless told not to. */
static void setup(const struct sbx_fswatches_opts *o, bool run)
{
    struct sbx_error e = {0};
    char cmd[512];

    snprintf(cmd, sizeof(cmd), "rm -rf %s/root %s/outside && mkdir -p %s/root %s/outside", base,
             base, base, base);
    if (system(cmd) != 0)
        abort();
    snprintf(cmd, sizeof(cmd), "%s/root", base);
    if (sbx_root_open(&root, cmd, &e) < 0 || sbx_loop_new(&loop, &e) < 0 ||
        sbx_fswatches_new(&ws, loop, &root, o, &e) < 0) {
        printf("# setup: %s\n", e.msg);
        abort();
    }
    if (run)
        start_loop();
}

static void teardown(void)
{
    if (loop_running) {
        sbx_loop_stop(loop);
        pthread_join(loop_thread, NULL);
        loop_running = false;
    }
    sbx_fswatches_free(ws);
    sbx_loop_free(loop);
    sbx_root_release(&root);
}

static const struct sbx_fswatches_opts defaults = {.max_watches = 8,
                                                   .max_per_client = 8,
                                                   .max_dirs = 1000,
                                                   .queue_events = 4096,
                                                   .retain_ms = 60000,
                                                   .keepalive_ms = 0};

/* The next event, waiting at most 10 s; 0 when none came, -errno when the watch ended. */
static int next_event(struct sbx_fswatch *r, struct sbx_fsev *ev)
{
    struct sbx_error e = {0};
    struct timespec until;
    int rc;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    for (;;) {
        int before;
        pthread_mutex_lock(&mu);
        before = woken;
        pthread_mutex_unlock(&mu);
        rc = sbx_fswatch_next(r, ev, &e);
        if (rc != 0)
            return rc;
        if (!sbx_fswatch_wait(r, &waiter))
            continue;
        pthread_mutex_lock(&mu);
        while (woken == before && pthread_cond_timedwait(&cv, &mu, &until) == 0)
            ;
        rc = woken != before;
        pthread_mutex_unlock(&mu);
        if (!rc && sbx_fswatch_unwait(r, &waiter))
            return 0;
    }
}

static struct sbx_fswatch *open_watch(const char *path, bool recursive, const char *client)
{
    struct sbx_fswatch_spec s = {.path = path, .recursive = recursive, .client = client};
    struct sbx_fswatch *r = NULL;
    struct sbx_error e = {0};

    if (sbx_fswatch_open(ws, &s, &r, &e) < 0)
        printf("# open %s: %s\n", path, e.msg);
    return r;
}

/* Reads events until one of kind at path (the log, joined "kind path;" into out). */
static bool read_until(struct sbx_fswatch *r, enum sbx_fsev_kind kind, const char *path, char *out,
                       size_t len, uint64_t *last_seq)
{
    static const char *names[] = {"?",      "create", "write",    "chmod",
                                  "remove", "rename", "overflow", "ready"};
    struct sbx_fsev ev;
    size_t n = strlen(out);

    while (next_event(r, &ev) == 1) {
        bool hit = ev.kind == kind && ev.path && strcmp(ev.path, path) == 0;
        if (ev.kind == SBX_FSEV_RENAME)
            n += (size_t)snprintf(out + n, len - n, "rename %s>%s;", ev.from, ev.path);
        else
            n += (size_t)snprintf(out + n, len - n, "%s %s;", names[ev.kind],
                                  ev.path ? ev.path : "");
        if (n >= len)
            n = len - 1;
        if (last_seq && *last_seq + 1 != ev.seq && ev.kind != SBX_FSEV_READY)
            printf("# seq %llu after %llu\n", (unsigned long long)ev.seq,
                   (unsigned long long)*last_seq);
        if (last_seq && ev.kind != SBX_FSEV_READY)
            *last_seq = ev.seq;
        sbx_fsev_release(&ev);
        if (hit)
            return true;
    }
    return false;
}

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
    char cmd[1024], full[1200];
    int n;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    n = snprintf(full, sizeof(full), "cd %s/root && %.1100s", base, cmd);
    (void)n;
    if (system(full) != 0)
        printf("# failed: %s\n", cmd);
}

static void test_kinds(void)
{
    char log[2048] = "";
    uint64_t seq = 0;
    struct sbx_fswatch *r;
    struct sbx_fsev ev;

    setup(&defaults, true);
    sh("mkdir d e");
    r = open_watch("/", true, "c");
    ok(r && next_event(r, &ev) == 1 && ev.kind == SBX_FSEV_READY && ev.seq == 0 && !ev.resumed &&
           ev.dirs == 3,
       "ready first, sequence 0, after the three directories are watched");
    sh("echo a > d/f && echo b >> d/f && echo c >> d/f && chmod 600 d/f && mv d/f d/g && "
       "mv d/g e/h && rm e/h && touch ../outside/m && mv ../outside/m d/m && "
       "mv d/m ../outside/m2 && touch end");
    ok(r && read_until(r, SBX_FSEV_CREATE, "end", log, sizeof(log), &seq), "events up to the end");
    ok(strstr(log, "create d/f;write d/f;chmod d/f;rename d/f>d/g;rename d/g>e/h;remove e/h;") !=
           NULL,
       "create, writes merged into one, chmod, renames within and across directories, remove: %s",
       log);
    ok(strstr(log, "remove e/h;create d/m;remove d/m;create end;") != NULL,
       "a move in is a create, a move out a remove: %s", log);
    ok(seq >= 7, "sequence numbers consecutive");
    sh("touch d/last");
    ok(r && read_until(r, SBX_FSEV_CREATE, "d/last", log, sizeof(log), &seq), "d/last made");
    sh("mv d/last ../outside/");
    ok(r && read_until(r, SBX_FSEV_REMOVE, "d/last", log, sizeof(log), &seq),
       "a move out with nothing after it is a remove once the queue is empty");
    sbx_fswatch_close(r);
    teardown();
}

static void test_tree(void)
{
    char log[4096] = "";
    struct sbx_fswatch *r;
    struct sbx_fsev ev;

    setup(&defaults, true);
    r = open_watch(".", true, "c");
    ok(r && next_event(r, &ev) == 1 && ev.kind == SBX_FSEV_READY, "ready");
    sh("mkdir -p a/b/c && touch a/b/c/f && touch end");
    ok(r && read_until(r, SBX_FSEV_CREATE, "end", log, sizeof(log), NULL), "events up to the end");
    ok(strstr(log, "create a;") && strstr(log, "create a/b;") && strstr(log, "create a/b/c;") &&
           strstr(log, "create a/b/c/f;"),
       "a tree made at once seen whole: %s", log);
    ok(!strstr(strstr(log, "create a/b/c/f;") + 1, "create a/b/c/f;"), "each create once");
    sh("mv a x && touch x/b/c/g");
    ok(r && read_until(r, SBX_FSEV_CREATE, "x/b/c/g", log, sizeof(log), NULL) &&
           strstr(log, "rename a>x;"),
       "and followed when moved: %s", log);
    sbx_fswatch_close(r);
    teardown();
}

/* A tree made and moved before the loop saw any of it: the move's arrival is scanned, so what
 * is beneath it is told and watched. */
static void test_moved_before_watched(void)
{
    char log[2048] = "";
    struct sbx_fswatch *r;
    struct sbx_fsev ev;

    setup(&defaults, false);
    r = open_watch(".", true, "c");
    ok(r && sbx_fswatch_next(r, &ev, NULL) == 1 && ev.kind == SBX_FSEV_READY, "ready");
    sh("mkdir -p a/b/c && mv a x && touch x/b/c/g");
    start_loop();
    ok(r && read_until(r, SBX_FSEV_CREATE, "x/b/c/g", log, sizeof(log), NULL) &&
           strstr(log, "rename a>x;") && strstr(log, "create x/b;") && strstr(log, "create x/b/c;"),
       "a directory moved before it was watched is scanned where it arrived: %s", log);
    sbx_fswatch_close(r);
    teardown();
}

static void test_overflow(void)
{
    struct sbx_fswatches_opts o = defaults;
    uint64_t expect = 1, delivered = 0, lost = 0;
    bool contiguous = true, saw_end = false;
    struct sbx_fswatch *r;
    struct sbx_fsev ev;

    o.queue_events = 16;
    setup(&o, false); /* the loop starts once every event is in the kernel's queue */
    sh("touch p q");
    r = open_watch(".", false, "c");
    ok(r && sbx_fswatch_next(r, &ev, NULL) == 1 && ev.kind == SBX_FSEV_READY, "ready");
    reset_woken();
    ok(r && sbx_fswatch_wait(r, &waiter), "waiting");
    sh("for i in $(seq 50); do chmod 600 p; chmod 600 q; done; touch end");
    start_loop();
    /* The waiter fires once the loop has logged what one read brought: all of it. */
    {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 10;
        pthread_mutex_lock(&mu);
        while (woken == 0 && pthread_cond_timedwait(&cv, &mu, &until) == 0)
            ;
        pthread_mutex_unlock(&mu);
    }
    while (r && !saw_end && next_event(r, &ev) == 1) {
        if (ev.kind == SBX_FSEV_OVERFLOW) {
            contiguous &= ev.lost_from == expect && ev.lost_to >= ev.lost_from;
            lost += ev.lost_to - ev.lost_from + 1;
            expect = ev.lost_to + 1;
        } else {
            contiguous &= ev.seq == expect;
            expect = ev.seq + 1;
            delivered++;
            saw_end = ev.kind == SBX_FSEV_CREATE && strcmp(ev.path, "end") == 0;
        }
        sbx_fsev_release(&ev);
    }
    ok(saw_end && contiguous && lost > 0 && delivered <= 16,
       "a reader behind its queue gets an overflow with the exact numbers lost (%llu lost, %llu "
       "read, then the end)",
       (unsigned long long)lost, (unsigned long long)delivered);
    sbx_fswatch_close(r);
    teardown();
}

static void test_resume(void)
{
    struct sbx_fswatch_spec s = {.path = ".", .client = "c"};
    struct sbx_fswatch *r, *r2 = NULL;
    struct sbx_error e = {0};
    char id[32] = "", log[1024] = "";
    struct sbx_fsev ev;

    setup(&defaults, true);
    r = open_watch(".", false, "c");
    if (r && next_event(r, &ev) == 1)
        snprintf(id, sizeof(id), "%s", ev.watch_id);
    sh("touch one two");
    ok(r && read_until(r, SBX_FSEV_CREATE, "two", log, sizeof(log), NULL), "two creates read");
    sbx_fswatch_close(r);
    sh("touch three");
    s.resume_id = id;
    s.since = 1;
    ok(sbx_fswatch_open(ws, &s, &r2, &e) == 0, "resumed from 1");
    log[0] = '\0';
    ok(r2 && next_event(r2, &ev) == 1 && ev.kind == SBX_FSEV_READY && ev.resumed && ev.seq == 1,
       "ready says resumed, at 1");
    ok(r2 && read_until(r2, SBX_FSEV_CREATE, "three", log, sizeof(log), NULL) &&
           strstr(log, "create two;") && !strstr(log, "create one;"),
       "then what came after 1, while no one read it: %s", log);
    s.since = 1000;
    ok(sbx_fswatch_open(ws, &s, &r, &e) == -EINVAL, "a since past the end is refused: %s", e.msg);
    s.resume_id = "0123456789abcdef";
    s.since = 0;
    ok(sbx_fswatch_open(ws, &s, &r, &e) == -ENOENT, "an unknown watch is refused: %s", e.msg);
    sbx_fswatch_close(r2);
    teardown();
}

static void test_confined(void)
{
    char log[1024] = "";
    struct sbx_fswatch_spec s = {.path = "out", .client = "c"};
    struct sbx_fswatch *r = NULL;
    struct sbx_error e = {0};

    setup(&defaults, true);
    sh("ln -s %s/outside out && mkdir in && ln -s %s/outside in/link", base, base);
    ok(sbx_fswatch_open(ws, &s, &r, &e) == -EXDEV, "a symlink out as the path is refused: %s",
       e.msg);
    s.path = "../outside";
    ok(sbx_fswatch_open(ws, &s, &r, &e) == -EXDEV, "so is .. out: %s", e.msg);
    s.path = "in/link";
    ok(sbx_fswatch_open(ws, &s, &r, &e) == -EXDEV, "and a symlink inside pointing out: %s", e.msg);
    r = open_watch(".", true, "c");
    sh("touch %s/outside/secret && touch in/end", base);
    ok(r && read_until(r, SBX_FSEV_CREATE, "in/end", log, sizeof(log), NULL) &&
           !strstr(log, "secret"),
       "a symlink in the tree is not followed: %s", log);
    sbx_fswatch_close(r);
    teardown();
}

static void test_limits_globs(void)
{
    struct sbx_fswatches_opts o = defaults;
    struct sbx_fswatch_spec s = {.path = ".", .client = "a"};
    char *inc[] = {"*.py"}, *exc[] = {"skip"};
    struct sbx_fswatch *r[4] = {0}, *x = NULL;
    struct sbx_error e = {0};
    char log[1024] = "";
    struct sbx_fsev ev;

    o.max_watches = 3;
    o.max_per_client = 2;
    o.max_dirs = 4;
    setup(&o, true);
    sh("mkdir -p skip/deep k && touch k/z.py");
    r[0] = open_watch(".", false, "a");
    r[1] = open_watch(".", false, "a");
    ok(r[0] && r[1] && sbx_fswatch_open(ws, &s, &x, &e) == -EMFILE,
       "a client's third watch is refused: %s", e.msg);
    s.client = "b";
    s.recursive = true;
    ok(sbx_fswatch_open(ws, &s, &x, &e) == -EMFILE,
       "a tree past the directory budget is refused: %s", e.msg);
    s.include = inc;
    s.n_include = 1;
    s.exclude = exc;
    s.n_exclude = 1;
    ok(sbx_fswatch_open(ws, &s, &r[2], &e) == 0, "with the excluded directory left out it fits");
    ok(sbx_fswatch_open(ws, &s, &x, &e) == -EMFILE, "the fourth watch is refused: %s", e.msg);
    sh("touch a.txt b.py skip/deep/c.py k/d.py");
    ok(r[2] && next_event(r[2], &ev) == 1 && ev.kind == SBX_FSEV_READY, "ready");
    ok(r[2] && read_until(r[2], SBX_FSEV_CREATE, "k/d.py", log, sizeof(log), NULL) &&
           strstr(log, "create b.py;") && strstr(log, "create k/d.py;") && !strstr(log, "a.txt") &&
           !strstr(log, "c.py"),
       "include and exclude globs: %s", log);
    for (int i = 0; i < 3; i++)
        sbx_fswatch_close(r[i]);
    teardown();
}

/* Reads until the watch ends; its error code, with the message in e (0: it did not end). */
static int read_to_end(struct sbx_fswatch *r, char *log, size_t len, struct sbx_error *e)
{
    struct sbx_fsev ev;
    int rc;

    while ((rc = next_event(r, &ev)) == 1) {
        size_t n = strlen(log);
        snprintf(log + n, len - n, "%d %s;", (int)ev.kind, ev.path ? ev.path : "");
        sbx_fsev_release(&ev);
    }
    if (rc < 0)
        (void)sbx_fswatch_next(r, &ev, e); /* the end again, for its message */
    return rc;
}

/* A watch ends, its reader told why after the events before: its directory removed, a new
 * directory past the budget, a rescan past its bound. */
static void test_ends(void)
{
    struct sbx_fswatches_opts o = defaults;
    struct sbx_fswatch_spec s = {.path = "r", .client = "a", .rescan_ms = 20};
    struct sbx_fswatch *r = NULL;
    struct sbx_error e = {0};
    char log[1024] = "";

    o.max_dirs = 2; /* a watch that ended gives its directories back */
    setup(&o, true);
    sh("mkdir gone budget r");
    r = open_watch("gone", true, "a");
    sh("touch gone/f && rm -rf gone");
    ok(r && read_to_end(r, log, sizeof(log), &e) == -ENOENT && strstr(log, "1 f;") &&
           strstr(e.msg, "removed"),
       "its directory removed: the events, then ENOENT: %s (%s)", e.msg, log);
    sbx_fswatch_close(r);

    log[0] = '\0';
    e = (struct sbx_error){0};
    r = open_watch("budget", true, "a");
    sh("mkdir budget/one && sleep 0.2 && mkdir budget/two");
    ok(r && read_to_end(r, log, sizeof(log), &e) == -EMFILE && strstr(e.msg, "cannot be watched") &&
           strstr(e.msg, "budget/two") == NULL && strstr(e.msg, "two"),
       "a directory past the budget: EMFILE: %s (%s)", e.msg, log);
    sbx_fswatch_close(r);

    log[0] = '\0';
    e = (struct sbx_error){0};
    s.recursive = false;
    ok(sbx_fswatch_open(ws, &s, &r, &e) == 0, "a rescanning watch");
    sh("cd r && seq -f f%%g 1 65600 | xargs touch");
    ok(r && read_to_end(r, log, sizeof(log), &e) == -EMFILE && strstr(e.msg, "to rescan"),
       "a rescan past its bound ends it: %s", e.msg);
    sbx_fswatch_close(r);
    teardown();
}

int main(void)
{
    snprintf(base, sizeof(base), "/tmp/test_fswatch.%d", (int)getpid());
    mkdir(base, 0755);
    test_kinds();
    test_tree();
    test_moved_before_watched();
    test_overflow();
    test_resume();
    test_confined();
    test_limits_globs();
    test_ends();
    {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
        (void)!system(cmd);
    }
    return done_testing();
}
