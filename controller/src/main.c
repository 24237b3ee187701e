/* sandboxd-controller: parses flags, finds the API server, starts the controller, waits for a
 * signal. */
#include <curl/curl.h>
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "cleanup.h"
#include "controller.h"
#include "flags.h"
#include "http_status.h"
#include "leader.h"
#include "kube.h"
#include "kubeconfig.h"
#include "log.h"
#include "object.h"
#include "parse.h"
#include "reconcilers.h"

#ifndef SANDBOXD_VERSION
#define SANDBOXD_VERSION "dev"
#endif

static const char *arg_kubeconfig;
static const char *arg_context;
static const char *arg_namespace;
static const char *arg_service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
static const char *arg_cluster_domain = "cluster.local";
static const char *arg_metrics_bind_address = ":8080";
static const char *arg_default_runtime_class;
static const char *arg_sandboxd_image = "ghcr.io/sandboxd/sandboxd-injector:latest";
static const char *arg_sandboxd_probe = "http";
static long long arg_grpc_port = 9090;
static long long arg_rest_port = 8080;
static long long arg_workers = 8;
static long long arg_claim_workers = 8;
static long long arg_kube_api_burst = 100;
static long long arg_api_connections = 8;
static double arg_kube_api_qps = 50;
static double arg_refill_rate = 0;
static bool arg_leader_elect = true;
static const char *arg_leader_election_namespace;
static const char *arg_leader_election_id = "sandboxd-controller";
static long long arg_pool_batch = 300;
static uint64_t arg_pool_grace_ms = 5 * 60 * 1000;
static uint64_t arg_pool_recheck_ms = 60 * 1000;
static uint64_t arg_kube_api_timeout_ms = 30000;
static uint64_t arg_write_behind_ms = 0;
static uint64_t arg_replenish_delay_ms = 0;
static bool arg_image_lookup = true;
static const char *arg_insecure_registries;
static const char *arg_registry_mirrors;
static const char *arg_registry_ca_file;
static uint64_t arg_registry_timeout_ms = 10000;
static uint64_t arg_image_cache_ttl_ms = 60000;
static long long arg_image_cache_size = 512;
static long long arg_image_lookup_threads = 4;

static int opt_port(const char *v, void *dst)
{
    return sbx_parse_int(v, 1, 65535, dst);
}

static int opt_count(const char *v, void *dst)
{
    return sbx_parse_int(v, 1, 4096, dst);
}

static int opt_qps(const char *v, void *dst)
{
    char *end;
    double q;

    errno = 0;
    q = strtod(v, &end);
    if (errno || *end || end == v || q > 1e6)
        return -EINVAL;
    *(double *)dst = q;
    return 0;
}

static int opt_probe(const char *v, void *dst)
{
    if (strcmp(v, "http") != 0 && strcmp(v, "grpc") != 0)
        return -EINVAL;
    *(const char **)dst = v;
    return 0;
}

static const struct sbx_flag options[] = {
    {"kubeconfig", sbx_flag_string, &arg_kubeconfig,
     "kubeconfig file (else $KUBECONFIG, else the in-cluster service account)"},
    {"context", sbx_flag_string, &arg_context, "kubeconfig context (its current one)"},
    {"namespace", sbx_flag_string, &arg_namespace, "watch only this namespace (all)"},
    {"service-account-dir", sbx_flag_string, &arg_service_account_dir,
     "in-cluster token, ca.crt and namespace (/var/run/secrets/kubernetes.io/serviceaccount)"},
    {"kube-api-qps", opt_qps, &arg_kube_api_qps,
     "client-side requests per second, <= 0 for no limit (50)"},
    {"kube-api-burst", opt_count, &arg_kube_api_burst, "client-side burst (100)"},
    {"api-connections", opt_count, &arg_api_connections,
     "connections to the API server that non-watch requests share, one request in flight on "
     "each; every watch has one of its own besides (8)"},
    {"kube-api-timeout", sbx_flag_duration, &arg_kube_api_timeout_ms,
     "timeout of one non-watch request (30s)"},
    {"sandbox-concurrent-workers", opt_count, &arg_workers,
     "Sandbox and warm-pool reconcile workers (8)"},
    {"metrics-bind-address", sbx_flag_string, &arg_metrics_bind_address,
     "address of /metrics, /healthz and /readyz (:8080); port 0 picks a free one"},
    {"sandbox-warm-pool-max-refill-rate", opt_qps, &arg_refill_rate,
     "warm-pool sandboxes created per second, all pools together; <= 0 for no limit (0)"},
    {"sandbox-warm-pool-max-batch-size", opt_count, &arg_pool_batch,
     "most sandboxes a pool creates in one slow-start round (300)"},
    {"leader-elect", sbx_flag_bool, &arg_leader_elect,
     "run only while holding a coordination.k8s.io Lease (true)"},
    {"leader-election-namespace", sbx_flag_string, &arg_leader_election_namespace,
     "namespace of the Lease (the service account's, else sandboxd-system)"},
    {"leader-election-id", sbx_flag_string, &arg_leader_election_id,
     "name of the Lease (sandboxd-controller)"},
    {"sandbox-warm-pool-readiness-grace-period", sbx_flag_duration, &arg_pool_grace_ms,
     "a warm-pool sandbox not Ready for this long is replaced, unless unschedulable (5m)"},
    {"sandbox-warm-pool-unschedulable-recheck-interval", sbx_flag_duration, &arg_pool_recheck_ms,
     "how often a pool holding unschedulable sandboxes looks again (1m)"},
    {"sandbox-warm-pool-replenish-delay", sbx_flag_duration, &arg_replenish_delay_ms,
     "a pool refills this long after a claim last took one of its sandboxes, so a burst of "
     "claims has the API server first (0: at once)"},
    {"sandbox-write-behind-window", sbx_flag_duration, &arg_write_behind_ms,
     "a Sandbox status change that keeps its Ready condition (node, IPs, message of a Pod not "
     "Ready yet) waits this long, so one write carries the changes of the window; Ready "
     "transitions are written at once (0: no waiting)"},
    {"sandbox-claim-concurrent-workers", opt_count, &arg_claim_workers,
     "SandboxClaim reconcile workers, on a queue of their own (8)"},
    {"cluster-domain", sbx_flag_string, &arg_cluster_domain, "cluster domain of service FQDNs"},
    {"default-runtime-class", sbx_flag_string, &arg_default_runtime_class,
     "runtimeClassName of pods whose template names none (none)"},
    {"sandboxd-image", sbx_flag_string, &arg_sandboxd_image,
     "injector image; its entrypoint copies sandboxd to the path given as its argument"},
    {"sandboxd-probe", opt_probe, &arg_sandboxd_probe,
     "readiness and liveness probes: http (/readyz, /healthz) or grpc (http)"},
    {"sandboxd-grpc-port", opt_port, &arg_grpc_port, "sandboxd's gRPC port (9090)"},
    {"sandboxd-rest-port", opt_port, &arg_rest_port, "sandboxd's REST port (8080)"},
    {"image-entrypoint-lookup", sbx_flag_bool, &arg_image_lookup,
     "a main container without a command runs its image's entrypoint and cmd, looked up in the "
     "image's registry with the pod's and its service account's pull secrets; the Sandbox is "
     "not Ready until then (true)"},
    {"insecure-registries", sbx_flag_string, &arg_insecure_registries,
     "comma-separated registry and mirror hosts (host[:port]) looked up over plain HTTP (none)"},
    {"registry-mirror", sbx_flag_string, &arg_registry_mirrors,
     "comma-separated REGISTRY=MIRROR, MIRROR being host[:port][/path-prefix]: an image of "
     "REGISTRY (docker.io for a name without a host) is looked up at its mirrors in the order "
     "given, repository R as <path-prefix>/R, then at REGISTRY itself when every mirror failed "
     "(lacks it, unreachable, refused); credentials from pull secrets for the mirror's host; "
     "e.g. docker.io=harbor.example/dockerhub (none)"},
    {"registry-ca-file", sbx_flag_string, &arg_registry_ca_file,
     "CA bundle for registries' HTTPS (the system's)"},
    {"registry-timeout", sbx_flag_duration, &arg_registry_timeout_ms,
     "timeout of one request to a registry (10s)"},
    {"image-cache-ttl", sbx_flag_duration, &arg_image_cache_ttl_ms,
     "how long what a tag resolved to is reused; configs are cached by digest (1m)"},
    {"image-cache-size", opt_count, &arg_image_cache_size,
     "entries of each image cache: configs by digest, references (512)"},
    {"image-lookup-threads", opt_count, &arg_image_lookup_threads,
     "image lookups at once, off the reconcile workers (4)"},
    {"log-level", sbx_flag_log_level, NULL, "error, warn, info or debug (info)"},
    {"log-format", sbx_flag_log_format, NULL, "text or json (text)"},
};

static const struct sbx_flags flags = {
    .flag = options,
    .n = SBX_ARRAY_SIZE(options),
    .prog = "sandboxd-controller",
    .version = SANDBOXD_VERSION,
    .synopsis = "usage: sandboxd-controller [flags]\n",
};

/* --registry-mirror, parsed (the registry client copies it). */
static struct sbx_mirrors registry_mirrors;

/* Returns 0 to run, 1 to exit successfully (--version, --help), -1 on bad usage. */
static int parse_args(int argc, char **argv)
{
    struct sbx_error err = {0};
    bool dashdash;
    int rest, r = sbx_flags_parse(&flags, argc, argv, &rest, &dashdash);

    if (r == 0 && rest < argc) {
        fprintf(stderr, "sandboxd-controller: unexpected argument \"%s\"\n", argv[rest]);
        return -1;
    }
    /* Checked with --help too: a chart's flags can be tried that way. */
    if (r >= 0 && sbx_mirrors_parse(arg_registry_mirrors, &registry_mirrors, &err) < 0) {
        fprintf(stderr, "sandboxd-controller: --registry-mirror: %s\n", err.msg);
        return -1;
    }
    return r;
}

static int load_config(struct sbx_kube_config *cfg, struct sbx_error *err)
{
    const char *path = arg_kubeconfig ? arg_kubeconfig : getenv("KUBECONFIG");

    if (path && *path)
        return sbx_kube_config_load(path, arg_context, cfg, err);
    return sbx_kube_config_in_cluster(arg_service_account_dir, cfg, err);
}

/* Waits until the leader state reaches `until` (1: leading; -1: lost), returning it, or until
 * SIGTERM or SIGINT (blocked with SIGHUP before any thread started), returning -signal. Without
 * leader election, we lead from the start and never lose. */
static int wait_for(const sigset_t *set, struct sbx_leader *leader, int until)
{
    struct timespec tick = {.tv_sec = 0, .tv_nsec = 200 * 1000 * 1000};

    for (;;) {
        int state = leader ? sbx_leader_state(leader) : 1;
        if (state == until || state < 0)
            return state;
        int sig = sigtimedwait(set, NULL, &tick);
        if (sig == SIGTERM || sig == SIGINT)
            return -sig;
        if (sig == SIGHUP)
            log_info("ignoring SIGHUP");
    }
}

/* Makes the controller, registers the kinds it reconciles (reconcilers.h) and starts it. On
 * failure *ret, once made, is the caller's to free. */
static int start_controller(struct sbx_kube *kube, const struct sbx_ctrl_opts *opts,
                            struct sbx_ctrl **ret, struct sbx_error *err)
{
    static const struct sbx_reconciler *const kinds[] = {
        &sbx_sandbox_reconciler, &sbx_pool_reconciler, &sbx_claim_reconciler,
        &sbx_template_reconciler};
    int r;

    if ((r = sbx_ctrl_new(kube, opts, ret, err)) < 0)
        return r;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(kinds); i++)
        if ((r = sbx_ctrl_register(*ret, kinds[i], err)) < 0)
            return r;
    return sbx_ctrl_start(*ret, err);
}

static int start_leader(struct sbx_kube *kube, struct sbx_leader **ret, struct sbx_error *err)
{
    char host[256] = "", id[300], suffix[9];
    const char *ns = arg_leader_election_namespace;

    if (!arg_leader_elect)
        return 0;
    if (!ns)
        ns = sbx_kube_namespace(kube) ? sbx_kube_namespace(kube) : "sandboxd-system";
    gethostname(host, sizeof(host) - 1);
    sbx_random_suffix(suffix, 8);
    snprintf(id, sizeof(id), "%s_%s", host, suffix);
    struct sbx_leader_opts o = {.namespace = ns, .name = arg_leader_election_id, .identity = id};
    return sbx_leader_start(kube, &o, ret, err);
}

int main(int argc, char **argv)
{
    struct sbx_kube_config cfg = {0};
    struct sbx_kube *kube = NULL;
    struct sbx_ctrl *ctrl = NULL;
    struct sbx_status_server *status = NULL;
    struct sbx_leader *leader = NULL;
    struct sbx_error err = {0};
    sigset_t set;
    int r;

    sbx_log_name = "sandboxd-controller";
    r = parse_args(argc, argv);
    if (r != 0)
        return r > 0 ? 0 : 2;
    /* Two malloc arenas, not eight per core: every worker parses JSON, and memory freed in an
     * arena of its own stays with that arena. */
    mallopt(M_ARENA_MAX, 2);
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        log_error(0, "curl_global_init failed");
        return 1;
    }
    struct sbx_kube_opts kopts = {.qps = arg_kube_api_qps,
                                  .burst = (int)arg_kube_api_burst,
                                  .timeout_ms = (long)arg_kube_api_timeout_ms,
                                  .connections = (int)arg_api_connections,
                                  .user_agent = "sandboxd-controller/" SANDBOXD_VERSION};
    struct sbx_ctrl_opts copts = {
        .namespace = arg_namespace,
        .workers = (int)arg_workers,
        .claim_workers = (int)arg_claim_workers,
        .cluster_domain = arg_cluster_domain,
        .pool_refill_rate = arg_refill_rate,
        .pool_batch = (int)arg_pool_batch,
        .pool_grace_ms = arg_pool_grace_ms,
        .pool_recheck_ms = arg_pool_recheck_ms ? arg_pool_recheck_ms : 1000,
        .write_behind_ms = arg_write_behind_ms,
        .replenish_delay_ms = arg_replenish_delay_ms,
        .image_lookup = arg_image_lookup,
        .registry = {.timeout_ms = (long)arg_registry_timeout_ms,
                     .manifest_max = 4 << 20,
                     .config_max = 8 << 20,
                     .tag_ttl_ms = arg_image_cache_ttl_ms,
                     .cache_max = (size_t)arg_image_cache_size,
                     .insecure = arg_insecure_registries,
                     .ca_file = arg_registry_ca_file,
                     .mirrors = &registry_mirrors,
                     .user_agent = "sandboxd-controller/" SANDBOXD_VERSION},
        .lookup_threads = (int)arg_image_lookup_threads,
        .inject = {.image = arg_sandboxd_image,
                   .runtime_class = arg_default_runtime_class,
                   .probe = strcmp(arg_sandboxd_probe, "grpc") ? SBX_PROBE_HTTP : SBX_PROBE_GRPC,
                   .grpc_port = (int)arg_grpc_port,
                   .rest_port = (int)arg_rest_port},
    };
    if (load_config(&cfg, &err) < 0 || sbx_kube_new(&cfg, &kopts, &kube, &err) < 0 ||
        sbx_status_server_start(arg_metrics_bind_address, kube, &status, &err) < 0 ||
        start_leader(kube, &leader, &err) < 0) {
        log_error(err.code, "%s", err.msg);
        r = 1;
        goto out;
    }
    log_info("sandboxd-controller %s up (namespace %s, %lld workers, qps %g burst %lld, "
             "%lld API connections, metrics on port %d)",
             SANDBOXD_VERSION, arg_namespace ? arg_namespace : "all", arg_workers, arg_kube_api_qps,
             arg_kube_api_burst, arg_api_connections, sbx_status_server_port(status));
    /* A standby waits for the lease; a signal ends the wait. */
    r = wait_for(&set, leader, 1);
    if (r > 0) {
        if (start_controller(kube, &copts, &ctrl, &err) < 0) {
            log_error(err.code, "%s", err.msg);
            r = 1;
            goto out;
        }
        sbx_status_server_set_ctrl(status, ctrl);
        log_info("reconciling");
        r = wait_for(&set, leader, -1);
    }
    if (r < 0)
        log_info("received %s: stopping", strsignal(-r));
    else
        log_error(0, "leadership lost: exiting");
    r = r < 0 ? 0 : 1;
out:
    if (status)
        sbx_status_server_set_ctrl(status, NULL);
    sbx_ctrl_free(ctrl);
    sbx_leader_free(leader); /* after the workers: hands the lease back */
    sbx_status_server_stop(status);
    sbx_kube_config_release(&cfg);
    sbx_kube_free(kube);
    curl_global_cleanup();
    return r;
}
