/* sandboxd: parses flags, sets signals up, starts the gRPC adapter, runs the loop. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <grpc/grpc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "cleanup.h"
#include "grpc_health.h"
#include "grpc_process.h"
#include "grpc_reflection.h"
#include "grpc_server.h"
#include "http_server.h"
#include "log.h"
#include "loop.h"
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

static const char *arg_listen_host = "0.0.0.0";
static long long arg_grpc_port = 9090;
static long long arg_rest_port = 8080;
static const char *arg_grpc_socket;
static const char *arg_root_dir = "/workspace";
static const char *arg_metadata_env_prefix = "SANDBOX_";
static uint64_t arg_shutdown_timeout_ms = 10000;
static uint64_t arg_termination_grace_ms = 5000;
static uint64_t arg_http_idle_timeout_ms = 60000;
static uint64_t arg_exit_drain_timeout_ms = 1000;
static long long arg_stream_chunk_size = 4096;
static long long arg_max_message_bytes = 4 << 20;
static long long arg_max_output_bytes = 16 << 20;
static long long arg_grpc_threads = 4;
static long long arg_http_threads = 4;
static long long arg_http_max_connections = 2048;
static long long arg_max_upload_bytes = 16LL << 30;
static long long arg_max_processes = 1024;
static const char *arg_token_file;
static bool arg_metrics_auth = true;
static enum sbx_seccomp_profile arg_seccomp = SBX_SECCOMP_DEFAULT;
static bool arg_no_new_privs = true;

/* Everything the loop's callbacks reach. */
static struct {
    struct sbx_loop *loop;
    struct sbx_proctab *procs;
    struct sbx_grpc *grpc;
    struct sbx_http *http;
    struct sbx_health *health;
    struct sbx_process_service process;
    struct sbx_watch signals;
    struct sbx_auth *auth;     /* NULL: no token, everything open */
    struct sock_fprog seccomp; /* empty: no filter */
    struct sbx_timer kill_timer, deadline_timer;
    bool draining;
    bool idle; /* draining, and no process is left */
} d;

static int opt_string(const char *v, void *dst)
{
    *(const char **)dst = v;
    return 0;
}

static int opt_port(const char *v, void *dst)
{
    return sbx_parse_int(v, 0, 65535, dst);
}

static int opt_duration(const char *v, void *dst)
{
    return sbx_parse_duration_ms(v, dst);
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

static int opt_bool(const char *v, void *dst)
{
    if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
        *(bool *)dst = true;
    else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
        *(bool *)dst = false;
    else
        return -EINVAL;
    return 0;
}

static int opt_seccomp(const char *v, void *dst)
{
    return sbx_seccomp_parse_profile(v, dst);
}

static int opt_log_level(const char *v, void *dst)
{
    (void)dst;
    return sbx_log_parse_level(v, &sbx_log_max_level);
}

static int opt_log_format(const char *v, void *dst)
{
    (void)dst;
    if (strcmp(v, "json") != 0 && strcmp(v, "text") != 0)
        return -EINVAL;
    sbx_log_json = strcmp(v, "json") == 0;
    return 0;
}

static const struct option_def {
    const char *name;
    int (*parse)(const char *value, void *dst);
    void *dst;
    const char *help;
} options[] = {
    {"listen-host", opt_string, &arg_listen_host, "address to listen on (0.0.0.0)"},
    {"grpc-port", opt_port, &arg_grpc_port, "gRPC port, 0 for any free one (9090)"},
    {"grpc-socket", opt_string, &arg_grpc_socket, "also serve gRPC on this unix socket"},
    {"rest-port", opt_port, &arg_rest_port, "REST port (8080)"},
    {"root-dir", opt_string, &arg_root_dir,
     "directory processes and files are confined to (/workspace)"},
    {"metadata-env-prefix", opt_string, &arg_metadata_env_prefix,
     "env prefix of /v1/metadata (SANDBOX_)"},
    {"shutdown-timeout", opt_duration, &arg_shutdown_timeout_ms, "drain time on SIGTERM (10s)"},
    {"termination-grace", opt_duration, &arg_termination_grace_ms,
     "SIGTERM to SIGKILL of children on shutdown (5s)"},
    {"exit-drain-timeout", opt_duration, &arg_exit_drain_timeout_ms,
     "output awaited after a process exits while its pipes stay open (1s)"},
    {"http-idle-timeout", opt_duration, &arg_http_idle_timeout_ms, "idle keep-alive timeout (60s)"},
    {"stream-chunk-size", opt_size, &arg_stream_chunk_size,
     "largest output chunk streamed by Start (4096)"},
    {"max-message-bytes", opt_size, &arg_max_message_bytes, "largest gRPC request (4194304)"},
    {"max-output-bytes", opt_size, &arg_max_output_bytes,
     "output kept per stream by Execute (16777216)"},
    {"grpc-threads", opt_threads, &arg_grpc_threads, "completion-queue threads (4)"},
    {"http-threads", opt_threads, &arg_http_threads, "HTTP threads (4)"},
    {"http-max-connections", opt_count, &arg_http_max_connections,
     "HTTP connections at once (2048)"},
    {"max-processes", opt_count, &arg_max_processes,
     "processes at once; beyond, RESOURCE_EXHAUSTED (1024)"},
    {"max-upload-bytes", opt_bytes, &arg_max_upload_bytes,
     "largest upload, 0 for no limit (16 GiB)"},
    {"token-file", opt_string, &arg_token_file,
     "file holding the bearer token every call needs (or env SANDBOXD_TOKEN)"},
    {"metrics-auth", opt_bool, &arg_metrics_auth, "/metrics needs the token too, when set (true)"},
    {"seccomp", opt_seccomp, &arg_seccomp,
     "seccomp profile of spawned processes: default or off (default)"},
    {"no-new-privs", opt_bool, &arg_no_new_privs,
     "no_new_privs on spawned processes; false needs --seccomp=off (true)"},
    {"log-level", opt_log_level, NULL, "error, warn, info or debug (info)"},
    {"log-format", opt_log_format, NULL, "text or json (text)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: sandboxd [flags]\n\nflags (--name value or --name=value):\n");
    for (size_t i = 0; i < SBX_ARRAY_SIZE(options); i++)
        fprintf(f, "  --%-22s %s\n", options[i].name, options[i].help);
    fprintf(f, "  --%-22s %s\n  --%-22s %s\n", "version", "print the version", "help",
            "print this help");
}

/* Returns 0 to run, 1 to exit successfully (--version, --help), -1 on bad usage. */
static int parse_args(int argc, char **argv)
{
    struct option longopts[SBX_ARRAY_SIZE(options) + 3];
    int c, idx;

    for (size_t i = 0; i < SBX_ARRAY_SIZE(options); i++)
        longopts[i] = (struct option){options[i].name, required_argument, NULL, (int)i};
    longopts[SBX_ARRAY_SIZE(options)] = (struct option){"version", no_argument, NULL, 'V'};
    longopts[SBX_ARRAY_SIZE(options) + 1] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[SBX_ARRAY_SIZE(options) + 2] = (struct option){0};
    while ((c = getopt_long_only(argc, argv, "", longopts, &idx)) != -1) {
        if (c == 'V') {
            printf("sandboxd %s\n", SANDBOXD_VERSION);
            return 1;
        }
        if (c == 'h') {
            usage(stdout);
            return 1;
        }
        if (c < 0 || (size_t)c >= SBX_ARRAY_SIZE(options)) {
            usage(stderr);
            return -1;
        }
        if (options[c].parse(optarg, options[c].dst) < 0) {
            fprintf(stderr, "sandboxd: invalid value \"%s\" for --%s\n", optarg, options[c].name);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sandboxd: unexpected argument \"%s\"\n", argv[optind]);
        return -1;
    }
    return 0;
}

static void stop_loop(void *arg)
{
    (void)arg;
    sbx_loop_stop(d.loop);
}

/* Every call has finished: posted from a completion-queue thread. */
static void grpc_shut_down(void *arg)
{
    (void)arg;
    (void)sbx_loop_post(d.loop, stop_loop, NULL);
}

/* No process is left: the only calls that may remain are health watches; end them. */
static void procs_empty(void *arg)
{
    (void)arg;
    if (d.draining && !d.idle && sbx_proctab_busy(d.procs) == 0) {
        d.idle = true;
        log_info("all processes have exited");
        sbx_timer_arm(&d.kill_timer, 0);
        sbx_health_end_watches(d.health);
    }
}

static void kill_expired(struct sbx_timer *t)
{
    (void)t;
    int n = sbx_proctab_signal_all(d.procs, SIGKILL);
    if (n > 0)
        log_warn(0, "killed %d process groups still running after the termination grace", n);
}

static void deadline_expired(struct sbx_timer *t)
{
    (void)t;
    log_warn(0, "shutdown timeout reached: cancelling the calls still running");
    sbx_grpc_cancel_all(d.grpc);
}

static void begin_drain(int sig)
{
    uint64_t grace = arg_termination_grace_ms;
    int n;

    if (d.draining)
        return;
    d.draining = true;
    log_info("received %s: draining", strsignal(sig));
    __atomic_store_n(&d.process.draining, true, __ATOMIC_RELEASE);
    sbx_health_set_serving(d.health, false);
    if (d.http)
        sbx_http_set_draining(d.http);
    n = sbx_proctab_signal_all(d.procs, SIGTERM);
    if (n > 0)
        log_info("sent SIGTERM to %d process groups", n);
    if (grace >= arg_shutdown_timeout_ms)
        grace = arg_shutdown_timeout_ms * 3 / 4;
    sbx_timer_arm(&d.kill_timer, grace ? grace : 1);
    sbx_timer_arm(&d.deadline_timer, arg_shutdown_timeout_ms ? arg_shutdown_timeout_ms : 1);
    sbx_grpc_shutdown(d.grpc, grpc_shut_down, NULL);
    procs_empty(NULL);
}

static void on_signal(struct sbx_watch *w, uint32_t events)
{
    struct signalfd_siginfo si;

    (void)events;
    while (read(w->fd, &si, sizeof(si)) == sizeof(si)) {
        switch (si.ssi_signo) {
        case SIGCHLD:
            sbx_proctab_reap(d.procs);
            if (d.draining)
                procs_empty(NULL);
            break;
        case SIGTERM:
        case SIGINT:
            begin_drain((int)si.ssi_signo);
            break;
        default:
            log_debug("ignoring signal %d", si.ssi_signo);
            break;
        }
    }
}

/* Blocks the signals we read from a signalfd, before any thread exists. */
static int setup_signals(struct sbx_error *err)
{
    sigset_t set;

    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
        return sbx_error_set(err, errno, "sigprocmask");
    signal(SIGPIPE, SIG_IGN);
    d.signals.fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (d.signals.fd < 0)
        return sbx_error_set(err, errno, "signalfd");
    d.signals.fn = on_signal;
    return 0;
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
    return !d.draining && sbx_spawn_probe() == 0;
}

static int start_http(const struct sbx_root *root, struct sbx_error *err)
{
    struct sbx_http_opts o = {
        .host = arg_listen_host,
        .port = (int)arg_rest_port,
        .idle_timeout_s = (unsigned)((arg_http_idle_timeout_ms + 999) / 1000),
        .threads = (unsigned)arg_http_threads,
        .max_connections = (unsigned)arg_http_max_connections,
        .max_upload_bytes = (uint64_t)arg_max_upload_bytes,
        .root = root,
        .metadata_prefix = arg_metadata_env_prefix,
        .ready = ready,
        .alive = loop_alive,
        .auth = d.auth,
        .metrics_open = !arg_metrics_auth,
    };
    int port = sbx_http_start(&d.http, &o, err);

    if (port < 0)
        return port;
    log_info("rest listening on %s port %d", arg_listen_host, port);
    return 0;
}

static int listen_all(struct sbx_error *err)
{
    char addr[512];
    int port;

    if (strchr(arg_listen_host, ':'))
        snprintf(addr, sizeof(addr), "[%s]:%lld", arg_listen_host, arg_grpc_port);
    else
        snprintf(addr, sizeof(addr), "%s:%lld", arg_listen_host, arg_grpc_port);
    port = sbx_grpc_listen(d.grpc, addr, err);
    if (port < 0)
        return port;
    log_info("grpc listening on %s port %d", arg_listen_host, port);
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
    sbx_spawn_set_isolation(d.seccomp.filter ? &d.seccomp : NULL, arg_no_new_privs);
    log_info("auth %s; seccomp %s; no_new_privs %s", d.auth ? "on (bearer token)" : "off",
             arg_seccomp == SBX_SECCOMP_OFF ? "off" : "default", arg_no_new_privs ? "on" : "off");
    return 0;
}

static int setup(struct sbx_root *root, struct sbx_reflection **refl, struct sbx_error *err)
{
    struct sbx_proctab_opts po = {.chunk_size = (size_t)arg_stream_chunk_size,
                                  .exit_drain_ms = arg_exit_drain_timeout_ms,
                                  .max_procs = (size_t)arg_max_processes,
                                  .on_empty = procs_empty};
    struct sbx_grpc_opts go = {.max_recv_bytes = (int)arg_max_message_bytes,
                               .max_streams = 4096,
                               .threads = (int)arg_grpc_threads,
                               .auth = d.auth};
    int r;

    if ((r = sbx_root_open(root, arg_root_dir, err)) < 0 || (r = sbx_loop_new(&d.loop, err)) < 0 ||
        (r = sbx_loop_add(d.loop, &d.signals, EPOLLIN, err)) < 0 ||
        (r = sbx_timer_init(&d.kill_timer, d.loop, kill_expired, err)) < 0 ||
        (r = sbx_timer_init(&d.deadline_timer, d.loop, deadline_expired, err)) < 0 ||
        (r = sbx_proctab_new(&d.procs, d.loop, &po, err)) < 0 ||
        (r = sbx_health_new(&d.health, err)) < 0 ||
        (r = sbx_reflection_new(refl, sbx_descriptor_set,
                                (size_t)(sbx_descriptor_set_end - sbx_descriptor_set), err)) < 0)
        return r;
    d.process.procs = d.procs;
    d.process.root = root;
    d.process.max_output = (size_t)arg_max_output_bytes;
    grpc_init();
    if ((r = sbx_grpc_new(&d.grpc, &go, err)) < 0 ||
        (r = sbx_grpc_process_register(d.grpc, &d.process, err)) < 0 ||
        (r = sbx_grpc_health_register(d.grpc, d.health, err)) < 0 ||
        (r = sbx_grpc_reflection_register(d.grpc, *refl, err)) < 0 || (r = listen_all(err)) < 0 ||
        (r = sbx_grpc_start(d.grpc, err)) < 0 || (r = start_http(root, err)) < 0)
        return r;
    return 0;
}

int main(int argc, char **argv)
{
    struct sbx_root root = {.fd = -1};
    struct sbx_reflection *refl = NULL;
    struct sbx_error err = {0};
    int r;

    d.signals.fd = -1;
    ensure_stdio();
    r = parse_args(argc, argv);
    if (r != 0)
        return r > 0 ? EXIT_SUCCESS : 2;
    r = setup_signals(&err);
    if (r == 0 && getpid() != 1)
        (void)prctl(PR_SET_CHILD_SUBREAPER, 1);
    if (r == 0)
        r = setup_security(&err);
    if (r == 0)
        r = setup(&root, &refl, &err);
    if (r == 0) {
        log_info("sandboxd %s ready (root %s, pid %d)", SANDBOXD_VERSION, root.path, getpid());
        r = sbx_loop_run(d.loop, &err);
    }
    if (r < 0)
        log_error(err.code, "%s", err.msg);
    sbx_http_stop(d.http);
    if (d.grpc) {
        sbx_grpc_shutdown(d.grpc, grpc_shut_down, NULL);
        sbx_grpc_cancel_all(d.grpc);
        sbx_grpc_free(d.grpc);
        grpc_shutdown();
    }
    log_info("sandboxd stopped");
    sbx_timer_release(&d.kill_timer);
    sbx_timer_release(&d.deadline_timer);
    sbx_reflection_free(refl);
    sbx_health_free(d.health);
    sbx_proctab_free(d.procs);
    sbx_closep(&d.signals.fd);
    sbx_loop_free(d.loop);
    sbx_root_release(&root);
    sbx_auth_free(d.auth);
    sbx_seccomp_release(&d.seccomp);
    return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
