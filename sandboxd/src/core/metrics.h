/* Counters for the Prometheus endpoint: plain atomics, bumped by the core and the adapters,
 * rendered as text by sbx_metrics_render. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum sbx_metric_kind {
    SBX_METRIC_GRPC = 0,
    SBX_METRIC_HTTP = 1,
};

/* Counts a finished gRPC call (status code 0..16) or HTTP request (status 100..599). */
void sbx_metrics_request(enum sbx_metric_kind kind, int code);
void sbx_metrics_bytes_in(uint64_t n);
void sbx_metrics_bytes_out(uint64_t n);
/* A process started, after spawn_ns nanoseconds of spawning; one exited. */
void sbx_metrics_process_started(uint64_t spawn_ns);
void sbx_metrics_process_exited(void);
/* A call that captures output (Execute) dropped these many bytes of each stream past its cap
 * or the output budget; counted when either is not zero. */
void sbx_metrics_output_truncated(uint64_t stdout_bytes, uint64_t stderr_bytes);

/* Why a connection was closed before its client was done with it (the HTTP gate's limits). */
enum sbx_metric_conn {
    SBX_CONN_HEAD_TIMEOUT, /* its first request head did not come in time */
    SBX_CONN_PEER_LIMIT,   /* half-open, closed for a newer one from its address */
    SBX_CONN_HELD_LIMIT,   /* half-open, closed for a newer one at the limit of such */
    SBX_CONN_IDLE,         /* idle, closed for a newcomer at the connection limit */
    SBX_CONN_REASONS,
};
void sbx_metrics_connection_closed(enum sbx_metric_conn why);

/* A WebSocket attached to a terminal (opened), or gone (closed). */
void sbx_metrics_terminal(bool opened);

/* Directory watches: open (kept ones included) and the directories they watch, events logged,
 * overflows told to readers (kernel: inotify's queue overflowed; else a reader fell behind). */
void sbx_metrics_fswatch_active(int delta);
void sbx_metrics_fswatch_dirs(long delta);
void sbx_metrics_fswatch_events(uint64_t n);
void sbx_metrics_fswatch_overflow(bool kernel);

/* The output budget whose use and refusals are rendered (NULL: none). */
struct sbx_budget;
void sbx_metrics_watch_output(const struct sbx_budget *b);

/* Renders every metric in the Prometheus text format into a malloc'ed string. */
char *sbx_metrics_render(size_t *len);
