#define _GNU_SOURCE
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>

#include "budget.h"
#include "cleanup.h"

#define GRPC_CODES 17
#define HTTP_CODES 600

/* Upper bounds of the spawn latency histogram, in seconds. */
static const double buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1};

static struct {
    uint64_t grpc[GRPC_CODES];
    uint64_t http[HTTP_CODES];
    uint64_t bytes_in, bytes_out;
    uint64_t started, exited;
    uint64_t truncated, dropped[2];
    uint64_t spawn_buckets[SBX_ARRAY_SIZE(buckets)];
    uint64_t spawn_count, spawn_ns_sum;
    uint64_t conn_closed[SBX_CONN_REASONS];
    uint64_t terminals_opened, terminals_closed;
    int64_t watches, watch_dirs;
    uint64_t watch_events, watch_overflows[2];
    const struct sbx_budget *output;
} m;

static const char *const conn_reasons[SBX_CONN_REASONS] = {"head_timeout", "peer_limit",
                                                           "held_limit", "idle"};

static const char *const grpc_names[GRPC_CODES] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

static void add(uint64_t *c, uint64_t n)
{
    __atomic_add_fetch(c, n, __ATOMIC_RELAXED);
}

static uint64_t get(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

void sbx_metrics_connection_closed(enum sbx_metric_conn why)
{
    if (why < SBX_CONN_REASONS)
        add(&m.conn_closed[why], 1);
}

static void render_connections(FILE *f)
{
    fprintf(f, "# HELP sandboxd_http_connections_closed_total HTTP connections closed to keep the "
               "REST port answering: a head too slow, half-open ones over a limit, idle ones for "
               "newcomers.\n"
               "# TYPE sandboxd_http_connections_closed_total counter\n");
    for (size_t i = 0; i < SBX_CONN_REASONS; i++)
        fprintf(f, "sandboxd_http_connections_closed_total{reason=\"%s\"} %llu\n", conn_reasons[i],
                (unsigned long long)get(&m.conn_closed[i]));
}

void sbx_metrics_fswatch_active(int delta)
{
    __atomic_add_fetch(&m.watches, delta, __ATOMIC_RELAXED);
}

void sbx_metrics_fswatch_dirs(long delta)
{
    __atomic_add_fetch(&m.watch_dirs, delta, __ATOMIC_RELAXED);
}

void sbx_metrics_fswatch_events(uint64_t n)
{
    add(&m.watch_events, n);
}

void sbx_metrics_fswatch_overflow(bool kernel)
{
    add(&m.watch_overflows[kernel], 1);
}

static void render_watches(FILE *f)
{
    fprintf(f,
            "# HELP sandboxd_watches Directory watches open (those kept for a resume included).\n"
            "# TYPE sandboxd_watches gauge\n"
            "sandboxd_watches %lld\n"
            "# HELP sandboxd_watch_directories Directories watched through inotify, all watches "
            "together (--max-watch-dirs).\n"
            "# TYPE sandboxd_watch_directories gauge\n"
            "sandboxd_watch_directories %lld\n"
            "# HELP sandboxd_watch_events_total Events logged by directory watches.\n"
            "# TYPE sandboxd_watch_events_total counter\n"
            "sandboxd_watch_events_total %llu\n"
            "# HELP sandboxd_watch_overflows_total Overflows told to watch readers: a reader fell "
            "behind its watch's queue, or the kernel's inotify queue overflowed.\n"
            "# TYPE sandboxd_watch_overflows_total counter\n"
            "sandboxd_watch_overflows_total{reason=\"queue\"} %llu\n"
            "sandboxd_watch_overflows_total{reason=\"kernel\"} %llu\n",
            (long long)__atomic_load_n(&m.watches, __ATOMIC_RELAXED),
            (long long)__atomic_load_n(&m.watch_dirs, __ATOMIC_RELAXED),
            (unsigned long long)get(&m.watch_events),
            (unsigned long long)get(&m.watch_overflows[0]),
            (unsigned long long)get(&m.watch_overflows[1]));
}

void sbx_metrics_request(enum sbx_metric_kind kind, int code)
{
    if (kind == SBX_METRIC_GRPC && code >= 0 && code < GRPC_CODES)
        add(&m.grpc[code], 1);
    else if (kind == SBX_METRIC_HTTP && code >= 100 && code < HTTP_CODES)
        add(&m.http[code], 1);
}

void sbx_metrics_bytes_in(uint64_t n)
{
    add(&m.bytes_in, n);
}

void sbx_metrics_bytes_out(uint64_t n)
{
    add(&m.bytes_out, n);
}

void sbx_metrics_process_started(uint64_t spawn_ns)
{
    add(&m.started, 1);
    add(&m.spawn_count, 1);
    add(&m.spawn_ns_sum, spawn_ns);
    for (size_t i = 0; i < SBX_ARRAY_SIZE(buckets); i++)
        if ((double)spawn_ns / 1e9 <= buckets[i])
            add(&m.spawn_buckets[i], 1);
}

void sbx_metrics_process_exited(void)
{
    add(&m.exited, 1);
}

void sbx_metrics_output_truncated(uint64_t stdout_bytes, uint64_t stderr_bytes)
{
    if (!stdout_bytes && !stderr_bytes)
        return;
    add(&m.truncated, 1);
    add(&m.dropped[0], stdout_bytes);
    add(&m.dropped[1], stderr_bytes);
}

static void render_truncated(FILE *f)
{
    fprintf(f,
            "# HELP sandboxd_execute_truncated_total Execute calls whose captured output was cut "
            "(--max-output-bytes, --max-output-memory).\n"
            "# TYPE sandboxd_execute_truncated_total counter\n"
            "sandboxd_execute_truncated_total %llu\n"
            "# HELP sandboxd_execute_dropped_bytes_total Output bytes Execute dropped, by stream.\n"
            "# TYPE sandboxd_execute_dropped_bytes_total counter\n"
            "sandboxd_execute_dropped_bytes_total{stream=\"stdout\"} %llu\n"
            "sandboxd_execute_dropped_bytes_total{stream=\"stderr\"} %llu\n",
            (unsigned long long)get(&m.truncated), (unsigned long long)get(&m.dropped[0]),
            (unsigned long long)get(&m.dropped[1]));
}

void sbx_metrics_terminal(bool opened)
{
    add(opened ? &m.terminals_opened : &m.terminals_closed, 1);
}

static void render_terminals(FILE *f)
{
    uint64_t opened = get(&m.terminals_opened), closed = get(&m.terminals_closed);

    fprintf(f,
            "# HELP sandboxd_terminal_connections WebSocket connections attached to terminals.\n"
            "# TYPE sandboxd_terminal_connections gauge\n"
            "sandboxd_terminal_connections %llu\n"
            "# HELP sandboxd_terminal_connections_total WebSocket connections attached to "
            "terminals since the start.\n"
            "# TYPE sandboxd_terminal_connections_total counter\n"
            "sandboxd_terminal_connections_total %llu\n",
            (unsigned long long)(opened > closed ? opened - closed : 0),
            (unsigned long long)opened);
}

void sbx_metrics_watch_output(const struct sbx_budget *b)
{
    __atomic_store_n(&m.output, b, __ATOMIC_RELEASE);
}

static void render_output(FILE *f)
{
    const struct sbx_budget *b = __atomic_load_n(&m.output, __ATOMIC_ACQUIRE);

    if (!b)
        return;
    fprintf(f,
            "# HELP sandboxd_output_memory_bytes Process output held in memory (captures, rings).\n"
            "# TYPE sandboxd_output_memory_bytes gauge\n"
            "sandboxd_output_memory_bytes %zu\n"
            "# HELP sandboxd_output_memory_refused_bytes_total Output buffer growth refused for "
            "want of budget (--max-output-memory).\n"
            "# TYPE sandboxd_output_memory_refused_bytes_total counter\n"
            "sandboxd_output_memory_refused_bytes_total %llu\n",
            sbx_budget_used(b), (unsigned long long)sbx_budget_refused(b));
}

char *sbx_metrics_render(size_t *len)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    uint64_t started = get(&m.started), exited = get(&m.exited);

    if (!f)
        return NULL;
    fprintf(f,
            "# HELP sandboxd_processes_started_total Processes started.\n"
            "# TYPE sandboxd_processes_started_total counter\n"
            "sandboxd_processes_started_total %llu\n",
            (unsigned long long)started);
    fprintf(f,
            "# HELP sandboxd_processes_running Processes started and not yet exited.\n"
            "# TYPE sandboxd_processes_running gauge\n"
            "sandboxd_processes_running %llu\n",
            (unsigned long long)(started > exited ? started - exited : 0));
    fprintf(f, "# HELP sandboxd_grpc_requests_total gRPC calls by status code.\n"
               "# TYPE sandboxd_grpc_requests_total counter\n");
    for (int i = 0; i < GRPC_CODES; i++)
        if (get(&m.grpc[i]))
            fprintf(f, "sandboxd_grpc_requests_total{code=\"%s\"} %llu\n", grpc_names[i],
                    (unsigned long long)get(&m.grpc[i]));
    fprintf(f, "# HELP sandboxd_http_requests_total HTTP requests by status code.\n"
               "# TYPE sandboxd_http_requests_total counter\n");
    for (int i = 100; i < HTTP_CODES; i++)
        if (get(&m.http[i]))
            fprintf(f, "sandboxd_http_requests_total{code=\"%d\"} %llu\n", i,
                    (unsigned long long)get(&m.http[i]));
    fprintf(f,
            "# HELP sandboxd_bytes_received_total Payload bytes received (uploads, stdin).\n"
            "# TYPE sandboxd_bytes_received_total counter\n"
            "sandboxd_bytes_received_total %llu\n"
            "# HELP sandboxd_bytes_sent_total Payload bytes sent (downloads, output).\n"
            "# TYPE sandboxd_bytes_sent_total counter\n"
            "sandboxd_bytes_sent_total %llu\n",
            (unsigned long long)get(&m.bytes_in), (unsigned long long)get(&m.bytes_out));
    fprintf(f, "# HELP sandboxd_spawn_duration_seconds Time to spawn a process (clone to exec).\n"
               "# TYPE sandboxd_spawn_duration_seconds histogram\n");
    for (size_t i = 0; i < SBX_ARRAY_SIZE(buckets); i++)
        fprintf(f, "sandboxd_spawn_duration_seconds_bucket{le=\"%g\"} %llu\n", buckets[i],
                (unsigned long long)get(&m.spawn_buckets[i]));
    fprintf(f,
            "sandboxd_spawn_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
            "sandboxd_spawn_duration_seconds_sum %.9f\n"
            "sandboxd_spawn_duration_seconds_count %llu\n",
            (unsigned long long)get(&m.spawn_count), (double)get(&m.spawn_ns_sum) / 1e9,
            (unsigned long long)get(&m.spawn_count));
    render_truncated(f);
    render_output(f);
    render_connections(f);
    render_terminals(f);
    render_watches(f);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    *len = size;
    return buf;
}
