/* A Kubernetes API client on libcurl: JSON requests with client-side QPS/burst, bearer tokens
 * re-read from a rotating file, and streamed watches on connections of their own.
 *
 * Connections: non-watch requests (lists, reads, writes, the lease) are spread over a fixed set
 * of N connections, one request in flight on each (a request waits for a free one, at most the
 * request timeout); each watch has a connection of its own for as long as it streams. A burst of
 * writes therefore never queues in front of watch events on a shared connection, and the API
 * server sees at most N + (number of watches) connections from us. */
#pragma once

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>

#include "error.h"
#include "kubeconfig.h"
#include "watch.h"

struct sbx_kube;

struct sbx_kube_opts {
    double qps;      /* client-side requests per second; <= 0 for no limit */
    int burst;       /* bucket capacity */
    long timeout_ms; /* whole-request timeout of non-watch requests */
    int connections; /* non-watch requests share this many connections (1 when <= 0) */
    const char *user_agent;
};

/* Takes ownership of cfg's contents (cfg is zeroed). Call curl_global_init first. */
int sbx_kube_new(struct sbx_kube_config *cfg, const struct sbx_kube_opts *opts,
                 struct sbx_kube **ret, struct sbx_error *err);
void sbx_kube_free(struct sbx_kube *k);

/* With on: ends every non-watch request that waits for its turn, for a connection or for its
 * answer, and fails new ones, with -ECANCELED. A stopping controller uses it to get its workers
 * back at once; with off, requests work again (the leader hands its lease back after). */
void sbx_kube_cancel(struct sbx_kube *k, bool on);

/* One request. path starts with "/" and may carry a query. body may be NULL; content_type
 * defaults to application/json. On any HTTP answer returns 0 with *ret_status and, when the body
 * is JSON, *ret_body (a new reference, else NULL). Transport failures return -EIO, -ETIMEDOUT,
 * -ECONNREFUSED, -ECANCELED (sbx_kube_cancel). A 401 is retried once after re-reading a token
 * file. */
int sbx_kube_request(struct sbx_kube *k, const char *method, const char *path, json_t *body,
                     const char *content_type, long *ret_status, json_t **ret_body,
                     struct sbx_error *err);

/* Called for each line of a streamed response; a negative return stops the stream and is
 * returned by sbx_kube_stream. */
typedef sbx_line_fn sbx_kube_line_fn;

/* A long GET (a watch): each newline-terminated line goes to fn. Runs on a connection of its
 * own, outside the QPS limit (watches are long-lived, not bursts). Lines longer than max_line
 * fail with -EMSGSIZE. `stop` is polled about once a second; when it reads true the stream
 * ends with -ECANCELED. Returns 0 when the server ends the stream, with *ret_status. */
int sbx_kube_stream(struct sbx_kube *k, const char *path, size_t max_line, sbx_kube_line_fn fn,
                    void *arg, const atomic_bool *stop, long *ret_status, struct sbx_error *err);

/* Counters by verb class and status, for metrics and tests. */
struct sbx_kube_stats {
    uint64_t requests, writes, throttled /* 429 */, errors /* transport */;
    uint64_t opened_requests, opened_watches; /* connections opened */
    int connections;                          /* the request connections' limit */
};
void sbx_kube_stats(struct sbx_kube *k, struct sbx_kube_stats *ret);

/* A watch delivered an object at resourceVersion rv. When a write of ours was answered with rv
 * (in the last minute), returns the nanoseconds since that answer (at least 1) and forgets it:
 * how long the watch took to bring our own change back. Else 0. */
uint64_t sbx_kube_write_seen(struct sbx_kube *k, const char *rv);

/* The namespace of the in-cluster service account or kubeconfig context, or NULL. */
const char *sbx_kube_namespace(struct sbx_kube *k);

/* Percent-encodes s for a query value into buf; returns buf, or NULL when it does not fit. */
char *sbx_kube_escape(const char *s, char *buf, size_t size);
