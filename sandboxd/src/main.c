/* sandboxd: parses flags, starts the adapters, registers them with the lifecycle (signals, the
 * main process, the drain) and runs it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <malloc.h>
#include <pthread.h>
#include <grpc/grpc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "cleanup.h"
#include "e2b_fs.h"
#include "e2b_server.h"
#include "flags.h"
#include "fswatch.h"
#include "cgroup.h"
#include "grpc_files.h"
#include "grpc_health.h"
#include "grpc_jobs.h"
#include "grpc_process.h"
#include "grpc_reflection.h"
#include "grpc_server.h"
#include "http_server.h"
#include "lifecycle.h"
#include "log.h"
#include "loop.h"
#include "metrics.h"
#include "parse.h"
#include "path.h"
#include "proc.h"
#include "seccomp_profile.h"
#include "spawn.h"

#ifndef SANDBOXD_VERSION
#define SANDBOXD_VERSION "dev"
#endif

/* The descriptor set of every service we serve (descriptors.S). */
extern const uint8_t sbx_descriptor_set[];
extern const uint8_t sbx_descriptor_set_end[];

static const char *arg_listen_host; /* NULL: every address, IPv4 and IPv6 */
static long long arg_grpc_port = 9090;
static long long arg_rest_port = 8080;
static long long arg_e2b_port; /* 0: off */
static const char *arg_grpc_socket;
static const char *arg_root_dir = "/workspace";
static const char *arg_metadata_env_prefix = "SANDBOX_";
static uint64_t arg_shutdown_timeout_ms = 10000;
static uint64_t arg_termination_grace_ms = 5000;
static uint64_t arg_http_idle_timeout_ms = 60000;
static uint64_t arg_exit_drain_timeout_ms = 1000;
static long long arg_stream_chunk_size = 4096;
static long long arg_max_message_bytes = 4 << 20;
/* The E2B port's: SendInput carries a whole sendStdin in one message (base64 in JSON), and envd
 * bounds none; 32 MiB takes 24 MiB of input, and SendInput holds one message per call in flight. */
static long long arg_e2b_max_message_bytes = 32 << 20;
static long long arg_max_output_bytes = 16 << 20;
static long long arg_grpc_threads = 4;
static long long arg_http_threads = 4;
static long long arg_http_max_connections = 2048;
static long long arg_http_max_per_peer = 512;
static long long arg_max_websockets = 1024;
static uint64_t arg_http_head_timeout_ms = 5000;
static long long arg_max_upload_bytes = 16LL << 30;
static long long arg_max_processes = 1024;
static long long arg_output_ring_bytes = 1 << 20;
static long long arg_max_output_memory = 256 << 20;
static uint64_t arg_exit_retention_ms = 600000;
static long long arg_max_exited = 256;
static bool arg_keep_serving;
static const char *arg_cgroups = "auto";
static const char *arg_oom_score_adj = "1000";
static const char *arg_daemon_oom_score_adj = "-900";
static char **arg_command; /* after --: the main process */
static const char *arg_token_file;
static bool arg_metrics_auth = true;
static enum sbx_seccomp_profile arg_seccomp = SBX_SECCOMP_DEFAULT;
static bool arg_no_new_privs = true;
static long long arg_max_watches = 64;
static long long arg_max_watches_per_client = 16;
static long long arg_max_watch_dirs = 16384;
static long long arg_watch_queue = 4096;
static uint64_t arg_watch_retention_ms = 30000;

/* Everything the loop's callbacks reach. */
static struct {
    struct sbx_loop *loop;
    struct sbx_lifecycle *lc;
    struct sbx_proctab *procs;
    struct sbx_grpc *grpc;
    struct sbx_http *http;
    struct sbx_e2b_server *e2b;
    struct sbx_health *health;
    struct sbx_process_service process;
    struct sbx_jobs *jobs;
    struct sbx_cgroups *cgroups;
    struct sbx_error cgroups_why;
    struct sbx_jobs_service jobs_service;
    struct sbx_fswatches *watches;
    struct sbx_files_service files_service;
    struct sbx_budget output_budget;   /* --max-output-memory */
    struct sbx_auth *auth;             /* NULL: no token, everything open */
    struct sock_fprog seccomp;         /* empty: no filter */
    struct sock_fprog seccomp_default; /* when ours is off: the default, for requests */
    struct sbx_lifecycle_hook grpc_hook, health_hook, jobs_hook, http_hook, cgroups_hook,
        watches_hook;
} d;

static int opt_port(const char *v, void *dst)
{
    return sbx_parse_int(v, 0, 65535, dst);
}

static int opt_size(const char *v, void *dst)
{
    return sbx_parse_int(v, 1, 1 << 30, dst);
}

static int opt_threads(const char *v, void *dst)
{
    return sbx_parse_int(v, 1, 8, dst);
}

static int opt_bytes(const char *v, void *dst)
{
    return sbx_parse_int(v, 0, 1LL << 50, dst);
}

static int opt_count(const char *v, void *dst)
{
    return sbx_parse_int(v, 1, 1 << 20, dst);
}

static int opt_cgroups(const char *v, void *dst)
{
    if (strcmp(v, "auto") != 0 && strcmp(v, "off") != 0)
        return -EINVAL;
    *(const char **)dst = v;
    return 0;
}

static int opt_oom_adj(const char *v, void *dst)
{
    long long n;
    int r = sbx_parse_int(v, -1000, 1000, &n);

    if (r == 0)
        *(const char **)dst = v;
    return r;
}

static int opt_seccomp(const char *v, void *dst)
{
    return sbx_seccomp_parse_profile(v, dst);
}

static const struct sbx_flag options[] = {
    {"listen-host", sbx_flag_string, &arg_listen_host,
     "address to listen on (every IPv4 and IPv6 address; IPv4 alone without IPv6)"},
    {"grpc-port", opt_port, &arg_grpc_port, "gRPC port, 0 for any free one (9090)"},
    {"grpc-socket", sbx_flag_string, &arg_grpc_socket, "also serve gRPC on this unix socket"},
    {"rest-port", opt_port, &arg_rest_port, "REST port (8080)"},
    {"e2b-port", opt_port, &arg_e2b_port,
     "E2B port: envd's API for E2B's SDKs, on the sandbox's absolute paths (0: off)"},
    {"root-dir", sbx_flag_string, &arg_root_dir,
     "directory processes and files are confined to (/workspace)"},
    {"metadata-env-prefix", sbx_flag_string, &arg_metadata_env_prefix,
     "env prefix of /v1/metadata (SANDBOX_)"},
    {"shutdown-timeout", sbx_flag_duration, &arg_shutdown_timeout_ms,
     "drain time on SIGTERM (10s)"},
    {"termination-grace", sbx_flag_duration, &arg_termination_grace_ms,
     "SIGTERM to SIGKILL of children on shutdown (5s)"},
    {"exit-drain-timeout", sbx_flag_duration, &arg_exit_drain_timeout_ms,
     "output awaited after a process exits while its pipes stay open (1s)"},
    {"http-idle-timeout", sbx_flag_duration, &arg_http_idle_timeout_ms,
     "idle keep-alive timeout (60s)"},
    {"stream-chunk-size", opt_size, &arg_stream_chunk_size,
     "largest output chunk streamed by Start (4096)"},
    {"max-message-bytes", opt_size, &arg_max_message_bytes, "largest gRPC request (4194304)"},
    {"e2b-max-message-bytes", opt_size, &arg_e2b_max_message_bytes,
     "largest request message on the E2B port: SendInput's stdin, base64 in JSON (33554432)"},
    {"max-output-bytes", opt_size, &arg_max_output_bytes,
     "output kept per stream by Execute (16777216)"},
    {"grpc-threads", opt_threads, &arg_grpc_threads, "completion-queue threads (4)"},
    {"http-threads", opt_threads, &arg_http_threads, "HTTP threads (4)"},
    {"http-max-connections", opt_count, &arg_http_max_connections,
     "HTTP connections served at once; beyond, idle ones are closed for new ones (2048)"},
    {"http-max-connections-per-peer", opt_count, &arg_http_max_per_peer,
     "HTTP connections from one client address (512)"},
    {"max-websockets", opt_count, &arg_max_websockets,
     "WebSocket connections (terminals) at once, within --http-max-connections (1024)"},
    {"http-head-timeout", sbx_flag_duration, &arg_http_head_timeout_ms,
     "time a new HTTP connection has to send its first request head (5s)"},
    {"max-processes", opt_count, &arg_max_processes,
     "processes at once; beyond, RESOURCE_EXHAUSTED (1024)"},
    {"output-ring-bytes", opt_bytes, &arg_output_ring_bytes,
     "output kept per stream of a spawned process (1048576)"},
    {"max-output-memory", opt_bytes, &arg_max_output_memory,
     "process output held in memory at once, all processes together (captures and rings); "
     "past it, output is dropped as past a per-process cap; 0 for no bound (256 MiB)"},
    {"exit-retention", sbx_flag_duration, &arg_exit_retention_ms,
     "how long an exited spawned process and its output are kept (10m)"},
    {"max-exited", opt_count, &arg_max_exited,
     "exited spawned processes kept at most; the oldest go first (256)"},
    {"max-upload-bytes", opt_bytes, &arg_max_upload_bytes,
     "largest upload, 0 for no limit (16 GiB)"},
    {"cgroups", opt_cgroups, &arg_cgroups,
     "auto: a cgroup per spawned process when the kernel gives us one; off (auto)"},
    {"oom-score-adj", opt_oom_adj, &arg_oom_score_adj,
     "oom_score_adj of the processes we start: the OOM killer takes them first (1000)"},
    {"daemon-oom-score-adj", opt_oom_adj, &arg_daemon_oom_score_adj,
     "our own oom_score_adj, when allowed (-900)"},
    {"keep-serving", NULL, &arg_keep_serving,
     "keep serving after the main process exits (off: drain and exit with its status)"},
    {"token-file", sbx_flag_string, &arg_token_file,
     "file holding the bearer token every call needs (or env SANDBOXD_TOKEN)"},
    {"metrics-auth", sbx_flag_bool, &arg_metrics_auth,
     "/metrics needs the token too, when set (true)"},
    {"seccomp", opt_seccomp, &arg_seccomp,
     "seccomp profile of spawned processes: default or off (default)"},
    {"no-new-privs", sbx_flag_bool, &arg_no_new_privs,
     "no_new_privs on spawned processes; false needs --seccomp=off (true)"},
    {"max-watches", opt_count, &arg_max_watches,
     "directory watches at once, those kept for a resume included (64)"},
    {"max-watches-per-client", opt_count, &arg_max_watches_per_client,
     "directory watches of one client address (16)"},
    {"max-watch-dirs", opt_count, &arg_max_watch_dirs,
     "directories watched through inotify, all watches together (16384)"},
    {"watch-queue", opt_count, &arg_watch_queue,
     "events a watch keeps for its reader; past it the oldest go, told as an overflow (4096)"},
    {"watch-retention", sbx_flag_duration, &arg_watch_retention_ms,
     "how long a watch whose client went away is kept for a resume (30s)"},
    {"log-level", sbx_flag_log_level, NULL, "error, warn, info or debug (info)"},
    {"log-format", sbx_flag_log_format, NULL, "text or json (text)"},
};

static const struct sbx_flags flags = {
    .flag = options,
    .n = SBX_ARRAY_SIZE(options),
    .prog = "sandboxd",
    .version = SANDBOXD_VERSION,
    .synopsis = "usage: sandboxd [flags] [-- command [args...]]\n\n"
                "With a command, sandboxd runs it as the main process (stdio passed through,\n"
                "signals forwarded) and exits with its status once it exits and the rest drains.\n",
};

/* Returns 0 to run, 1 to exit successfully (--version, --help), -1 on bad usage. */
static int parse_args(int argc, char **argv)
{
    bool dashdash;
    int rest, r = sbx_flags_parse(&flags, argc, argv, &rest, &dashdash);

    if (r != 0)
        return r;
    if (rest < argc && dashdash) {
        arg_command = &argv[rest];
    } else if (rest < argc) {
        fprintf(stderr, "sandboxd: unexpected argument \"%s\" (a command goes after --)\n",
                argv[rest]);
        return -1;
    }
    return 0;
}

/* What the servers do in the drain (lifecycle.h), each a hook that knows its server. gRPC: new
 * processes are refused and no call is accepted; the drain waits until every call has finished,
 * which a completion-queue thread reports. */
static void grpc_finished(void *hook)
{
    sbx_lifecycle_hook_done(hook);
}

static void grpc_stop(struct sbx_lifecycle_hook *h)
{
    __atomic_store_n(&d.process.draining, true, __ATOMIC_RELEASE);
    sbx_grpc_shutdown(h->arg, grpc_finished, h);
}

static void grpc_cancel(struct sbx_lifecycle_hook *h)
{
    sbx_grpc_cancel_all(h->arg);
}

/* Health: NOT_SERVING from the drain on. Once no process is left, the only calls that may remain
 * are health watches: they end. */
static void health_stop(struct sbx_lifecycle_hook *h)
{
    sbx_health_set_serving(h->arg, false);
}

static void health_idle(struct sbx_lifecycle_hook *h)
{
    sbx_health_end_watches(h->arg);
}

static void jobs_stop(struct sbx_lifecycle_hook *h)
{
    sbx_jobs_shutdown(h->arg);
}

/* Watches end: their streams say so and finish. */
static void watches_stop(struct sbx_lifecycle_hook *h)
{
    sbx_fswatches_shutdown(h->arg);
    sbx_e2b_fs_shutdown();
}

static void http_stop(struct sbx_lifecycle_hook *h)
{
    sbx_http_set_draining(h->arg);
}

/* Cgroups of exited processes that still had members go once they are empty. */
static void cgroups_tidy(struct sbx_lifecycle_hook *h)
{
    sbx_cgroups_sweep(h->arg);
}

static int add_hooks(struct sbx_error *err)
{
    struct sbx_lifecycle_hook *hooks[] = {&d.grpc_hook, &d.health_hook,  &d.jobs_hook,
                                          &d.http_hook, &d.cgroups_hook, &d.watches_hook};
    int r;

    d.grpc_hook = (struct sbx_lifecycle_hook){
        .stop = grpc_stop, .cancel = grpc_cancel, .waits = true, .arg = d.grpc};
    d.health_hook =
        (struct sbx_lifecycle_hook){.stop = health_stop, .idle = health_idle, .arg = d.health};
    d.jobs_hook = (struct sbx_lifecycle_hook){.stop = jobs_stop, .arg = d.jobs};
    d.http_hook = (struct sbx_lifecycle_hook){.stop = http_stop, .arg = d.http};
    d.cgroups_hook = (struct sbx_lifecycle_hook){.tidy = cgroups_tidy, .arg = d.cgroups};
    d.watches_hook = (struct sbx_lifecycle_hook){.stop = watches_stop, .arg = d.watches};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(hooks); i++)
        if ((r = sbx_lifecycle_add_hook(d.lc, hooks[i], err)) < 0)
            return r;
    return 0;
}

/* Our soft fd limit up to the hard one (a process needs several fds, a connection one); the
 * processes we start get the limit we were started with. */
static void raise_nofile(void)
{
    struct rlimit lim;

    struct rlimit raised;

    if (getrlimit(RLIMIT_NOFILE, &lim) < 0 || lim.rlim_cur >= lim.rlim_max)
        return;
    raised = (struct rlimit){.rlim_cur = lim.rlim_max, .rlim_max = lim.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &raised) < 0)
        return;
    sbx_spawn_set_base_nofile(&lim);
    log_debug("fd limit raised from %llu to %llu", (unsigned long long)lim.rlim_cur,
              (unsigned long long)lim.rlim_max);
}

/* The OOM killer should take a workload before us. Lowering our score needs CAP_SYS_RESOURCE. */
static void protect_self(void)
{
    _cleanup_close_ int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);

    if (fd < 0 || write(fd, arg_daemon_oom_score_adj, strlen(arg_daemon_oom_score_adj)) < 0)
        log_info("cannot set our oom_score_adj to %s: %s", arg_daemon_oom_score_adj,
                 strerror(errno));
}

/* Our stdio must be open: the fds we make must never land on 0, 1 or 2. */
static void ensure_stdio(void)
{
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0)
            (void)open("/dev/null", O_RDWR);
}

/* Liveness: the loop runs a task posted to it within a second. */
static pthread_mutex_t ping_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ping_cond = PTHREAD_COND_INITIALIZER;
static uint64_t ping_done;

static void pong(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&ping_lock);
    ping_done++;
    pthread_cond_broadcast(&ping_cond);
    pthread_mutex_unlock(&ping_lock);
}

static bool loop_alive(void *arg)
{
    struct timespec ts;
    uint64_t before;
    bool ok;

    (void)arg;
    pthread_mutex_lock(&ping_lock);
    before = ping_done;
    if (sbx_loop_post(d.loop, pong, NULL) < 0) {
        pthread_mutex_unlock(&ping_lock);
        return false;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    while (ping_done == before)
        if (pthread_cond_timedwait(&ping_cond, &ping_lock, &ts) != 0)
            break;
    ok = ping_done != before;
    pthread_mutex_unlock(&ping_lock);
    return ok;
}

/* Readiness: every listener is bound (we serve HTTP only after gRPC) and a child can be made. */
static bool ready(void *arg)
{
    (void)arg;
    return !sbx_lifecycle_draining(d.lc) && sbx_spawn_probe() == 0;
}

static int start_http(const struct sbx_root *root, struct sbx_error *err)
{
    struct sbx_http_opts o = {
        .host = arg_listen_host,
        .port = (int)arg_rest_port,
        .idle_timeout_s = (unsigned)((arg_http_idle_timeout_ms + 999) / 1000),
        .head_timeout_ms = arg_http_head_timeout_ms ? (unsigned)arg_http_head_timeout_ms : 1,
        .threads = (unsigned)arg_http_threads,
        .max_connections = (unsigned)arg_http_max_connections,
        .max_per_peer = (unsigned)arg_http_max_per_peer,
        .max_upload_bytes = (uint64_t)arg_max_upload_bytes,
        .root = root,
        .metadata_prefix = arg_metadata_env_prefix,
        .ready = ready,
        .alive = loop_alive,
        .auth = d.auth,
        .metrics_open = !arg_metrics_auth,
        .jobs = d.jobs,
        .loop = d.loop,
        .max_websockets = (unsigned)arg_max_websockets,
        .watches = d.watches,
        .watch_keepalive_ms = 15000,
    };
    int port = sbx_http_start(&d.http, &o, err);

    if (port < 0)
        return port;
    log_info("rest listening on %s port %d (%s)",
             arg_listen_host ? arg_listen_host : "every address", port, sbx_http_families(d.http));
    return 0;
}

/* The E2B port, when asked for: its processes are jobs, its token sandboxd's. */
static int start_e2b(struct sbx_error *err)
{
    struct sbx_e2b_opts o = {
        .host = arg_listen_host,
        .port = (int)arg_e2b_port,
        .idle_timeout_s = (unsigned)((arg_http_idle_timeout_ms + 999) / 1000),
        .head_timeout_ms = arg_http_head_timeout_ms ? (unsigned)arg_http_head_timeout_ms : 1,
        .threads = (unsigned)arg_http_threads,
        .max_connections = (unsigned)arg_http_max_connections,
        .max_per_peer = (unsigned)arg_http_max_per_peer,
        .max_message_bytes = (size_t)arg_e2b_max_message_bytes,
        .auth = d.auth,
        .loop = d.loop,
        .jobs = d.jobs,
        .draining = &d.process.draining,
    };
    /* The E2B port's watches are on the sandbox's paths: a registry of their own. */
    struct sbx_e2b_fs_opts fo = {.max_watches = (size_t)arg_max_watches,
                                 .max_dirs = (size_t)arg_max_watch_dirs,
                                 .queue_events = (size_t)arg_watch_queue,
                                 .keepalive_ms = 5000,
                                 .max_upload = (uint64_t)arg_max_upload_bytes};
    int port;

    if (!arg_e2b_port)
        return 0;
    if ((port = sbx_e2b_fs_setup(d.loop, &fo, err)) < 0)
        return port;
    port = sbx_e2b_start(&d.e2b, &o, err);
    if (port < 0)
        return port;
    log_info("e2b listening on %s port %d", arg_listen_host ? arg_listen_host : "every address",
             port);
    return 0;
}

/* A host name must resolve before gRPC is asked to listen on it (gRPC only says it could not):
 * in an image without /etc nothing resolves, and an address is needed. */
static int check_listen_host(struct sbx_error *err)
{
    struct addrinfo hints = {.ai_flags = AI_PASSIVE, .ai_socktype = SOCK_STREAM}, *res = NULL;
    unsigned char buf[sizeof(struct in6_addr)];
    int r;

    if (inet_pton(AF_INET, arg_listen_host, buf) == 1 ||
        inet_pton(AF_INET6, arg_listen_host, buf) == 1)
        return 0;
    r = getaddrinfo(arg_listen_host, NULL, &hints, &res);
    if (res)
        freeaddrinfo(res);
    if (r != 0)
        return sbx_error_set(err, EINVAL,
                             "--listen-host %s: %s (give an address, such as 127.0.0.1)",
                             arg_listen_host, gai_strerror(r));
    return 0;
}

static int listen_all(struct sbx_error *err)
{
    char addr[512];
    int port;

    if (arg_listen_host && check_listen_host(err) < 0)
        return -EINVAL;

    /* gRPC C core binds a wildcard address dual-stack, falling back to IPv4 alone. */
    if (!arg_listen_host)
        snprintf(addr, sizeof(addr), "[::]:%lld", arg_grpc_port);
    else if (strchr(arg_listen_host, ':'))
        snprintf(addr, sizeof(addr), "[%s]:%lld", arg_listen_host, arg_grpc_port);
    else
        snprintf(addr, sizeof(addr), "%s:%lld", arg_listen_host, arg_grpc_port);
    port = sbx_grpc_listen(d.grpc, addr, err);
    if (port < 0)
        return port;
    log_info("grpc listening on %s port %d", arg_listen_host ? arg_listen_host : "every address",
             port);
    if (arg_grpc_socket) {
        snprintf(addr, sizeof(addr), "unix:%s", arg_grpc_socket);
        (void)unlink(arg_grpc_socket);
        port = sbx_grpc_listen(d.grpc, addr, err);
        if (port < 0)
            return port;
        log_info("grpc listening on unix socket %s", arg_grpc_socket);
    }
    return 0;
}

/* Cgroups for spawned processes, when asked and the kernel gives us some; else NULL, and why. */
static struct sbx_cgroups *open_cgroups(void)
{
    if (strcmp(arg_cgroups, "off") == 0) {
        sbx_error_set(&d.cgroups_why, EOPNOTSUPP, "cgroups are off (--cgroups off)");
        return NULL;
    }
    if (sbx_cgroups_open(&d.cgroups, &d.cgroups_why) < 0) {
        log_info("no cgroups for spawned processes: %s", d.cgroups_why.msg);
        return NULL;
    }
    /* The controllers first, one word each (what tests and operators read), then why a limit
     * is refused. */
    log_info("cgroups %s for spawned processes:%s%s%s%s%s%s", sbx_cgroups_version(d.cgroups),
             sbx_cgroups_has_memory(d.cgroups) ? " memory" : "",
             sbx_cgroups_has_pids(d.cgroups) ? " pids" : "",
             sbx_cgroups_has_memory(d.cgroups) ? "" : "; no memory limits: ",
             sbx_cgroups_has_memory(d.cgroups) ? "" : sbx_cgroups_why_no_memory(d.cgroups),
             sbx_cgroups_has_pids(d.cgroups) ? "" : "; no pids limits: ",
             sbx_cgroups_has_pids(d.cgroups) ? "" : sbx_cgroups_why_no_pids(d.cgroups));
    return d.cgroups;
}

/* The token (from --token-file or SANDBOXD_TOKEN, never both) and the isolation of children. */
static int setup_security(struct sbx_error *err)
{
    const char *env = getenv("SANDBOXD_TOKEN");
    int r = 0;

    if (env && arg_token_file)
        return sbx_error_set(err, EINVAL, "both --token-file and SANDBOXD_TOKEN are set");
    if (arg_token_file)
        r = sbx_auth_load_file(arg_token_file, &d.auth, err);
    else if (env && (r = sbx_auth_new(env, strlen(env), &d.auth, err)) < 0)
        sbx_error_wrap(err, "SANDBOXD_TOKEN");
    /* Our children inherit our environment: the token is not theirs to read. */
    (void)unsetenv("SANDBOXD_TOKEN");
    if (r < 0)
        return r;
    if (!arg_no_new_privs && arg_seccomp != SBX_SECCOMP_OFF)
        return sbx_error_set(err, EINVAL, "--no-new-privs=false needs --seccomp=off");
    if ((r = sbx_seccomp_build(arg_seccomp, &d.seccomp, err)) < 0)
        return r;
    if (arg_no_new_privs && sbx_seccomp_check(d.seccomp.filter ? &d.seccomp : NULL, err) < 0)
        return sbx_error_wrap(err, "isolation of spawned processes (--seccomp=off to go without)");
    /* The default profile a request may ask for by name, also when ours is off. */
    if (!d.seccomp.filter) {
        struct sbx_error e = {0};
        if (sbx_seccomp_build(SBX_SECCOMP_DEFAULT, &d.seccomp_default, &e) < 0 ||
            sbx_seccomp_check(&d.seccomp_default, &e) < 0) {
            log_info("the default seccomp profile is unavailable to requests: %s", e.msg);
            sbx_seccomp_release(&d.seccomp_default);
        }
    }
    sbx_spawn_set_isolation(d.seccomp.filter ? &d.seccomp : NULL,
                            d.seccomp.filter           ? &d.seccomp
                            : d.seccomp_default.filter ? &d.seccomp_default
                                                       : NULL,
                            arg_no_new_privs);
    log_info("auth %s; seccomp %s; no_new_privs %s", d.auth ? "on (bearer token)" : "off",
             arg_seccomp == SBX_SECCOMP_OFF ? "off" : "default", arg_no_new_privs ? "on" : "off");
    return 0;
}

static int setup(struct sbx_root *root, struct sbx_reflection **refl, struct sbx_error *err)
{
    struct sbx_proctab_opts po = {.chunk_size = (size_t)arg_stream_chunk_size,
                                  .exit_drain_ms = arg_exit_drain_timeout_ms,
                                  .max_procs = (size_t)arg_max_processes,
                                  .oom_score_adj = arg_oom_score_adj};
    struct sbx_jobs_opts jo = {.cgroups = open_cgroups(),
                               .cgroups_why = d.cgroups_why.msg,
                               .ring_bytes = (size_t)arg_output_ring_bytes,
                               .output_budget = &d.output_budget,
                               .retain_ms = arg_exit_retention_ms,
                               .max_exited = (size_t)arg_max_exited,
                               .default_grace_ms = arg_termination_grace_ms};
    struct sbx_fswatches_opts wo = {.max_watches = (size_t)arg_max_watches,
                                    .max_per_client = (size_t)arg_max_watches_per_client,
                                    .max_dirs = (size_t)arg_max_watch_dirs,
                                    .queue_events = (size_t)arg_watch_queue,
                                    .retain_ms = arg_watch_retention_ms,
                                    .keepalive_ms = 15000};
    struct sbx_grpc_opts go = {.max_recv_bytes = (int)arg_max_message_bytes,
                               .max_streams = 4096,
                               .threads = (int)arg_grpc_threads,
                               .auth = d.auth,
                               .thread_init = sbx_spawn_confine_thread};
    int r;

    sbx_budget_init(&d.output_budget, (size_t)arg_max_output_memory);
    sbx_metrics_watch_output(&d.output_budget);
    sbx_lifecycle_watch_procs(d.lc, &po);
    if ((r = sbx_root_open(root, arg_root_dir, err)) < 0 || (r = sbx_loop_new(&d.loop, err)) < 0 ||
        (r = sbx_proctab_new(&d.procs, d.loop, &po, err)) < 0 ||
        (r = sbx_lifecycle_attach(d.lc, d.loop, d.procs, err)) < 0 ||
        (r = sbx_jobs_new(&d.jobs, d.loop, d.procs, &jo, err)) < 0 ||
        (r = sbx_health_new(&d.health, err)) < 0 ||
        (r = sbx_fswatches_new(&d.watches, d.loop, root, &wo, err)) < 0 ||
        (r = sbx_reflection_new(refl, sbx_descriptor_set,
                                (size_t)(sbx_descriptor_set_end - sbx_descriptor_set), err)) < 0)
        return r;
    d.process.procs = d.procs;
    d.process.root = root;
    d.process.max_output = (size_t)arg_max_output_bytes;
    d.process.output_budget = &d.output_budget;
    d.jobs_service = (struct sbx_jobs_service){.jobs = d.jobs,
                                               .root = root,
                                               .max_output = (size_t)arg_max_output_bytes,
                                               .chunk_size = 64 * 1024,
                                               .draining = &d.process.draining};
    d.files_service.watches = d.watches;
    grpc_init();
    if ((r = sbx_grpc_new(&d.grpc, &go, err)) < 0 ||
        (r = sbx_grpc_process_register(d.grpc, &d.process, err)) < 0 ||
        (r = sbx_grpc_jobs_register(d.grpc, &d.jobs_service, err)) < 0 ||
        (r = sbx_grpc_files_register(d.grpc, &d.files_service, err)) < 0 ||
        (r = sbx_grpc_health_register(d.grpc, d.health, err)) < 0 ||
        (r = sbx_grpc_reflection_register(d.grpc, *refl, err)) < 0 || (r = listen_all(err)) < 0 ||
        (r = sbx_grpc_start(d.grpc, err)) < 0 || (r = start_http(root, err)) < 0 ||
        (r = start_e2b(err)) < 0)
        return r;
    return add_hooks(err);
}

/* The drain and the loop are over, or setup failed: everything goes, gRPC last. */
static void teardown(struct sbx_root *root, struct sbx_reflection *refl)
{
    sbx_e2b_stop(d.e2b);
    sbx_e2b_fs_teardown(); /* its streams went with the server */
    sbx_http_stop(d.http);
    if (d.grpc) {
        /* No completion-queue thread is left after this; what they posted last runs below,
         * before anything it may reach is freed, and gRPC itself goes last. */
        sbx_grpc_shutdown(d.grpc, grpc_finished, &d.grpc_hook);
        sbx_grpc_cancel_all(d.grpc);
        sbx_grpc_close(d.grpc);
    }
    if (d.loop)
        sbx_loop_run_pending(d.loop);
    log_info("sandboxd stopped");
    sbx_fswatches_free(d.watches); /* every stream is gone with its server */
    sbx_jobs_free(d.jobs);
    if (d.loop)
        sbx_loop_run_pending(d.loop); /* the jobs' frees, which drop their processes */
    sbx_cgroups_free(d.cgroups);
    sbx_proctab_free(d.procs);
    sbx_lifecycle_free(d.lc);
    sbx_reflection_free(refl);
    sbx_health_free(d.health);
    if (d.grpc) {
        sbx_grpc_free(d.grpc);
        grpc_shutdown();
    }
    sbx_loop_free(d.loop);
    sbx_root_release(root);
    sbx_auth_free(d.auth);
    sbx_seccomp_release(&d.seccomp);
    sbx_seccomp_release(&d.seccomp_default);
}

int main(int argc, char **argv)
{
    struct sbx_lifecycle_opts lo = {0};
    struct sbx_root root = {.fd = -1};
    struct sbx_reflection *refl = NULL;
    struct sbx_error err = {0};
    int r, status;

    sbx_log_name = "sandboxd";
#ifdef __GLIBC__
    /* A few arenas, not one per thread: what one thread frees is found by the others. */
    (void)mallopt(M_ARENA_MAX, 2);
#endif
    ensure_stdio();
    r = parse_args(argc, argv);
    if (r != 0)
        return r > 0 ? EXIT_SUCCESS : 2;
    lo.shutdown_timeout_ms = arg_shutdown_timeout_ms;
    lo.termination_grace_ms = arg_termination_grace_ms;
    lo.keep_serving = arg_keep_serving;
    r = sbx_lifecycle_new(&d.lc, &lo, &err); /* first: threads started later find signals blocked */
    if (r == 0) {
        protect_self();
        raise_nofile();
        r = setup_security(&err);
    }
    if (r == 0)
        r = setup(&root, &refl, &err);
    if (r == 0) {
        log_info("sandboxd %s ready (root %s, pid %d)", SANDBOXD_VERSION, root.path, getpid());
        r = sbx_lifecycle_run(d.lc, arg_command, &err);
    }
    if (r < 0)
        log_error(err.code, "%s", err.msg);
    status = sbx_lifecycle_exit_status(d.lc, r);
    teardown(&root, refl);
    return status;
}
