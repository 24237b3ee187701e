/* process.Process of the E2B port onto sandboxd's jobs (core/jobs.h): Start spawns a job and
 * streams its StartEvent (the OS pid, as envd names processes), its output as Data events and
 * its End; Connect reattaches to a running one by pid or tag from its current output on (as
 * envd does: what was sent before is not sent again); List, SendInput, SendSignal (to the whole
 * tree: what envd lacks), CloseStdin, Update (PTY size). A stream reads the job's rings from
 * its own offsets, one chunk at a time while the call has room: a client that does not read
 * holds nothing but the job's bounded rings. The process outlives its stream, as envd's does. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "connect.h"
#include "e2b/process/process.pb-c.h"
#include "e2b_internal.h"
#include "jobs.h"
#include "utf8.h"

#define CHUNK        (32 * 1024)
#define MAX_REQ_ENVS 1024
#define MAX_ARGS     4096

extern char **environ;

/* ------------------------------------------------------------------------------------------ */
/* Finding a job: envd names processes by OS pid or tag; only running ones are found */

static struct sbx_job *find_job(struct sbx_e2b_call *c, const Process__ProcessSelector *sel)
{
    struct sbx_jobs *jobs = sbx_e2b_server_opts(sbx_e2b_call_server(c))->jobs;
    struct sbx_job **all = NULL, *found = NULL;
    size_t n;

    if (!sel || sel->selector_case == PROCESS__PROCESS_SELECTOR__SELECTOR__NOT_SET) {
        sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT, "process selector is required");
        return NULL;
    }
    n = jobs ? sbx_jobs_list(jobs, NULL, &all) : 0;
    for (size_t i = 0; i < n; i++) {
        struct sbx_job_info ji;
        sbx_job_info(all[i], &ji);
        if (!found && !ji.exited &&
            (sel->selector_case == PROCESS__PROCESS_SELECTOR__SELECTOR_PID
                 ? (uint32_t)ji.pid == sel->pid
                 : ji.tag && strcmp(ji.tag, sel->tag) == 0))
            found = all[i];
        else
            sbx_job_unref(all[i]);
    }
    free(all);
    if (!found) {
        if (sel->selector_case == PROCESS__PROCESS_SELECTOR__SELECTOR_PID)
            sbx_e2b_call_fail(c, SBX_CONNECT_NOT_FOUND, "process with pid %u not found", sel->pid);
        else
            sbx_e2b_call_fail(c, SBX_CONNECT_NOT_FOUND, "process with tag %s not found", sel->tag);
    }
    return found;
}

/* ------------------------------------------------------------------------------------------ */
/* A stream of a job's events */

struct pstream {
    pthread_mutex_t lock;
    int refs;
    struct sbx_e2b_call *call;
    const ProtobufCMessageDescriptor *out; /* StartResponse or ConnectResponse */
    struct sbx_job *job;
    struct sbx_job_waiter w;
    uint64_t off[2];
    bool pty, done;
    bool holder; /* the job's output waits for this stream (Start's: sbx_job_spec.held) */
};

static void ps_unref(struct pstream *ps)
{
    if (__atomic_sub_fetch(&ps->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    sbx_job_unref(ps->job);
    sbx_e2b_call_unref(ps->call);
    pthread_mutex_destroy(&ps->lock);
    free(ps);
}

/* Sends one event. StartResponse and ConnectResponse have the same shape (an event): one
 * struct serves both, with the call's descriptor. */
static int send_event(struct pstream *ps, Process__ProcessEvent *ev)
{
    Process__StartResponse resp = PROCESS__START_RESPONSE__INIT;

    resp.base.descriptor = ps->out;
    resp.event = ev;
    return sbx_e2b_call_send(ps->call, &resp.base);
}

static int send_data(struct pstream *ps, int s, uint8_t *buf, size_t n)
{
    Process__ProcessEvent ev = PROCESS__PROCESS_EVENT__INIT;
    Process__ProcessEvent__DataEvent d = PROCESS__PROCESS_EVENT__DATA_EVENT__INIT;
    ProtobufCBinaryData bytes = {n, buf};

    if (ps->pty) {
        d.output_case = PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_PTY;
        d.pty = bytes;
    } else if (s == SBX_STDOUT) {
        d.output_case = PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDOUT;
        d.stdout = bytes;
    } else {
        d.output_case = PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDERR;
        d.stderr = bytes;
    }
    ev.event_case = PROCESS__PROCESS_EVENT__EVENT_DATA;
    ev.data = &d;
    return send_event(ps, &ev);
}

/* The End event as envd writes it (Go's ProcessState: "exit status 1", "signal: killed"). */
static int send_end(struct pstream *ps, const struct sbx_job_info *ji)
{
    Process__ProcessEvent ev = PROCESS__PROCESS_EVENT__INIT;
    Process__ProcessEvent__EndEvent end = PROCESS__PROCESS_EVENT__END_EVENT__INIT;
    char status[64], name[32];

    if (ji->ex.signal) {
        snprintf(name, sizeof(name), "%s", strsignal(ji->ex.signal));
        name[0] = (char)(name[0] >= 'A' && name[0] <= 'Z' ? name[0] - 'A' + 'a' : name[0]);
        snprintf(status, sizeof(status), "signal: %s", name);
    } else {
        snprintf(status, sizeof(status), "exit status %d", ji->ex.exit_code);
    }
    end.exit_code = ji->ex.signal ? -1 : ji->ex.exit_code;
    end.exited = ji->ex.signal == 0;
    end.status = status;
    if (ji->reason == SBX_EXIT_TIMED_OUT) {
        end._error_case = PROCESS__PROCESS_EVENT__END_EVENT___ERROR_ERROR;
        end.error = (char *)"the process ran past its timeout (Connect-Timeout-Ms) and was killed";
    }
    ev.event_case = PROCESS__PROCESS_EVENT__EVENT_END;
    ev.end = &end;
    return send_event(ps, &ev);
}

static void pump(struct pstream *ps);

static void waiter_fired(struct sbx_job_waiter *w)
{
    struct pstream *ps = (struct pstream *)((char *)w - offsetof(struct pstream, w));

    pump(ps);
    ps_unref(ps); /* the waiter's */
}

static void drained(void *arg)
{
    struct pstream *ps = arg;

    pump(ps);
    ps_unref(ps); /* the drain callback's */
}

/* The client went away: the stream ends now, not at the job's next output. */
static void client_gone(void *arg)
{
    struct pstream *ps = arg;

    pump(ps);
    ps_unref(ps); /* the gone callback's */
}

/* Under ps->lock: the stream is over; what waits for it is let go (a callback that will not
 * run drops its reference here; one that runs finds the stream done). */
static void ps_done(struct pstream *ps)
{
    ps->done = true;
    if (sbx_job_unwatch(ps->job, &ps->w))
        __atomic_sub_fetch(&ps->refs, 1, __ATOMIC_RELAXED); /* the waiter's */
    if (sbx_e2b_call_off_gone(ps->call))
        __atomic_sub_fetch(&ps->refs, 1, __ATOMIC_RELAXED); /* the gone callback's */
}

/* Under ps->lock: 1 when one chunk was sent, 0 when nothing was there, <0 on a send error. */
static int send_chunk(struct pstream *ps, const struct sbx_job_info *ji)
{
    static __thread uint8_t buf[CHUNK];

    for (int s = 0; s < 2; s++) {
        uint64_t at;
        size_t n;
        if (ps->off[s] >= ji->end[s])
            continue;
        n = sbx_job_read(ps->job, (enum sbx_stream)s, ps->off[s], buf, sizeof(buf), &at);
        if (n == 0) {
            ps->off[s] = ji->end[s]; /* dropped from the ring before we read it */
            continue;
        }
        ps->off[s] = at + n;
        if (ps->holder) /* queued on the call, whose queue is bounded: the process may go on */
            sbx_job_hold(ps->job, (enum sbx_stream)s, ps->off[s]);
        return send_data(ps, s, buf, n) < 0 ? -1 : 1;
    }
    return 0;
}

/* Sends what there is while the call has room; then waits for output, the exit or room. Runs
 * on the loop (the job's waiter), or a server thread (the start, the call's drain). */
static void pump(struct pstream *ps)
{
    struct sbx_job_info ji;
    bool unhold = false;
    int r;

    pthread_mutex_lock(&ps->lock);
    while (!ps->done) {
        if (sbx_e2b_call_gone(ps->call)) {
            ps_done(ps);
            break;
        }
        __atomic_add_fetch(&ps->refs, 1, __ATOMIC_RELAXED);
        if (!sbx_e2b_call_writable(ps->call, drained, ps))
            break; /* drained() goes on */
        __atomic_sub_fetch(&ps->refs, 1, __ATOMIC_RELAXED);
        sbx_job_info(ps->job, &ji);
        if ((r = send_chunk(ps, &ji)) != 0) {
            if (r < 0)
                ps_done(ps);
            continue;
        }
        if (ji.exited) {
            (void)send_end(ps, &ji);
            sbx_e2b_call_end(ps->call);
            ps_done(ps);
            break;
        }
        ps->w.seen[0] = ps->off[0];
        ps->w.seen[1] = ps->off[1];
        __atomic_add_fetch(&ps->refs, 1, __ATOMIC_RELAXED);
        if (sbx_job_watch(ps->job, &ps->w))
            break; /* waiter_fired() goes on */
        __atomic_sub_fetch(&ps->refs, 1, __ATOMIC_RELAXED);
    }
    /* Once over, the process no longer waits for this client; let go after the lock, as
     * the process's output may then be read on this thread and wake other streams. */
    if (ps->done && ps->holder) {
        ps->holder = false;
        unhold = true;
    }
    pthread_mutex_unlock(&ps->lock);
    if (unhold)
        sbx_job_unhold(ps->job);
}

/* Starts streaming job's events on c: the StartEvent, then output from the given offsets.
 * Takes over the job reference. */
static void stream_job(struct sbx_e2b_call *c, const ProtobufCMessageDescriptor *out,
                       struct sbx_job *job, bool from_now, bool holder)
{
    Process__ProcessEvent ev = PROCESS__PROCESS_EVENT__INIT;
    Process__ProcessEvent__StartEvent st = PROCESS__PROCESS_EVENT__START_EVENT__INIT;
    struct pstream *ps = calloc(1, sizeof(*ps));
    struct sbx_job_info ji;

    if (!ps) {
        sbx_job_unref(job);
        sbx_e2b_call_fail(c, SBX_CONNECT_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    pthread_mutex_init(&ps->lock, NULL);
    ps->refs = 1;
    ps->call = sbx_e2b_call_ref(c);
    ps->out = out;
    ps->job = job;
    ps->w.fn = waiter_fired;
    ps->holder = holder;
    sbx_job_info(job, &ji);
    ps->pty = ji.pty;
    for (int s = 0; s < 2; s++)
        ps->off[s] = from_now ? ji.end[s] : ji.start[s];
    st.pid = (uint32_t)ji.pid;
    ev.event_case = PROCESS__PROCESS_EVENT__EVENT_START;
    ev.start = &st;
    __atomic_add_fetch(&ps->refs, 1, __ATOMIC_RELAXED); /* the gone callback's */
    (void)sbx_e2b_call_on_gone(c, client_gone, ps);
    (void)send_event(ps, &ev);
    pump(ps);     /* finds the stream over when the start could not be sent */
    ps_unref(ps); /* ours: the waiter or the drain holds it from here */
}

/* ------------------------------------------------------------------------------------------ */
/* Start */

/* The environment: the daemon's, the user's identity, /init's variables, the request's; a name
 * set twice keeps its last value. */
static char **build_env(struct sbx_e2b_call *c, const Process__ProcessConfig *cfg, const char *cwd)
{
    const struct sbx_e2b_user *u = sbx_e2b_call_user(c);
    char **init = sbx_e2b_server_envs(sbx_e2b_call_server(c));
    size_t n_env = 0, n_init = 0, cap, n = 0;
    char **out;

    while (environ[n_env])
        n_env++;
    while (init && init[n_init])
        n_init++;
    cap = n_env + 5 + n_init + cfg->n_envs + 1;
    out = calloc(cap, sizeof(*out));
    if (!out || !init) {
        free(out);
        sbx_e2b_envs_free(init);
        return NULL;
    }
#define ADD(...)                                                                                   \
    do {                                                                                           \
        if (asprintf(&out[n], __VA_ARGS__) < 0)                                                    \
            goto fail;                                                                             \
        n++;                                                                                       \
    } while (0)
    for (size_t i = 0; i < n_env; i++)
        ADD("%s", environ[i]);
    ADD("HOME=%s", u->home);
    ADD("USER=%s", u->name);
    ADD("LOGNAME=%s", u->name);
    ADD("PWD=%s", cwd);
    for (size_t i = 0; i < n_init; i++)
        ADD("%s", init[i]);
    for (size_t i = 0; i < cfg->n_envs; i++)
        ADD("%s=%s", cfg->envs[i]->key, cfg->envs[i]->value);
#undef ADD
    sbx_e2b_envs_free(init);
    /* Drops earlier entries of a name set again. */
    for (size_t i = 0; i < n; i++) {
        size_t k = strcspn(out[i], "=");
        for (size_t j = i + 1; j < n && out[i]; j++)
            if (strncmp(out[i], out[j], k) == 0 && out[j][k] == '=') {
                free(out[i]);
                out[i] = NULL;
            }
    }
    for (size_t i = 0, j = 0; i <= n; i++)
        if (i == n || out[i])
            out[j++] = i == n ? NULL : out[i];
    return out;
fail:
    sbx_e2b_envs_free(init);
    sbx_e2b_envs_free(out);
    return NULL;
}

static bool config_valid(struct sbx_e2b_call *c, const Process__StartRequest *r)
{
    const Process__ProcessConfig *cfg = r->process;

    if (!cfg || !cfg->cmd[0]) {
        sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT, "process.cmd is required");
        return false;
    }
    if (cfg->n_args > MAX_ARGS || cfg->n_envs > MAX_REQ_ENVS) {
        sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT, "at most %d args and %d envs", MAX_ARGS,
                          MAX_REQ_ENVS);
        return false;
    }
    for (size_t i = 0; i < cfg->n_envs; i++)
        if (!cfg->envs[i]->key[0] || strchr(cfg->envs[i]->key, '=')) {
            sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT,
                              "env names must be non-empty, without '='");
            return false;
        }
    if (r->_pty_case && r->pty && r->pty->size &&
        (r->pty->size->cols > 0xffff || r->pty->size->rows > 0xffff)) {
        sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT, "cols and rows must be below 65536");
        return false;
    }
    return true;
}

/* The working directory: the request's, /init's default, the user's home. */
static int open_cwd(struct sbx_e2b_call *c, const Process__ProcessConfig *cfg, char *path,
                    size_t len)
{
    struct sbx_e2b_server *s = sbx_e2b_call_server(c);
    int fd;

    if (cfg->_cwd_case && cfg->cwd[0]) {
        snprintf(path, len, "%s", cfg->cwd);
    } else {
        pthread_mutex_lock(&s->lock);
        snprintf(path, len, "%s",
                 s->default_workdir[0] ? s->default_workdir : sbx_e2b_call_user(c)->home);
        pthread_mutex_unlock(&s->lock);
    }
    fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT, "cwd '%s': %s", path, strerror(errno));
        return -1;
    }
    return fd;
}

/* The request's own variables as NAME=value, for the job's record (List shows them as envd
 * does: what Start was given, not the whole environment). */
static char **request_envs(const Process__ProcessConfig *cfg)
{
    char **out = calloc(cfg->n_envs + 1, sizeof(*out));

    for (size_t i = 0; out && i < cfg->n_envs; i++)
        if (asprintf(&out[i], "%s=%s", cfg->envs[i]->key, cfg->envs[i]->value) < 0) {
            out[i] = NULL;
            sbx_e2b_envs_free(out);
            return NULL;
        }
    return out;
}

static int start_code(int r)
{
    switch (-r) {
    case EAGAIN:
        return SBX_CONNECT_RESOURCE_EXHAUSTED;
    case ESHUTDOWN:
        return SBX_CONNECT_UNAVAILABLE;
    case EPERM:
        return SBX_CONNECT_PERMISSION_DENIED;
    default:
        return SBX_CONNECT_INVALID_ARGUMENT; /* envd's code for a process that does not start */
    }
}

static void p_start(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    const Process__StartRequest *r = (const Process__StartRequest *)req;
    const struct sbx_e2b_opts *o = sbx_e2b_server_opts(sbx_e2b_call_server(c));
    const struct sbx_e2b_user *u = sbx_e2b_call_user(c);
    _cleanup_free_ char **argv = NULL;
    _cleanup_close_ int cwd_fd = -1;
    struct sbx_job_spec js = {0};
    struct sbx_error e = {0};
    struct sbx_job *job = NULL;
    char **envp = NULL, **asked = NULL, cwd[1024];
    int rc;

    if (!o->jobs || (o->draining && __atomic_load_n(o->draining, __ATOMIC_ACQUIRE))) {
        sbx_e2b_call_fail(c, SBX_CONNECT_UNAVAILABLE, "sandboxd is not starting processes");
        return;
    }
    if (!config_valid(c, r) || (cwd_fd = open_cwd(c, r->process, cwd, sizeof(cwd))) < 0)
        return;
    argv = calloc(r->process->n_args + 2, sizeof(*argv));
    envp = build_env(c, r->process, cwd);
    asked = request_envs(r->process);
    if (!argv || !envp || !asked) {
        sbx_e2b_envs_free(envp);
        sbx_e2b_envs_free(asked);
        sbx_e2b_call_fail(c, SBX_CONNECT_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    argv[0] = r->process->cmd;
    for (size_t i = 0; i < r->process->n_args; i++)
        argv[i + 1] = r->process->args[i];
    js.proc.argv = argv;
    js.proc.envp = envp;
    js.proc.cwd_fd = cwd_fd;
    js.proc.pty = r->_pty_case == PROCESS__START_REQUEST___PTY_PTY;
    js.proc.cols = js.proc.pty && r->pty->size ? (unsigned short)r->pty->size->cols : 80;
    js.proc.rows = js.proc.pty && r->pty->size ? (unsigned short)r->pty->size->rows : 24;
    /* envd: stdin is a pipe unless the request says stdin: false. */
    js.proc.stdin_null = r->_stdin_case == PROCESS__START_REQUEST___STDIN_STDIN && !r->stdin;
    if (u->uid != geteuid() || u->gid != getegid()) {
        js.proc.confine.set_user = true;
        js.proc.confine.uid = u->uid;
        js.proc.confine.gid = u->gid;
        js.proc.confine.groups = u->groups;
        js.proc.confine.n_groups = u->n_groups;
    }
    js.tag = r->_tag_case == PROCESS__START_REQUEST___TAG_TAG ? r->tag : NULL;
    js.timeout_ms = sbx_e2b_call_timeout_ms(c);
    /* Every byte reaches the Start stream, as from envd: the process waits for a slow client
     * rather than lose output to the ring (others attached by Connect may still lag and skip). */
    js.held = true;
    js.envs = asked;
    js.cwd = r->process->_cwd_case ? r->process->cwd : NULL;
    rc = sbx_job_start(o->jobs, &js, &job, &e);
    sbx_e2b_envs_free(envp);
    sbx_e2b_envs_free(asked);
    if (rc < 0) {
        sbx_e2b_call_fail(c, start_code(rc), "failed to start process: %s", e.msg);
        return;
    }
    stream_job(c, &process__start_response__descriptor, job, false, true);
}

/* ------------------------------------------------------------------------------------------ */
/* The other calls */

static void p_connect(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    const Process__ConnectRequest *r = (const Process__ConnectRequest *)req;
    struct sbx_job *job = find_job(c, r->process);

    if (job)
        stream_job(c, &process__connect_response__descriptor, job, true, false);
}

/* What List sends: each running job's info and config, and its env entries (names and values
 * cut from the job's NAME=value strings into text). */
struct listing {
    struct sbx_job_info *ji;
    Process__ProcessInfo *infos, **ptrs;
    Process__ProcessConfig *cfgs;
    Process__ProcessConfig__EnvsEntry *ents, **eptrs;
    char *text;
};

static void listing_release(struct listing *l)
{
    free(l->ji);
    free(l->infos);
    free(l->ptrs);
    free(l->cfgs);
    free(l->ents);
    free(l->eptrs);
    free(l->text);
}

/* Allocates for n jobs whose infos are in l->ji. */
static int listing_alloc(struct listing *l, size_t n)
{
    size_t n_envs = 0, text = 0;

    for (size_t i = 0; i < n; i++)
        for (char *const *e = l->ji[i].envs; *e; e++, n_envs++)
            text += strlen(*e) + 1;
    l->infos = calloc(n, sizeof(*l->infos));
    l->ptrs = calloc(n, sizeof(*l->ptrs));
    l->cfgs = calloc(n, sizeof(*l->cfgs));
    l->ents = calloc(n_envs + 1, sizeof(*l->ents));
    l->eptrs = calloc(n_envs + 1, sizeof(*l->eptrs));
    l->text = malloc(text + 1);
    return l->infos && l->ptrs && l->cfgs && l->ents && l->eptrs && l->text ? 0 : -ENOMEM;
}

/* The config as Start was given it (envd keeps the request's): cmd and args (the job's argv),
 * the request's envs and cwd. *ents and *text advance past what it takes. */
static void fill_config(Process__ProcessConfig *cfg, const struct sbx_job_info *ji,
                        const struct listing *l, size_t *ents, size_t *text)
{
    size_t argc = 0;

    while (ji->argv[argc])
        argc++;
    process__process_config__init(cfg);
    cfg->cmd = argc ? ji->argv[0] : (char *)"";
    cfg->n_args = argc ? argc - 1 : 0;
    cfg->args = argc ? (char **)ji->argv + 1 : NULL;
    cfg->envs = l->eptrs + *ents;
    for (char *const *e = ji->envs; *e; e++, cfg->n_envs++) {
        Process__ProcessConfig__EnvsEntry *ent = &l->ents[*ents];
        char *name = l->text + *text;
        size_t len = strlen(*e), k = strcspn(*e, "=");
        memcpy(name, *e, len + 1);
        name[k] = '\0'; /* the names have no '=' (config_valid) */
        process__process_config__envs_entry__init(ent);
        ent->key = name;
        ent->value = k < len ? name + k + 1 : name + len;
        l->eptrs[(*ents)++] = ent;
        *text += len + 1;
    }
    if (ji->cwd) {
        cfg->_cwd_case = PROCESS__PROCESS_CONFIG___CWD_CWD;
        cfg->cwd = (char *)ji->cwd;
    }
}

static void p_list(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    struct sbx_jobs *jobs = sbx_e2b_server_opts(sbx_e2b_call_server(c))->jobs;
    Process__ListResponse resp = PROCESS__LIST_RESPONSE__INIT;
    struct sbx_job **all = NULL;
    struct listing l = {0};
    size_t n = jobs ? sbx_jobs_list(jobs, NULL, &all) : 0, k = 0, ents = 0, text = 0;

    (void)req;
    l.ji = calloc(n + 1, sizeof(*l.ji));
    for (size_t i = 0; l.ji && i < n; i++)
        sbx_job_info(all[i], &l.ji[i]);
    if (!l.ji || listing_alloc(&l, n) < 0) {
        sbx_e2b_call_fail(c, SBX_CONNECT_RESOURCE_EXHAUSTED, "out of memory");
    } else {
        for (size_t i = 0; i < n; i++) {
            if (l.ji[i].exited)
                continue;
            fill_config(&l.cfgs[k], &l.ji[i], &l, &ents, &text);
            process__process_info__init(&l.infos[k]);
            l.infos[k].config = &l.cfgs[k];
            l.infos[k].pid = (uint32_t)l.ji[i].pid;
            if (l.ji[i].tag && l.ji[i].tag[0]) {
                l.infos[k]._tag_case = PROCESS__PROCESS_INFO___TAG_TAG;
                l.infos[k].tag = (char *)l.ji[i].tag;
            }
            l.ptrs[k] = &l.infos[k];
            k++;
        }
        resp.n_processes = k;
        resp.processes = l.ptrs;
        (void)sbx_e2b_call_send(c, &resp.base);
    }
    for (size_t i = 0; i < n; i++)
        sbx_job_unref(all[i]);
    free(all);
    listing_release(&l);
}

static void write_done(void *data, int result)
{
    (void)data;
    (void)result; /* a process that exits without reading its stdin is no error */
}

static int errno_code(int r)
{
    switch (-r) {
    case EPIPE:
    case ENOTTY:
        return SBX_CONNECT_FAILED_PRECONDITION;
    case ENOMEM:
    case EAGAIN:
    case ENOBUFS:
        return SBX_CONNECT_RESOURCE_EXHAUSTED;
    case EINVAL:
        return SBX_CONNECT_INVALID_ARGUMENT;
    default:
        return SBX_CONNECT_INTERNAL;
    }
}

/* Answers a unary call after a job operation: the empty response of type d, or the error. */
static void answer(struct sbx_e2b_call *c, const ProtobufCMessageDescriptor *d, int r,
                   const struct sbx_error *e)
{
    ProtobufCMessage m = PROTOBUF_C_MESSAGE_INIT(d);

    if (r < 0)
        sbx_e2b_call_fail(c, errno_code(r), "%s", e->msg);
    else
        (void)sbx_e2b_call_send(c, &m);
}

/* A SendInput is answered once its bytes are in the process's stdin, as envd's write to the
 * pipe returns then: a client that sends more waits for the process to read, so the daemon
 * holds at most one message (--e2b-max-message-bytes) per call in flight, not all a client
 * sends. A process that exits without reading is no error. */
static void input_written(void *data, int result)
{
    struct sbx_e2b_call *c = data;
    struct sbx_error e = {0};

    if (result < 0 && result != -EPIPE)
        sbx_error_set(&e, -result, "write to stdin: %s", strerror(-result));
    answer(c, &process__send_input_response__descriptor, result == -EPIPE ? 0 : result, &e);
    sbx_e2b_call_unref(c);
}

static void p_send_input(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    const Process__SendInputRequest *r = (const Process__SendInputRequest *)req;
    struct sbx_job *job;
    struct sbx_error e = {0};
    ProtobufCBinaryData in = {0, NULL};
    int rc = 0;

    if (r->input && r->input->input_case == PROCESS__PROCESS_INPUT__INPUT_STDIN)
        in = r->input->stdin;
    else if (r->input && r->input->input_case == PROCESS__PROCESS_INPUT__INPUT_PTY)
        in = r->input->pty;
    if (!(job = find_job(c, r->process)))
        return;
    if (in.len && (rc = sbx_proc_write(sbx_job_proc(job), in.data, in.len, input_written,
                                       sbx_e2b_call_ref(c), &e)) < 0)
        sbx_e2b_call_unref(c); /* input_written will not run */
    sbx_job_unref(job);
    if (!in.len || rc < 0)
        answer(c, &process__send_input_response__descriptor, rc, &e);
}

static void p_send_signal(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    const Process__SendSignalRequest *r = (const Process__SendSignalRequest *)req;
    struct sbx_error e = {0};
    struct sbx_job *job;
    int sig, rc;

    if (r->signal == PROCESS__SIGNAL__SIGNAL_SIGKILL)
        sig = SIGKILL;
    else if (r->signal == PROCESS__SIGNAL__SIGNAL_SIGTERM)
        sig = SIGTERM;
    else
        return sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT, "unknown signal %d",
                                 (int)r->signal);
    if (!(job = find_job(c, r->process)))
        return;
    /* The whole tree: a shell's children die with it (envd signals the shell alone). */
    rc = sbx_job_signal(job, sig, SBX_SIGNAL_TREE, &e);
    sbx_job_unref(job);
    answer(c, &process__send_signal_response__descriptor, rc < 0 ? rc : 0, &e);
}

static void p_close_stdin(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    const Process__CloseStdinRequest *r = (const Process__CloseStdinRequest *)req;
    struct sbx_error e = {0};
    struct sbx_job *job = find_job(c, r->process);
    int rc;

    if (!job)
        return;
    rc = sbx_proc_close_stdin(sbx_job_proc(job), write_done, NULL, &e);
    sbx_job_unref(job);
    answer(c, &process__close_stdin_response__descriptor, rc, &e);
}

static void p_update(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    const Process__UpdateRequest *r = (const Process__UpdateRequest *)req;
    struct sbx_error e = {0};
    struct sbx_job *job;
    int rc = 0;

    if (r->_pty_case && r->pty && r->pty->size &&
        (r->pty->size->cols > 0xffff || r->pty->size->rows > 0xffff))
        return sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT,
                                 "cols and rows must be below 65536");
    if (!(job = find_job(c, r->process)))
        return;
    if (r->_pty_case && r->pty && r->pty->size)
        rc = sbx_proc_resize(sbx_job_proc(job), (unsigned short)r->pty->size->cols,
                             (unsigned short)r->pty->size->rows, &e);
    sbx_job_unref(job);
    answer(c, &process__update_response__descriptor, rc, &e);
}

/* StreamInput: a StartEvent names the process, Data events go to its stdin (or pty) in order,
 * keepalives are dropped; the answer comes at the end of the request stream. */
struct input {
    struct sbx_job *job;
};

static void input_free(void *data)
{
    struct input *in = data;

    sbx_job_unref(in->job);
    free(in);
}

static void p_stream_input(struct sbx_e2b_call *c, const ProtobufCMessage *req)
{
    const Process__StreamInputRequest *r = (const Process__StreamInputRequest *)req;
    struct input *in = sbx_e2b_call_data(c);
    const Process__ProcessInput *pi;
    struct sbx_error e = {0};
    ProtobufCBinaryData d = {0, NULL};
    int rc;

    switch (r->event_case) {
    case PROCESS__STREAM_INPUT_REQUEST__EVENT_START:
        if (in)
            return sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT, "a second start event");
        if (!(in = calloc(1, sizeof(*in))))
            return sbx_e2b_call_fail(c, SBX_CONNECT_RESOURCE_EXHAUSTED, "out of memory");
        if (!(in->job = find_job(c, r->start->process))) {
            free(in);
            return;
        }
        sbx_e2b_call_set_data(c, in, input_free);
        return;
    case PROCESS__STREAM_INPUT_REQUEST__EVENT_DATA:
        if (!in)
            return sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT,
                                     "a data event before the start event");
        pi = r->data->input;
        if (pi && pi->input_case == PROCESS__PROCESS_INPUT__INPUT_STDIN)
            d = pi->stdin;
        else if (pi && pi->input_case == PROCESS__PROCESS_INPUT__INPUT_PTY)
            d = pi->pty;
        if (d.len &&
            (rc = sbx_proc_write(sbx_job_proc(in->job), d.data, d.len, write_done, NULL, &e)) < 0)
            sbx_e2b_call_fail(c, errno_code(rc), "%s", e.msg);
        return;
    default:
        return; /* keepalive */
    }
}

static void p_stream_input_end(struct sbx_e2b_call *c)
{
    Process__StreamInputResponse resp = PROCESS__STREAM_INPUT_RESPONSE__INIT;

    if (!sbx_e2b_call_data(c))
        return sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT, "no start event");
    (void)sbx_e2b_call_send(c, &resp.base);
    sbx_e2b_call_end(c);
}

/* ------------------------------------------------------------------------------------------ */
/* The table */

static Process__ProcessEvent__KeepAlive keepalive = PROCESS__PROCESS_EVENT__KEEP_ALIVE__INIT;
static Process__ProcessEvent keepalive_event = {
    .base = PROTOBUF_C_MESSAGE_INIT(&process__process_event__descriptor),
    .event_case = PROCESS__PROCESS_EVENT__EVENT_KEEPALIVE,
    .keepalive = &keepalive,
};
static const Process__StartResponse start_keepalive = {
    .base = PROTOBUF_C_MESSAGE_INIT(&process__start_response__descriptor),
    .event = &keepalive_event,
};
static const Process__ConnectResponse connect_keepalive = {
    .base = PROTOBUF_C_MESSAGE_INIT(&process__connect_response__descriptor),
    .event = &keepalive_event,
};

#define M(name, lname, stream, f, ka, own)                                                         \
    {                                                                                              \
        "/process.Process/" name, &process__##lname##_request__descriptor,                         \
            &process__##lname##_response__descriptor, stream, f, ka, own, false, NULL              \
    }

const struct sbx_e2b_method sbx_e2b_process_methods[] = {
    M("Start", start, true, p_start, &start_keepalive.base, true),
    M("Connect", connect, true, p_connect, &connect_keepalive.base, false),
    M("List", list, false, p_list, NULL, false),
    M("SendInput", send_input, false, p_send_input, NULL, false),
    M("SendSignal", send_signal, false, p_send_signal, NULL, false),
    M("CloseStdin", close_stdin, false, p_close_stdin, NULL, false),
    M("Update", update, false, p_update, NULL, false),
    {"/process.Process/StreamInput", &process__stream_input_request__descriptor,
     &process__stream_input_response__descriptor, false, p_stream_input, NULL, false, true,
     p_stream_input_end},
};
const size_t sbx_e2b_process_n_methods = SBX_ARRAY_SIZE(sbx_e2b_process_methods);
