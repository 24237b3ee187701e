/* GET /v1/watch/{path}: a directory watch as Server-Sent Events. One event is formatted at a
 * time, into what libmicrohttpd asks for: a client that does not read holds nothing but the
 * watch's bounded log. With nothing to send the connection is suspended, and resumed by the
 * watch's waiter (an event, the end, or the keepalive period: a comment line then). */
#define _GNU_SOURCE
#include "http_watch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "fswatch.h"
#include "http_args.h"
#include "http_request.h"
#include "metrics.h"
#include "parse.h"
#include "utf8.h"

#define SSE_BLOCK     (16 * 1024)
#define MIN_RESCAN_MS 100

/* One SSE response: referenced by the response (until its free callback) and by the waiter
 * while armed. */
struct sse {
    pthread_mutex_t lock;
    int refs;
    struct MHD_Connection *conn; /* NULL once the response is gone */
    bool suspended;
    struct sbx_fswatch *r; /* NULL once the response is gone */
    struct sbx_fswatch_waiter wt;
    uint64_t keepalive_ms, last_write_ms;
    bool ended; /* the end is formatted: once sent, the stream ends */
    char *text; /* formatted, not yet all handed to libmicrohttpd */
    size_t len, off;
};

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sse_unref(struct sse *s)
{
    if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    free(s->text);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static char *base64(const char *p)
{
    size_t n = strlen(p);
    unsigned char *out = malloc(4 * ((n + 2) / 3) + 1);

    if (out)
        EVP_EncodeBlock(out, (const unsigned char *)p, (int)n);
    return (char *)out;
}

static const char *const kinds[] = {"",       "create", "write",    "chmod",
                                    "remove", "rename", "overflow", "ready"};

/* Sets obj[key] to path (UTF-8; other bytes as U+FFFD) and obj[key_base64] to its bytes when
 * it is not UTF-8. */
static void set_path(json_t *obj, const char *key, const char *path)
{
    char b64key[32];

    if (!path)
        path = "";
    if (sbx_utf8_valid(path)) {
        json_object_set_new(obj, key, json_string(path));
        return;
    }
    {
        _cleanup_free_ char *clean = sbx_utf8_sanitize(path);
        _cleanup_free_ char *b64 = base64(path);
        json_object_set_new(obj, key, json_string(clean ? clean : ""));
        snprintf(b64key, sizeof(b64key), "%s_base64", key);
        if (b64)
            json_object_set_new(obj, b64key, json_string(b64));
    }
}

static json_t *event_json(const struct sbx_fsev *ev)
{
    json_t *j = json_pack("{s:I, s:s}", "seq", (json_int_t)ev->seq, "kind", kinds[ev->kind]);

    if (!j)
        return NULL;
    switch (ev->kind) {
    case SBX_FSEV_OVERFLOW:
        json_object_set_new(j, "from", json_integer((json_int_t)ev->lost_from));
        json_object_set_new(j, "to", json_integer((json_int_t)ev->lost_to));
        json_object_set_new(j, "rescan", json_true());
        json_object_set_new(j, "reason", json_string(ev->reason ? ev->reason : ""));
        break;
    case SBX_FSEV_READY:
        json_object_set_new(j, "watch", json_string(ev->watch_id));
        json_object_set_new(j, "resumed", json_boolean(ev->resumed));
        json_object_set_new(j, "directories", json_integer((json_int_t)ev->dirs));
        break;
    default:
        if (ev->kind == SBX_FSEV_RENAME) {
            set_path(j, "from", ev->from);
            set_path(j, "to", ev->path);
        }
        set_path(j, "path", ev->path);
        json_object_set_new(j, "dir", json_boolean(ev->dir));
        break;
    }
    return j;
}

/* Under lock: formats one SSE event into s->text; false without memory. */
static bool format_event(struct sse *s, const char *id, const char *kind, json_t *data)
{
    _cleanup_free_ char *text = data ? json_dumps(data, JSON_COMPACT) : NULL;
    int n;

    json_decref(data);
    if (!text)
        return false;
    free(s->text);
    s->text = NULL;
    n = id ? asprintf(&s->text, "id: %s\nevent: %s\ndata: %s\n\n", id, kind, text)
           : asprintf(&s->text, "event: %s\ndata: %s\n\n", kind, text);
    if (n < 0) {
        s->text = NULL;
        return false;
    }
    s->len = (size_t)n;
    s->off = 0;
    return true;
}

static const char *error_code(int rc)
{
    switch (-rc) {
    case EBUSY:
        return "ABORTED";
    case EMFILE:
        return "RESOURCE_EXHAUSTED";
    case ENOENT:
        return "NOT_FOUND";
    case ESHUTDOWN:
        return "UNAVAILABLE";
    default:
        return "INTERNAL";
    }
}

/* Under lock: 1 with something to send in s->text (an event, the end, a keepalive), 0 with
 * nothing, -1 without memory. */
static int next_text(struct sse *s)
{
    struct sbx_error e = {0};
    struct sbx_fsev ev;
    char id[24];
    int rc = sbx_fswatch_next(s->r, &ev, &e);

    if (rc == 1) {
        snprintf(id, sizeof(id), "%llu", (unsigned long long)ev.seq);
        rc = format_event(s, id, kinds[ev.kind], event_json(&ev)) ? 1 : -1;
        sbx_fsev_release(&ev);
        return rc;
    }
    if (rc < 0) {
        s->ended = true;
        return format_event(s, NULL, "error",
                            json_pack("{s:s, s:s}", "code", error_code(rc), "message", e.msg))
                   ? 1
                   : -1;
    }
    if (s->keepalive_ms && now_ms() - s->last_write_ms >= s->keepalive_ms) {
        free(s->text);
        s->text = strdup(": keepalive\n\n");
        s->len = s->text ? strlen(s->text) : 0;
        s->off = 0;
        return s->text ? 1 : -1;
    }
    return 0;
}

static void sse_woken(struct sbx_fswatch_waiter *wt)
{
    struct sse *s = (struct sse *)((char *)wt - offsetof(struct sse, wt));

    pthread_mutex_lock(&s->lock);
    if (s->conn && s->suspended) {
        s->suspended = false;
        MHD_resume_connection(s->conn);
    }
    pthread_mutex_unlock(&s->lock);
    sse_unref(s); /* the waiter's */
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct sse *s = cls;
    ssize_t n = 0;
    int more = 1;

    (void)pos;
    pthread_mutex_lock(&s->lock);
    if (s->off == s->len && s->ended) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else if (s->off == s->len && (more = next_text(s)) < 0) {
        n = MHD_CONTENT_READER_END_WITH_ERROR; /* no memory: the client sees the cut */
    } else if (more > 0) {
        n = (ssize_t)(s->len - s->off < max ? s->len - s->off : max);
        memcpy(buf, s->text + s->off, (size_t)n);
        s->off += (size_t)n;
        s->last_write_ms = now_ms();
        sbx_metrics_bytes_out((uint64_t)n);
    } else {
        /* Nothing now: sleep until the waiter wakes us (armed and suspended under our lock,
         * which its callback takes first). */
        __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
        if (sbx_fswatch_wait(s->r, &s->wt)) {
            MHD_suspend_connection(s->conn);
            s->suspended = true;
        } else {
            __atomic_sub_fetch(&s->refs, 1, __ATOMIC_RELAXED); /* news already: called again */
        }
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* The response is gone (sent, or its connection closed): the watch is kept for a resume. */
static void sse_free(void *cls)
{
    struct sse *s = cls;
    bool disarmed;

    pthread_mutex_lock(&s->lock);
    s->conn = NULL;
    disarmed = sbx_fswatch_unwait(s->r, &s->wt);
    sbx_fswatch_close(s->r);
    s->r = NULL;
    pthread_mutex_unlock(&s->lock);
    if (disarmed)
        sse_unref(s);
    sse_unref(s); /* the response's */
}

/* ------------------------------------------------------------------------------------------ */
/* The request */

struct globs {
    char *include[SBX_FSWATCH_MAX_GLOBS], *exclude[SBX_FSWATCH_MAX_GLOBS];
    size_t n_include, n_exclude;
    bool too_many;
};

static enum MHD_Result collect_glob(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value)
{
    struct globs *g = cls;
    char **v;
    size_t *n;

    (void)kind;
    if (strcmp(key, "include") == 0) {
        v = g->include;
        n = &g->n_include;
    } else if (strcmp(key, "exclude") == 0) {
        v = g->exclude;
        n = &g->n_exclude;
    } else {
        return MHD_YES;
    }
    if (*n == SBX_FSWATCH_MAX_GLOBS) {
        g->too_many = true;
        return MHD_YES;
    }
    v[(*n)++] = (char *)(value ? value : "");
    return MHD_YES;
}

/* The spec from the query; a message in msg when it is refused. */
static bool parse_spec(struct hctx *c, struct sbx_fswatch_spec *s, struct globs *g, char *msg,
                       size_t len)
{
    const char *rec = sbx_http_arg(c, "recursive"), *since = sbx_http_arg(c, "since");
    const char *watch = sbx_http_arg(c, "watch"), *rescan = sbx_http_arg(c, "rescan_interval");
    const char *last = sbx_http_header(c, "Last-Event-ID");
    long long n;

    MHD_get_connection_values(c->conn, MHD_GET_ARGUMENT_KIND, collect_glob, g);
    if (g->too_many)
        return snprintf(msg, len, "at most %d include and %d exclude globs", SBX_FSWATCH_MAX_GLOBS,
                        SBX_FSWATCH_MAX_GLOBS) < 0;
    s->include = g->include;
    s->n_include = g->n_include;
    s->exclude = g->exclude;
    s->n_exclude = g->n_exclude;
    if (rec && sbx_http_parse_bool(rec, &s->recursive) < 0)
        return snprintf(msg, len, "recursive must be true or false") < 0;
    if (rescan && (sbx_parse_duration_ms(rescan, &s->rescan_ms) < 0 ||
                   (s->rescan_ms && s->rescan_ms < MIN_RESCAN_MS)))
        return snprintf(msg, len, "rescan_interval must be a duration of at least %dms, or 0",
                        MIN_RESCAN_MS) < 0;
    if (since && (!watch || !watch[0]))
        return snprintf(msg, len, "since needs watch (the id of the watch to resume)") < 0;
    /* An EventSource reconnecting sends Last-Event-ID: it counts with the watch's id only. */
    if (!since && watch && watch[0])
        since = last;
    if (since) {
        if (sbx_parse_int(since, 0, INT64_MAX, &n) < 0)
            return snprintf(msg, len, "since must be a sequence number") < 0;
        s->since = (uint64_t)n;
    }
    s->resume_id = watch;
    s->path = c->path[0] ? c->path : ".";
    return true;
}

static void peer_of(struct hctx *c, char *out, size_t len)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);

    const struct sockaddr *sa = info ? info->client_addr : NULL;

    snprintf(out, len, "?");
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)len);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)len);
    if (strncmp(out, "::ffff:", 7) == 0 && strchr(out, '.'))
        memmove(out, out + 7, strlen(out + 7) + 1); /* IPv4 on a dual-stack socket */
}

static enum MHD_Result respond_open_error(struct hctx *c, int rc, const struct sbx_error *e)
{
    if (rc == -EMFILE)
        return sbx_http_respond_error(c, 429, "RESOURCE_EXHAUSTED", e->msg);
    if (rc == -ESHUTDOWN)
        return sbx_http_respond_error(c, 503, "UNAVAILABLE", e->msg);
    if (rc == -ENOTDIR)
        return sbx_http_respond_error(c, 400, "INVALID_ARGUMENT", e->msg);
    if (rc == -ENOENT)
        return sbx_http_respond_error(c, 404, "NOT_FOUND", e->msg);
    return sbx_http_respond_errno(c, rc, e);
}

enum MHD_Result sbx_http_watch(struct hctx *c)
{
    struct sbx_fswatch_spec spec = {0};
    struct globs g = {0};
    struct sbx_error e = {0};
    struct MHD_Response *resp;
    char msg[256], client[64];
    struct sse *s;
    int rc;

    if (!c->h->o.watches)
        return sbx_http_respond_error(c, 503, "UNAVAILABLE", "watches are not available");
    if (!parse_spec(c, &spec, &g, msg, sizeof(msg)))
        return sbx_http_respond_error(c, 400, "INVALID_ARGUMENT", msg);
    peer_of(c, client, sizeof(client));
    spec.client = client;
    s = calloc(1, sizeof(*s));
    if (!s)
        return MHD_NO;
    pthread_mutex_init(&s->lock, NULL);
    s->refs = 1;
    s->conn = c->conn;
    s->wt.fn = sse_woken;
    s->keepalive_ms = c->h->o.watch_keepalive_ms;
    s->last_write_ms = now_ms();
    rc = sbx_fswatch_open(c->h->o.watches, &spec, &s->r, &e);
    if (rc < 0) {
        sse_unref(s);
        return respond_open_error(c, rc, &e);
    }
    resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK, sse_read, s, sse_free);
    if (!resp) {
        sse_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    return sbx_http_queue(c, 200, resp);
}
