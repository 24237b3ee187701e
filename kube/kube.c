#include "kube.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bucket.h"
#include "cleanup.h"
#include "log.h"

#define MAX_BODY        (64u << 20)
#define MAX_TOKEN       (64u << 10)
#define TOKEN_REREAD_NS (60ull * 1000000000u)

struct sbx_kube {
    struct sbx_kube_config cfg;
    struct sbx_bucket bucket;
    long timeout_ms;
    char *user_agent;
    pthread_mutex_t token_mu;
    char *token; /* current bearer token (from cfg.token or cfg.token_file) */
    uint64_t token_read_ns;
    /* Non-watch requests take one of `nconns` easy handles, each keeping one connection
     * alive: at most nconns requests in flight, on at most nconns connections. */
    pthread_mutex_t conn_mu;
    pthread_cond_t conn_cond;
    pthread_cond_t cancel_cond; /* with conn_mu: requests waiting for their turn */
    atomic_bool cancelled;
    int nconns;
    CURL **conns;
    bool *busy;
    unsigned next; /* where the search for a free handle starts: spreads the load */
    atomic_uint_least64_t requests, writes, throttled, errors, opened[2];
    pthread_mutex_t lag_mu;
    json_t *written;   /* resourceVersion of a write of ours -> when it was answered (ns) */
    uint64_t swept_ns; /* last sweep of `written` */
};

SBX_DEFINE_CLEANUP(CURL *, curl_easy_cleanup)
SBX_DEFINE_CLEANUP(struct curl_slist *, curl_slist_free_all)

/* Re-reads the token file when forced or older than a minute. Keeps the old token when the file
 * cannot be read (a rotation in progress). */
static void token_refresh(struct sbx_kube *k, bool force)
{
    char *tok = NULL;
    uint64_t now = sbx_now_ns();

    if (!k->cfg.token_file)
        return;
    pthread_mutex_lock(&k->token_mu);
    if (force || !k->token || now - k->token_read_ns > TOKEN_REREAD_NS) {
        if (sbx_read_file(k->cfg.token_file, MAX_TOKEN, &tok, NULL, NULL) == 0) {
            tok[strcspn(tok, "\r\n")] = '\0';
            free(k->token);
            k->token = tok;
        }
        k->token_read_ns = now;
    }
    pthread_mutex_unlock(&k->token_mu);
}

int sbx_kube_new(struct sbx_kube_config *cfg, const struct sbx_kube_opts *opts,
                 struct sbx_kube **ret, struct sbx_error *err)
{
    struct sbx_kube *k = calloc(1, sizeof(*k));

    if (!k)
        return sbx_error_set(err, ENOMEM, "kube client");
    k->cfg = *cfg;
    *cfg = (struct sbx_kube_config){0};
    k->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : 30000;
    k->user_agent = strdup(opts->user_agent ? opts->user_agent : "sandboxd-controller");
    pthread_mutex_init(&k->token_mu, NULL);
    pthread_mutex_init(&k->conn_mu, NULL);
    pthread_cond_init(&k->conn_cond, NULL);
    pthread_cond_init(&k->cancel_cond, NULL);
    pthread_mutex_init(&k->lag_mu, NULL);
    sbx_bucket_init(&k->bucket, opts->qps, opts->burst, sbx_now_ns());
    if (k->cfg.token)
        k->token = strdup(k->cfg.token);
    k->nconns = opts->connections > 0 ? opts->connections : 1;
    k->conns = calloc((size_t)k->nconns, sizeof(*k->conns));
    k->busy = calloc((size_t)k->nconns, sizeof(*k->busy));
    k->written = json_object();
    if (!k->conns || !k->busy || !k->written || !k->user_agent) {
        sbx_kube_free(k);
        return sbx_error_set(err, ENOMEM, "kube client");
    }
    token_refresh(k, true);
    if (k->cfg.token_file && !k->token) {
        int r = sbx_error_set(err, EACCES, "cannot read token file '%s'", k->cfg.token_file);
        sbx_kube_free(k);
        return r;
    }
    *ret = k;
    return 0;
}

void sbx_kube_free(struct sbx_kube *k)
{
    if (!k)
        return;
    for (int i = 0; k->conns && i < k->nconns; i++)
        curl_easy_cleanup(k->conns[i]);
    free(k->conns);
    free(k->busy);
    json_decref(k->written);
    pthread_mutex_destroy(&k->lag_mu);
    pthread_cond_destroy(&k->cancel_cond);
    pthread_cond_destroy(&k->conn_cond);
    pthread_mutex_destroy(&k->conn_mu);
    sbx_kube_config_release(&k->cfg);
    sbx_bucket_release(&k->bucket);
    pthread_mutex_destroy(&k->token_mu);
    free(k->token);
    free(k->user_agent);
    free(k);
}

void sbx_kube_cancel(struct sbx_kube *k, bool on)
{
    pthread_mutex_lock(&k->conn_mu);
    atomic_store(&k->cancelled, on);
    pthread_cond_broadcast(&k->conn_cond);
    pthread_cond_broadcast(&k->cancel_cond);
    pthread_mutex_unlock(&k->conn_mu);
}

const char *sbx_kube_namespace(struct sbx_kube *k)
{
    return k->cfg.namespace;
}

void sbx_kube_stats(struct sbx_kube *k, struct sbx_kube_stats *ret)
{
    ret->requests = atomic_load(&k->requests);
    ret->writes = atomic_load(&k->writes);
    ret->throttled = atomic_load(&k->throttled);
    ret->errors = atomic_load(&k->errors);
    ret->opened_requests = atomic_load(&k->opened[0]);
    ret->opened_watches = atomic_load(&k->opened[1]);
    ret->connections = k->nconns;
}

char *sbx_kube_escape(const char *s, char *buf, size_t size)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;

    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || strchr("-_.~", *p);
        if (o + (plain ? 1 : 3) >= size)
            return NULL;
        if (plain) {
            buf[o++] = (char)*p;
        } else {
            buf[o++] = '%';
            buf[o++] = hex[*p >> 4];
            buf[o++] = hex[*p & 15];
        }
    }
    buf[o] = '\0';
    return buf;
}

/* Sets TLS and the URL on h. */
static int setup_handle(struct sbx_kube *k, CURL *h, const char *path, struct sbx_error *err)
{
    _cleanup_free_ char *url = NULL;
    const struct sbx_kube_config *c = &k->cfg;

    if (asprintf(&url, "%s%s", c->server, path) < 0)
        return sbx_error_set(err, ENOMEM, "url");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, k->user_agent);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https,http");
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    if (c->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (c->ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    if (c->ca_pem) {
        struct curl_blob b = {c->ca_pem, c->ca_pem_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
    }
    if (c->cert_file)
        curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert_file);
    if (c->key_file)
        curl_easy_setopt(h, CURLOPT_SSLKEY, c->key_file);
    if (c->cert_pem) {
        struct curl_blob b = {c->cert_pem, c->cert_pem_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &b);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    }
    if (c->key_pem) {
        struct curl_blob b = {c->key_pem, c->key_pem_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &b);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    }
    return 0;
}

/* Request headers: accept, content type, bearer token. */
static struct curl_slist *headers(struct sbx_kube *k, const char *content_type)
{
    struct curl_slist *l = NULL, *n;
    char ct[128];

    n = curl_slist_append(l, "Accept: application/json");
    if (!n)
        return NULL;
    l = n;
    if (content_type) {
        snprintf(ct, sizeof(ct), "Content-Type: %s", content_type);
        if (!(n = curl_slist_append(l, ct)))
            goto fail;
        l = n;
    }
    pthread_mutex_lock(&k->token_mu);
    if (k->token) {
        _cleanup_free_ char *auth = NULL;
        if (asprintf(&auth, "Authorization: Bearer %s", k->token) < 0)
            auth = NULL;
        n = auth ? curl_slist_append(l, auth) : NULL;
        pthread_mutex_unlock(&k->token_mu);
        if (!n)
            goto fail;
        l = n;
    } else {
        pthread_mutex_unlock(&k->token_mu);
    }
    return l;
fail:
    curl_slist_free_all(l);
    return NULL;
}

struct body_buf {
    char *data;
    size_t len, cap;
    bool too_big;
};

static size_t collect(char *p, size_t size, size_t n, void *arg)
{
    struct body_buf *b = arg;
    size_t len = size * n;

    if (b->len + len > MAX_BODY) {
        b->too_big = true;
        return 0;
    }
    if (b->len + len + 1 > b->cap) {
        size_t cap = (b->len + len + 1) * 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return 0;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, len);
    b->len += len;
    b->data[b->len] = '\0';
    return len;
}

static int curl_fail(CURLcode rc, const char *method, const char *path, struct sbx_error *err)
{
    int e = rc == CURLE_OPERATION_TIMEDOUT    ? ETIMEDOUT
            : rc == CURLE_COULDNT_CONNECT     ? ECONNREFUSED
            : rc == CURLE_OUT_OF_MEMORY       ? ENOMEM
            : rc == CURLE_ABORTED_BY_CALLBACK ? ECANCELED
                                              : EIO;
    return sbx_error_set(err, e, "%s %s: %s", method, path, curl_easy_strerror(rc));
}

static int cancelled(struct sbx_error *err)
{
    return sbx_error_set(err, ECANCELED, "cancelled: the controller is stopping");
}

/* Waits for the request's turn under the client-side QPS limit. */
static int throttle(struct sbx_kube *k, struct sbx_error *err)
{
    uint64_t wait = sbx_bucket_reserve(&k->bucket, sbx_now_ns());

    if (wait) {
        struct timespec until = sbx_deadline_in(wait);
        pthread_mutex_lock(&k->conn_mu);
        while (!atomic_load(&k->cancelled) &&
               pthread_cond_timedwait(&k->cancel_cond, &k->conn_mu, &until) == 0)
            ;
        pthread_mutex_unlock(&k->conn_mu);
    }
    return atomic_load(&k->cancelled) ? cancelled(err) : 0;
}

/* Takes a free handle (its index into *ret), waiting at most the request timeout for one. A
 * handle that has not been used yet is made here. */
static int conn_take(struct sbx_kube *k, int *ret, struct sbx_error *err)
{
    struct timespec until = sbx_deadline_in((uint64_t)k->timeout_ms * 1000000u);
    int r = 0, idx = -1;

    pthread_mutex_lock(&k->conn_mu);
    while (idx < 0 && !atomic_load(&k->cancelled)) {
        for (int i = 0; i < k->nconns && idx < 0; i++) {
            int j = (int)((k->next + (unsigned)i) % (unsigned)k->nconns);
            if (!k->busy[j])
                idx = j;
        }
        if (idx < 0 && (r = pthread_cond_timedwait(&k->conn_cond, &k->conn_mu, &until)) != 0)
            break;
    }
    if (idx >= 0) {
        k->busy[idx] = true;
        k->next = (unsigned)idx + 1;
    }
    pthread_mutex_unlock(&k->conn_mu);
    if (idx < 0 && r == 0)
        return cancelled(err);
    if (idx < 0)
        return sbx_error_set(err, r == ETIMEDOUT ? ETIMEDOUT : r,
                             "no free API connection of %d in %ld ms", k->nconns, k->timeout_ms);
    if (!k->conns[idx] && !(k->conns[idx] = curl_easy_init())) {
        pthread_mutex_lock(&k->conn_mu);
        k->busy[idx] = false;
        pthread_cond_signal(&k->conn_cond);
        pthread_mutex_unlock(&k->conn_mu);
        return sbx_error_set(err, ENOMEM, "curl handle");
    }
    curl_easy_reset(k->conns[idx]); /* keeps its connection */
    *ret = idx;
    return 0;
}

static void conn_give(struct sbx_kube *k, int idx)
{
    pthread_mutex_lock(&k->conn_mu);
    k->busy[idx] = false;
    pthread_cond_signal(&k->conn_cond);
    pthread_mutex_unlock(&k->conn_mu);
}

static void count_connects(struct sbx_kube *k, CURL *h, int kind)
{
    long n = 0;

    if (curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &n) == CURLE_OK && n > 0)
        atomic_fetch_add(&k->opened[kind], (uint64_t)n);
}

#define MAX_WRITTEN    8192
#define WRITTEN_TTL_NS (60ull * 1000000000u)

/* A write of ours was answered with this object: remember its resourceVersion, so that the
 * watch event carrying it tells how long the event took to reach us. Entries no watch claims
 * (objects nobody watches) go after a minute; when the map is full of younger ones, the write
 * is not remembered. */
static void remember_write(struct sbx_kube *k, json_t *obj)
{
    const char *rv =
        json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
    uint64_t now = sbx_now_ns();
    const char *key;
    json_t *v;
    void *tmp;

    if (!rv)
        return;
    pthread_mutex_lock(&k->lag_mu);
    if (json_object_size(k->written) >= MAX_WRITTEN && now - k->swept_ns > 1000000000u) {
        k->swept_ns = now;
        json_object_foreach_safe(k->written, tmp, key, v)
        {
            if (now - (uint64_t)json_integer_value(v) > WRITTEN_TTL_NS)
                json_object_del(k->written, key);
        }
    }
    if (json_object_size(k->written) < MAX_WRITTEN)
        json_object_set_new(k->written, rv, json_integer((json_int_t)now));
    pthread_mutex_unlock(&k->lag_mu);
}

uint64_t sbx_kube_write_seen(struct sbx_kube *k, const char *rv)
{
    uint64_t at = 0, now;

    if (!rv)
        return 0;
    pthread_mutex_lock(&k->lag_mu);
    json_t *v = json_object_get(k->written, rv);
    if (v) {
        at = (uint64_t)json_integer_value(v);
        json_object_del(k->written, rv);
    }
    pthread_mutex_unlock(&k->lag_mu);
    now = sbx_now_ns();
    return at ? (now > at ? now - at : 1) : 0;
}

static int request_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    struct sbx_kube *k = arg;

    (void)dt, (void)dn, (void)ut, (void)un;
    return atomic_load(&k->cancelled) ? 1 : 0;
}

static int request_once(struct sbx_kube *k, const char *method, const char *path,
                        const char *payload, const char *content_type, long *ret_status,
                        json_t **ret_body, struct sbx_error *err)
{
    _cleanup_(curl_slist_free_allp) struct curl_slist *hdr = NULL;
    struct body_buf b = {0};
    bool write = strcmp(method, "GET") != 0;
    CURLcode rc;
    long status = 0;
    json_t *body = NULL;
    int r, idx = -1;

    hdr = headers(k, payload ? (content_type ? content_type : "application/json") : NULL);
    if (!hdr)
        return sbx_error_set(err, ENOMEM, "headers");
    /* The bucket first: a request waiting for its turn holds no connection. */
    if ((r = throttle(k, err)) < 0 || (r = conn_take(k, &idx, err)) < 0)
        return r;
    CURL *h = k->conns[idx];
    if ((r = setup_handle(k, h, path, err)) < 0) {
        conn_give(k, idx);
        return r;
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, k->timeout_ms);
    if (payload) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(payload));
    } else if (!strcmp(method, "GET")) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, request_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, k);
    atomic_fetch_add(&k->requests, 1);
    if (write)
        atomic_fetch_add(&k->writes, 1);
    uint64_t t0 = sbx_now_ns();
    rc = curl_easy_perform(h);
    count_connects(k, h, 0);
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    conn_give(k, idx);
    log_debug("%s %s: %ld in %.1f ms (connection %d)", method, path, status,
              (double)(sbx_now_ns() - t0) / 1e6, idx);
    if (rc != CURLE_OK) {
        atomic_fetch_add(&k->errors, 1);
        free(b.data);
        if (b.too_big)
            return sbx_error_set(err, EMSGSIZE, "%s %s: answer larger than %u bytes", method, path,
                                 MAX_BODY);
        return curl_fail(rc, method, path, err);
    }
    if (status == 429)
        atomic_fetch_add(&k->throttled, 1);
    *ret_status = status;
    if (b.data && (ret_body || (write && status >= 200 && status < 300)))
        body = json_loadb(b.data, b.len, 0, NULL);
    free(b.data);
    if (write && status >= 200 && status < 300)
        remember_write(k, body);
    if (ret_body)
        *ret_body = body;
    else
        json_decref(body);
    return 0;
}

int sbx_kube_request(struct sbx_kube *k, const char *method, const char *path, json_t *body,
                     const char *content_type, long *ret_status, json_t **ret_body,
                     struct sbx_error *err)
{
    _cleanup_free_ char *payload = NULL;
    int r;

    if (ret_body)
        *ret_body = NULL;
    if (body && !(payload = json_dumps(body, JSON_COMPACT)))
        return sbx_error_set(err, ENOMEM, "encode %s %s", method, path);
    token_refresh(k, false);
    r = request_once(k, method, path, payload, content_type, ret_status, ret_body, err);
    if (r == 0 && *ret_status == 401 && k->cfg.token_file) {
        if (ret_body) {
            json_decref(*ret_body);
            *ret_body = NULL;
        }
        token_refresh(k, true);
        r = request_once(k, method, path, payload, content_type, ret_status, ret_body, err);
    }
    return r;
}

struct stream {
    struct sbx_lines lines;
    sbx_kube_line_fn fn;
    void *arg;
    int fn_result;
    const atomic_bool *stop;
};

static size_t stream_write(char *p, size_t size, size_t n, void *arg)
{
    struct stream *s = arg;
    int r = sbx_lines_feed(&s->lines, p, size * n, s->fn, s->arg);

    if (r < 0) {
        s->fn_result = r;
        return 0;
    }
    return size * n;
}

static int stream_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    struct stream *s = arg;

    (void)dt, (void)dn, (void)ut, (void)un;
    return s->stop && atomic_load(s->stop) ? 1 : 0;
}

int sbx_kube_stream(struct sbx_kube *k, const char *path, size_t max_line, sbx_kube_line_fn fn,
                    void *arg, const atomic_bool *stop, long *ret_status, struct sbx_error *err)
{
    _cleanup_(curl_easy_cleanupp) CURL *h = curl_easy_init();
    _cleanup_(curl_slist_free_allp) struct curl_slist *hdr = NULL;
    struct stream s = {.lines.max = max_line, .fn = fn, .arg = arg, .stop = stop};
    CURLcode rc;
    int r;

    if (!h)
        return sbx_error_set(err, ENOMEM, "curl handle");
    if ((r = setup_handle(k, h, path, err)) < 0)
        return r;
    token_refresh(k, false);
    if (!(hdr = headers(k, NULL)))
        return sbx_error_set(err, ENOMEM, "headers");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, stream_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, stream_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &s);
    /* A dead peer: no byte for a minute ends the watch (the server sends bookmarks). */
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 90L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    atomic_fetch_add(&k->requests, 1);
    atomic_fetch_add(&k->opened[1], 1); /* a fresh handle: a connection of its own */
    rc = curl_easy_perform(h);
    /* An error answer is one JSON object, maybe without a newline. */
    if (rc == CURLE_OK && s.fn_result == 0)
        s.fn_result = sbx_lines_finish(&s.lines, fn, arg);
    sbx_lines_release(&s.lines);
    if (s.fn_result < 0)
        return sbx_error_set(err, -s.fn_result, "watch %s", path);
    if (rc != CURLE_OK) {
        atomic_fetch_add(&k->errors, 1);
        return curl_fail(rc, "watch", path, err);
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, ret_status);
    if (*ret_status == 429)
        atomic_fetch_add(&k->throttled, 1);
    return 0;
}
