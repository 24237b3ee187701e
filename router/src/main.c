/* sandboxd-router: reaches sandboxes by name from outside the cluster. Today: the gRPC relay
 * (every call routed by its x-sandbox-* metadata to the sandbox's sandboxd, over one pooled
 * HTTP/2 connection per sandbox). Parses flags, starts the relay, waits for SIGTERM, drains. */
#define _GNU_SOURCE
#include <grpc/grpc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flags.h"
#include "log.h"
#include "parse.h"
#include "relay.h"

static const char *arg_http_bind_address = ":8080";
static const char *arg_cluster_domain = "cluster.local";
static bool arg_allow_loopback_pod_ip;
static uint64_t arg_shutdown_timeout_ms = 30000;
static long long arg_max_message_bytes = 64 << 20;
static long long arg_threads = 4;
static long long arg_max_upstreams = 4096;

static int opt_count(const char *v, void *dst)
{
    return sbx_parse_int(v, 1, 1LL << 40, dst);
}

static const struct sbx_flag flag_table[] = {
    {"http-bind-address", sbx_flag_string, &arg_http_bind_address,
     "address the router serves on, \"host:port\" or \":port\" (:8080)"},
    {"cluster-domain", sbx_flag_string, &arg_cluster_domain,
     "the cluster's DNS domain, for <id>.<namespace>.svc.<domain> (cluster.local)"},
    {"allow-loopback-pod-ip", NULL, &arg_allow_loopback_pod_ip,
     "accept a loopback X-Sandbox-Pod-IP (tests, a router beside its sandbox)"},
    {"shutdown-timeout", sbx_flag_duration, &arg_shutdown_timeout_ms,
     "on SIGTERM: calls in flight get this long, then are cancelled (30s)"},
    {"grpc-max-message-bytes", opt_count, &arg_max_message_bytes,
     "largest gRPC message relayed either way (67108864)"},
    {"grpc-threads", opt_count, &arg_threads, "gRPC completion-queue threads (4)"},
    {"max-upstreams", opt_count, &arg_max_upstreams,
     "upstream connections pooled at once; the least recently used closes beyond (4096)"},
    {"log-level", sbx_flag_log_level, NULL, "error, warn, info or debug (info)"},
    {"log-format", sbx_flag_log_format, NULL, "text or json (text)"},
};

/* ":8080" listens on every address of both families. */
static void grpc_address(char *buf, size_t size)
{
    if (arg_http_bind_address[0] == ':')
        snprintf(buf, size, "[::]%s", arg_http_bind_address);
    else
        snprintf(buf, size, "%s", arg_http_bind_address);
}

int main(int argc, char **argv)
{
    struct sbx_flags f = {.flag = flag_table,
                          .n = sizeof(flag_table) / sizeof(flag_table[0]),
                          .prog = "sandboxd-router",
                          .version = SANDBOXD_VERSION,
                          .synopsis = "usage: sandboxd-router [flags]\n"
                                      "Reaches sandboxes by name: gRPC routed by x-sandbox-* "
                                      "metadata.\n"};
    struct sbx_relay_opts o = {
        .threads = (int)arg_threads, .default_port = 9090, .target = {.cluster_domain = NULL}};
    struct sbx_relay *relay = NULL;
    struct sbx_error err = {0};
    char addr[256];
    sigset_t set;
    int rest, port, sig;
    bool dashdash;

    switch (sbx_flags_parse(&f, argc, argv, &rest, &dashdash)) {
    case 1:
        return 0;
    case -1:
        return 2;
    }
    if (rest < argc) {
        fprintf(stderr, "sandboxd-router: unexpected argument '%s'\n", argv[rest]);
        return 2;
    }
    o.threads = (int)arg_threads;
    o.max_message_bytes =
        (int)(arg_max_message_bytes > 0x7fffffff ? 0x7fffffff : arg_max_message_bytes);
    o.max_upstreams = (unsigned)arg_max_upstreams;
    o.target.allow_loopback_pod_ip = arg_allow_loopback_pod_ip;
    o.target.cluster_domain = arg_cluster_domain;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* before any thread starts: they inherit it */
    grpc_init();
    grpc_address(addr, sizeof(addr));
    if (sbx_relay_new(&relay, &o, &err) < 0 || (port = sbx_relay_listen(relay, addr, &err)) < 0 ||
        sbx_relay_start(relay, &err) < 0) {
        log_error(0, "%s", err.msg);
        sbx_relay_free(relay, 0);
        grpc_shutdown();
        return 1;
    }
    log_info("sandboxd-router %s listening on %s (port %d)", SANDBOXD_VERSION, addr, port);
    sigwait(&set, &sig);
    log_info("%s: draining (up to %llu ms)", strsignal(sig),
             (unsigned long long)arg_shutdown_timeout_ms);
    sbx_relay_free(relay, arg_shutdown_timeout_ms);
    grpc_shutdown();
    log_info("sandboxd-router stopped");
    return 0;
}
