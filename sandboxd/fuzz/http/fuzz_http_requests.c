/* libFuzzer target for raw HTTP requests to the daemon's real HTTP server (http_server.c and
 * its routes on libmicrohttpd), in process: the server runs without a listening socket
 * (opts.external) and each input is one connection, a socketpair handed over with
 * sbx_http_add_connection, over a fresh root box (fuzz_box.h). Request line, headers, chunked
 * bodies, %-escapes, pipelined requests: whatever the bytes say.
 *
 * Input: byte 0: bit 0 the server that wants a bearer token ("Authorization: Bearer
 * fuzz-token"), bits 1-7 seed the sizes of the writes; the rest is what the client sends.
 *
 * The client writes, the server runs (sbx_http_run) and the client reads, until everything is
 * written and a few rounds pass with nothing read or written (the server is waiting for bytes
 * that will not come), or the server closes; then the client closes and the server must drop
 * the connection at once. Nothing waits on a clock.
 *
 * Checked: what came back is a sequence of well-formed HTTP/1.x responses (status line, header
 * names tokens and values without control characters, one Content-Length at most, bodies framed
 * by it or by chunks, a body left out only where a HEAD was sent); every error with a body is
 * our JSON {"code", "message"} with a known code, but for libmicrohttpd's own refusals of
 * malformed HTTP, which end the connection; nothing outside the root changed, no temp file of
 * an upload is left behind, no fd leaked, no connection outlived its client. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "auth.h"
#include "fuzz_box.h"
#include "http_server.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TMP_PREFIX  ".sandboxd-tmp-"
#define MAX_OUT     (4u << 20) /* read at most this much of the answers */
#define IDLE_ROUNDS 8
#define MAX_ROUNDS  100000

static struct sbx_root root_slot; /* the servers' root: each input's box is copied in */

static bool yes(void *arg)
{
    (void)arg;
    return true;
}

static struct sbx_http *server(bool auth)
{
    static struct sbx_http *servers[2];
    static struct sbx_auth *token;
    struct sbx_error err = {0};

    if (!servers[auth]) {
        struct sbx_http_opts o = {.external = true,
                                  .idle_timeout_s = 60,
                                  .max_connections = 16,
                                  .max_upload_bytes = 1u << 20,
                                  .root = &root_slot,
                                  .metadata_prefix = "SANDBOX_",
                                  .ready = yes,
                                  .alive = yes};
        if (auth && !token)
            CHECK(sbx_auth_new("fuzz-token", 10, &token, &err) == 0, "auth: %s", err.msg);
        o.auth = auth ? token : NULL;
        CHECK(sbx_http_start(&servers[auth], &o, &err) == 0, "start: %s", err.msg);
    }
    return servers[auth];
}

struct buf {
    char *p;
    size_t len, cap;
};

static void append(struct buf *b, const char *p, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2;
        b->p = realloc(b->p, b->cap);
        CHECK(b->p, "out of memory");
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

/* Reads what is there; returns bytes read, or -1 at EOF (the server closed). */
static long drain(int fd, struct buf *out)
{
    char tmp[65536];
    long total = 0;

    for (;;) {
        ssize_t n = read(fd, tmp, sizeof(tmp));
        if (n == 0)
            return -1;
        if (n < 0) {
            CHECK(errno == EAGAIN || errno == ECONNRESET, "read: %s", strerror(errno));
            return errno == ECONNRESET ? -1 : total;
        }
        if (out->len < MAX_OUT)
            append(out, tmp, (size_t)n);
        total += n;
    }
}

/* --- checking the answers ---------------------------------------------------------------- */

static bool tchar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* The end of the line starting at p (its '\r'), or NULL. */
static const char *line_end(const char *p, const char *end)
{
    for (const char *q = p; q + 1 < end; q++)
        if (q[0] == '\r' && q[1] == '\n')
            return q;
    return NULL;
}

struct response {
    unsigned status;
    long long length; /* -1 when none */
    bool chunked, json, close;
    const char *body; /* after the headers */
};

/* Parses a status line and headers at p; returns the end of the headers or NULL. */
static const char *parse_head(const char *p, const char *end, struct response *r)
{
    const char *e = line_end(p, end);

    *r = (struct response){.length = -1};
    if (!e || e - p < 13 || (memcmp(p, "HTTP/1.1 ", 9) && memcmp(p, "HTTP/1.0 ", 9)))
        return NULL;
    for (int i = 9; i < 12; i++)
        if (p[i] < '0' || p[i] > '9')
            return NULL;
    r->status = (unsigned)((p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0'));
    if (p[12] != ' ' || r->status < 100)
        return NULL;
    for (p = e + 2; (e = line_end(p, end)) && e != p; p = e + 2) {
        const char *colon = memchr(p, ':', (size_t)(e - p)), *v;
        size_t nlen;
        if (!colon || colon == p)
            return NULL;
        for (const char *q = p; q < colon; q++)
            if (!tchar(*q))
                return NULL;
        for (v = colon + 1; v < e; v++)
            if (((unsigned char)*v < 0x20 && *v != '\t') || *v == 0x7f)
                return NULL;
        nlen = (size_t)(colon - p);
        for (v = colon + 1; v < e && (*v == ' ' || *v == '\t'); v++)
            ;
        if (nlen == 14 && !strncasecmp(p, "Content-Length", 14)) {
            char *num_end;
            if (r->length >= 0)
                return NULL; /* two of them */
            r->length = strtoll(v, &num_end, 10);
            if (num_end != e || r->length < 0)
                return NULL;
        } else if (nlen == 17 && !strncasecmp(p, "Transfer-Encoding", 17)) {
            r->chunked = (size_t)(e - v) == 7 && !strncasecmp(v, "chunked", 7);
        } else if (nlen == 12 && !strncasecmp(p, "Content-Type", 12)) {
            r->json = (size_t)(e - v) >= 16 && !strncasecmp(v, "application/json", 16);
        } else if (nlen == 10 && !strncasecmp(p, "Connection", 10)) {
            r->close = (size_t)(e - v) == 5 && !strncasecmp(v, "close", 5);
        }
    }
    if (!e)
        return NULL;
    r->body = e + 2;
    return r->body;
}

/* A chunked body at p: its end, or NULL. */
static const char *parse_chunked(const char *p, const char *end)
{
    for (;;) {
        const char *e = line_end(p, end);
        char *num_end;
        unsigned long long n;
        if (!e ||
            !((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F')))
            return NULL;
        n = strtoull(p, &num_end, 16);
        if (num_end != e && *num_end != ';')
            return NULL;
        p = e + 2;
        if (n == 0)
            break;
        if ((unsigned long long)(end - p) < n + 2 || p[n] != '\r' || p[n + 1] != '\n')
            return NULL;
        p += n + 2;
    }
    for (const char *e; (e = line_end(p, end)); p = e + 2) /* trailers, then an empty line */
        if (e == p)
            return e + 2;
    return NULL;
}

static void check_error_body(const struct response *r, const char *body, size_t len)
{
    static const char *const codes[] = {"PERMISSION_DENIED", "NOT_FOUND",
                                        "INVALID_ARGUMENT",  "CONFLICT",
                                        "INTERNAL",          "UNAVAILABLE",
                                        "UNAUTHENTICATED",   "METHOD_NOT_ALLOWED",
                                        "PAYLOAD_TOO_LARGE", "INSUFFICIENT_STORAGE",
                                        "BAD_REQUEST",       "NOT_IMPLEMENTED"};
    json_t *j = json_loadb(body, len, 0, NULL);
    const char *code = json_string_value(json_object_get(j, "code"));
    bool known = false;

    CHECK(j && json_object_size(j) == 2 && code && json_is_string(json_object_get(j, "message")),
          "HTTP %u: error body not {code, message}: %.*s", r->status, (int)len, body);
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        known |= !strcmp(code, codes[i]);
    CHECK(known, "HTTP %u: unknown code '%s'", r->status, code);
    json_decref(j);
}

/* libmicrohttpd's own refusals of what is not HTTP it takes (HTML bodies, not ours). */
static bool mhd_refusal(const struct response *r)
{
    return !r->json &&
           (r->status == 400 || r->status == 413 || r->status == 414 || r->status == 431 ||
            r->status == 500 || r->status == 501 || r->status == 505);
}

/* libmicrohttpd 0.9.75 answers a Content-Length it refuses (not a number, or too large) with
 * its refusal's head twice, the first without the body it announces. Taken as it is: the
 * connection ends right after, and the daemon is not the one writing it (the findings in
 * README.md). */
static bool mhd_repeated(const char *head, const char *after, const char *end)
{
    const char *e = line_end(head, end);
    size_t n = e ? (size_t)(e - head) + 2 : 0;

    return e && (size_t)(end - after) >= n && !memcmp(head, after, n) &&
           (!memcmp(head + 9, "400 ", 4) || !memcmp(head + 9, "413 ", 4));
}

/* The answers as a path through out: the response starting at each position and where the
 * next one starts. A response with a Content-Length may lack its body (an answer to a HEAD),
 * so both readings are tried; memo[] keeps each position's verdict (0 not tried, 1 reaches the
 * end, 2 does not) and next[] the reading that reached it, so each position is parsed once. */
struct answers {
    const char *out;
    size_t len;
    bool may_head;
    unsigned char *memo;
    size_t *next;
};

static bool reaches_end(struct answers *a, size_t pos)
{
    const char *end = a->out + a->len, *body_end;
    struct response r;
    size_t b;
    bool ok = false;

    if (pos == a->len)
        return true;
    if (a->memo[pos])
        return a->memo[pos] == 1;
    a->memo[pos] = 2;
    if (!parse_head(a->out + pos, end, &r))
        return false;
    b = (size_t)(r.body - a->out);
    if (r.status < 200 || r.status == 204 || r.status == 304) {
        ok = reaches_end(a, b);
        a->next[pos] = b;
    } else if (r.chunked) {
        body_end = parse_chunked(r.body, end);
        a->next[pos] = body_end ? (size_t)(body_end - a->out) : 0;
        ok = body_end && reaches_end(a, a->next[pos]);
        if (!ok && a->may_head) {
            a->next[pos] = b;
            ok = reaches_end(a, b);
        }
    } else if (r.length >= 0) {
        if ((unsigned long long)(end - r.body) >= (unsigned long long)r.length) {
            a->next[pos] = b + (size_t)r.length;
            ok = reaches_end(a, a->next[pos]);
        }
        if (!ok && r.length > 0 && (a->may_head || mhd_repeated(a->out + pos, r.body, end))) {
            a->next[pos] = b;
            ok = reaches_end(a, b);
        }
    } else {
        a->next[pos] = a->len; /* until the connection closed */
        ok = true;
    }
    a->memo[pos] = ok ? 1 : 2;
    return ok;
}

/* Each response on the path: errors with a body are ours, or libmicrohttpd's last word. */
static void check_path(struct answers *a)
{
    for (size_t pos = 0; pos < a->len; pos = a->next[pos]) {
        struct response r;
        parse_head(a->out + pos, a->out + a->len, &r);
        size_t b = (size_t)(r.body - a->out), body_len = a->next[pos] - b;
        if (r.status < 400 || r.status == 416) /* a 416 answers a Range, without a body */
            continue;
        if (mhd_refusal(&r)) {
            CHECK(a->next[pos] == a->len ||
                      mhd_repeated(a->out + pos, a->out + a->next[pos], a->out + a->len),
                  "HTTP %u not ours, yet the connection went on", r.status);
            continue;
        }
        CHECK(r.length >= 0 || r.chunked || !r.json, "HTTP %u framed by the connection's end",
              r.status);
        if (r.length > 0 && body_len == (size_t)r.length)
            check_error_body(&r, r.body, body_len);
        else if (r.length > 0)
            CHECK(a->may_head, "HTTP %u without its body", r.status);
        else
            CHECK(r.length != 0, "HTTP %u with an empty body", r.status);
    }
}

static bool contains(const uint8_t *p, size_t n, const char *s)
{
    return memmem(p, n, s, strlen(s)) != NULL;
}

static void check_answers(const struct buf *out, const uint8_t *in, size_t in_len)
{
    struct answers a = {.out = out->p, .len = out->len, .may_head = contains(in, in_len, "HEAD")};

    if (out->len >= MAX_OUT || out->len == 0)
        return; /* nothing, or cut short by us */
    a.memo = calloc(out->len, 1);
    a.next = calloc(out->len, sizeof(*a.next));
    CHECK(a.memo && a.next, "out of memory");
    CHECK(reaches_end(&a, 0), "not a sequence of HTTP responses (%zu bytes): %.*s", out->len,
          (int)(out->len < 2000 ? out->len : 2000), out->p);
    check_path(&a);
    free(a.memo);
    free(a.next);
}

/* --- one connection ----------------------------------------------------------------------- */

static void converse(struct sbx_http *h, const uint8_t *in, size_t n, unsigned seed,
                     struct buf *out)
{
    struct sbx_error err = {0};
    int sv[2];
    size_t off = 0;
    unsigned idle = 0, rounds = 0;
    bool closed = false;

    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0,
          "socketpair: %s", strerror(errno));
    CHECK(sbx_http_add_connection(h, sv[1], &err) == 0, "add: %s", err.msg);
    while (!closed && idle < IDLE_ROUNDS && rounds++ < MAX_ROUNDS) {
        bool moved = false;
        if (off < n) {
            size_t chunk = seed ? 1 + (seed = seed * 1103515245u + 12345u) % 509 : n - off;
            ssize_t w = write(sv[0], in + off, chunk < n - off ? chunk : n - off);
            CHECK(w >= 0 || errno == EAGAIN || errno == EPIPE || errno == ECONNRESET, "write: %s",
                  strerror(errno));
            if (w < 0 && errno != EAGAIN)
                off = n; /* the server closed: the rest is never read */
            else if (w > 0)
                off += (size_t)w, moved = true;
        }
        sbx_http_run(h);
        long r = drain(sv[0], out);
        if (r < 0)
            closed = true;
        moved |= r > 0;
        int pending = 0;
        /* Bytes the server has not read yet are work it still has to do. */
        if (!closed && ioctl(sv[1], FIONREAD, &pending) == 0 && pending > 0)
            moved = true;
        idle = moved || off < n ? 0 : idle + 1;
        if (out->len >= MAX_OUT)
            break;
    }
    if (getenv("FUZZ_HTTP_SHOW"))
        fprintf(stderr, "rounds %u, written %zu of %zu, closed %d, idle %u\n", rounds, off, n,
                closed, idle);
    CHECK(rounds <= MAX_ROUNDS, "the server never settled");
    close(sv[0]);
    for (int i = 0; i < 1000 && sbx_http_connections(h) > 0; i++)
        sbx_http_run(h);
    CHECK(sbx_http_connections(h) == 0, "a connection outlived its client");
    /* A connection the server closed itself is counted out at once, but freed (its response,
     * the socket) by the next round of the loop. */
    sbx_http_run(h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool started;
    struct fuzz_box b;
    int fds;
    struct buf out = {0};

    if (size < 1 || size > 64 * 1024)
        return 0;
    if (!started) {
        sbx_log_max_level = SBX_LOG_ERROR;
        umask(022);
        server(false);
        server(true);
        started = true;
    }
    /* Counted per input: between inputs libFuzzer may start llvm-symbolizer (two pipes and
     * /dev/null) to name a function it saw for the first time. */
    fds = fuzz_count_fds();
    fuzz_box_make(&b);
    root_slot = b.root;
    converse(server(data[0] & 1), data + 1, size - 1, data[0] >> 1, &out);
    if (getenv("FUZZ_HTTP_SHOW")) { /* to see what a replayed input got, and left open */
        fprintf(stderr, "%.*s\n", (int)out.len, out.p ? out.p : "");
        for (int fd = 0; fd < 1024; fd++) {
            char link[64], target[256];
            ssize_t n;
            snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
            if ((n = readlink(link, target, sizeof(target) - 1)) > 0)
                fprintf(stderr, "fd %d: %.*s\n", fd, (int)n, target);
        }
    }
    check_answers(&out, data + 1, size - 1);
    free(out.p);
    root_slot = (struct sbx_root){.fd = -1};
    CHECK(fuzz_count_fds() == fds + 1, "fd leak: %d open, %d before (and the root's)",
          fuzz_count_fds(), fds);
    CHECK(fuzz_box_remove(&b, TMP_PREFIX) == 0 || contains(data, size, TMP_PREFIX),
          "an upload's temp file was left behind");
    return 0;
}
