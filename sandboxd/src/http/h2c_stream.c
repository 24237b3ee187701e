/* An h2c stream's bridge (h2c.h): its request is written to a socketpair as HTTP/1.1, the
 * response read back is relayed as HEADERS and DATA. Both ways are bounded by HTTP/2's flow
 * control: DATA is given back to the client's window only once written, and the socketpair is
 * read only while the response's buffer has room, which empties as fast as the client's window
 * lets nghttp2 send. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "cleanup.h"
#include "h2c_internal.h"
#include "log.h"

static struct h2c_stream *stream_of(nghttp2_session *ses, int32_t id)
{
    return nghttp2_session_get_stream_user_data(ses, id);
}

/* Appends to a string bounded by the header list's size (checked by the caller). */
static int append(char **buf, size_t *len, const char *s, size_t n)
{
    char *b = realloc(*buf, *len + n + 1);

    if (!b)
        return -ENOMEM;
    memcpy(b + *len, s, n);
    *len += n;
    b[*len] = '\0';
    *buf = b;
    return 0;
}

static int set_pseudo(char **slot, const uint8_t *v, size_t n)
{
    size_t len = 0;

    if (*slot)
        return -EINVAL; /* nghttp2 refuses repeats; be sure */
    return append(slot, &len, (const char *)v, n);
}

/* --- the response, from the socketpair to the client --- */

static void stream_arm(struct h2c_stream *s);

static ssize_t out_read(nghttp2_session *ses, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                        nghttp2_data_source *src, void *arg)
{
    struct h2c_stream *s = src->ptr;
    size_t n = s->out_len - s->out_off;

    (void)ses, (void)id, (void)arg;
    if (n > len)
        n = len;
    if (!n && !s->resp_end) {
        s->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
    }
    memcpy(buf, s->out + s->out_off, n);
    s->out_off += n;
    if (s->out_off == s->out_len) {
        s->out_off = s->out_len = 0;
        if (s->resp_end)
            *flags |= NGHTTP2_DATA_FLAG_EOF;
    }
    stream_arm(s); /* room again: read on */
    return (ssize_t)n;
}

/* Submits a response head of nv (n pairs) with out as its body, if any is to come. */
static void submit(struct h2c_stream *s, const nghttp2_nv *nv, size_t n, bool body)
{
    nghttp2_data_provider prd = {.source.ptr = s, .read_callback = out_read};

    s->relayed = true;
    if (nghttp2_submit_response(s->c->s, s->id, nv, n, body ? &prd : NULL) != 0)
        nghttp2_submit_rst_stream(s->c->s, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
}

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE             \
    }

/* Answers the stream from here, as the gate answers what it refuses: a JSON error. */
static void answer(struct h2c_stream *s, unsigned status, const char *code, const char *message)
{
    char st[8] = "";
    int n =
        snprintf(s->out, sizeof(s->out), "{\"code\":\"%s\",\"message\":\"%s\"}\n", code, message);
    nghttp2_nv nv[2];

    snprintf(st, sizeof(st), "%u", status); /* before NV() takes its length */
    nv[0] = (nghttp2_nv)NV(":status", st);
    nv[1] = (nghttp2_nv)NV("content-type", "application/json");
    s->out_off = 0;
    s->out_len = n > 0 ? (size_t)n : 0;
    s->resp_end = true;
    s->sink = true;
    submit(s, nv, SBX_ARRAY_SIZE(nv), !s->no_body);
}

/* The response's head, relayed without HTTP/1.1's hop-by-hop fields, names in lower case. */
static void relay_head(struct h2c_stream *s)
{
    const struct sbx_h2c_resp *p = &s->p;
    nghttp2_nv nv[SBX_H2C_RESP_FIELDS_MAX + 1];
    char names[SBX_H2C_RESP_HEAD_MAX], st[8];
    size_t n = 0, used = 0;

    snprintf(st, sizeof(st), "%u", p->status);
    nv[n++] = (nghttp2_nv)NV(":status", st);
    for (size_t i = 0; i < p->n_fields; i++) {
        const struct sbx_h2c_resp_field *f = &p->fields[i];
        if (sbx_h2c_hop_by_hop(f->name, f->name_len))
            continue;
        for (size_t k = 0; k < f->name_len; k++)
            names[used + k] = (char)tolower((unsigned char)f->name[k]);
        nv[n++] = (nghttp2_nv){(uint8_t *)names + used, (uint8_t *)f->value, f->name_len,
                               f->value_len, NGHTTP2_NV_FLAG_NONE};
        used += f->name_len;
    }
    submit(s, nv, n, p->state != SBX_H2C_RESP_DONE);
}

/* The response broke off or was malformed: an error if nothing was relayed yet, else a reset. */
static void resp_fail(struct h2c_stream *s, int r)
{
    log_debug("h2c: stream %d: the server's response %s", s->id,
              r == -E2BIG ? "is too large" : "is malformed or cut off");
    s->resp_end = true;
    if (!s->relayed)
        answer(s, 502, "BAD_GATEWAY", "the server's response is malformed or cut off");
    else
        nghttp2_submit_rst_stream(s->c->s, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_INTERNAL_ERROR);
}

/* Feeds what was read to the parser; the head is relayed as soon as it is whole. */
static int resp_feed(struct h2c_stream *s, const char *in, size_t len)
{
    size_t off = 0;

    while (off < len && s->p.state != SBX_H2C_RESP_DONE) {
        size_t got;
        ssize_t r = sbx_h2c_resp_feed(&s->p, in + off, len - off, s->out + s->out_len, &got);
        if (r < 0)
            return (int)r;
        s->out_len += got;
        off += (size_t)r;
        if (s->p.head_done && !s->relayed)
            relay_head(s);
    }
    return 0;
}

/* The response is all read: the socketpair is done with (the server's connection ends with
 * its answer) and what the client still sends is dropped. */
static void resp_done(struct h2c_stream *s)
{
    s->resp_end = true;
    s->sink = true;
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
        s->events = 0;
    }
    if (s->unconsumed)
        nghttp2_session_consume(s->c->s, s->id, s->unconsumed);
    s->unconsumed = 0;
}

static void resp_read(struct h2c_stream *s)
{
    char buf[H2C_OUT_MAX];

    while (s->fd >= 0 && !s->resp_end) {
        size_t room;
        ssize_t n;
        int r;
        if (s->out_off) {
            memmove(s->out, s->out + s->out_off, s->out_len - s->out_off);
            s->out_len -= s->out_off;
            s->out_off = 0;
        }
        room = sizeof(s->out) - s->out_len;
        if (!room)
            break;
        n = recv(s->fd, buf, room, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        if (n <= 0)
            r = n == 0 ? sbx_h2c_resp_eof(&s->p) : -EPROTO;
        else
            r = resp_feed(s, buf, (size_t)n);
        if (r < 0) {
            resp_fail(s, r);
            resp_done(s);
        } else if (n == 0 || s->p.state == SBX_H2C_RESP_DONE) {
            resp_done(s);
        }
    }
    if (s->deferred && (s->out_len > s->out_off || s->resp_end)) {
        s->deferred = false;
        nghttp2_session_resume_data(s->c->s, s->id);
    }
}

/* --- the request, from the client to the socketpair --- */

static bool req_pending(const struct h2c_stream *s)
{
    return !s->sink && (s->head_off < s->head_len || s->frame_off < s->frame_len ||
                        s->body_off < s->body_len || (s->chunked && s->req_end && !s->last_chunk));
}

/* The server takes no more of the request (it answered early, or went): drop the rest. */
static void req_drop(struct h2c_stream *s)
{
    s->sink = true;
    s->body_off = s->body_len = 0;
    if (s->unconsumed)
        nghttp2_session_consume(s->c->s, s->id, s->unconsumed);
    s->unconsumed = 0;
}

/* Writes n bytes at most: how many went, 0 when the socketpair is full, -1 when it broke. */
static ssize_t put(struct h2c_stream *s, const char *b, size_t n)
{
    ssize_t w = send(s->fd, b, n, MSG_DONTWAIT | MSG_NOSIGNAL);

    if (w >= 0)
        return w;
    return errno == EAGAIN || errno == EINTR ? 0 : -1;
}

/* The next piece of chunked framing: a chunk's size line over what is buffered, or the last. */
static bool next_frame(struct h2c_stream *s)
{
    size_t avail = s->body_len - s->body_off;
    int n;

    if (avail)
        n = snprintf(s->frame, sizeof(s->frame), "%s%zx\r\n", s->crlf_due ? "\r\n" : "", avail);
    else if (s->req_end && !s->last_chunk)
        n = snprintf(s->frame, sizeof(s->frame), "%s0\r\n\r\n", s->crlf_due ? "\r\n" : "");
    else
        return false;
    s->last_chunk = !avail;
    s->chunk_left = avail;
    s->crlf_due = false;
    s->frame_len = (size_t)n;
    s->frame_off = 0;
    return true;
}

/* The body's next bytes, given back to the client's window once written. */
static ssize_t put_body(struct h2c_stream *s)
{
    size_t n = s->body_len - s->body_off;
    ssize_t w;

    if (s->chunked && n > s->chunk_left)
        n = (size_t)s->chunk_left;
    w = put(s, s->body + s->body_off, n);
    if (w <= 0)
        return w;
    s->body_off += (size_t)w;
    nghttp2_session_consume(s->c->s, s->id, (size_t)w);
    s->unconsumed -= (size_t)w;
    if (s->chunked && !(s->chunk_left -= (uint64_t)w))
        s->crlf_due = true;
    return w;
}

static void req_flush(struct h2c_stream *s)
{
    ssize_t w = 1;

    while (w > 0 && req_pending(s)) {
        if (s->head_off < s->head_len) {
            if ((w = put(s, s->head + s->head_off, s->head_len - s->head_off)) > 0)
                s->head_off += (size_t)w;
        } else if (s->frame_off < s->frame_len) {
            if ((w = put(s, s->frame + s->frame_off, s->frame_len - s->frame_off)) > 0)
                s->frame_off += (size_t)w;
        } else if (s->chunk_left || (!s->chunked && s->body_off < s->body_len)) {
            w = put_body(s);
        } else if (!s->chunked || !next_frame(s)) {
            break;
        }
    }
    if (w < 0)
        req_drop(s);
    if (s->body_off == s->body_len)
        s->body_off = s->body_len = 0;
}

/* The head written on the socketpair: the request line, Host from :authority, the fields, and
 * the framing: the client's Content-Length if it gave one, else chunked if a body follows. */
static int req_compose(struct h2c_stream *s, bool end)
{
    const char *host = s->authority ? s->authority : "localhost";
    size_t cap = strlen(s->method) + strlen(s->path) + strlen(host) + s->fields_len + 96;
    int n;

    s->chunked = !end && !s->has_length;
    if (!(s->head = malloc(cap)))
        return -ENOMEM;
    n = snprintf(s->head, cap, "%s %s HTTP/1.1\r\nHost: %s\r\n%s%s\r\n", s->method, s->path, host,
                 s->fields ? s->fields : "", s->chunked ? "Transfer-Encoding: chunked\r\n" : "");
    if (n < 0 || (size_t)n >= cap)
        return -EOVERFLOW;
    s->head_len = (size_t)n;
    free(s->fields);
    s->fields = NULL;
    return 0;
}

/* A request target HTTP/1.1 can carry: origin form, or "*" for OPTIONS. */
static bool path_valid(const char *p)
{
    if (*p != '/' && strcmp(p, "*") != 0)
        return false;
    for (; *p; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f)
            return false;
    return true;
}

/* Whether the request cannot be bridged; if so it is answered from here. */
static bool req_refused(struct h2c_stream *s)
{
    if (s->too_large)
        answer(s, 431, "HEADERS_TOO_LARGE", "request header list longer than 16 KiB");
    else if (!s->method || !s->path || !path_valid(s->path) || strcmp(s->method, "CONNECT") == 0)
        answer(s, 400, "BAD_REQUEST", "a request needs :method and an origin-form :path");
    else
        return false;
    return true;
}

/* The request's head is whole: a socketpair, its far end served, the head written. */
static void req_begin(struct h2c_stream *s, bool end)
{
    struct sbx_h2c *f = s->c->f;
    int sv[2];

    s->req_end = end;
    if (req_refused(s))
        return;
    if (req_compose(s, end) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
        answer(s, 503, "UNAVAILABLE", "out of memory or file descriptors");
        return;
    }
    if (f->o.serve(f->o.arg, sv[1], (const struct sockaddr *)&s->c->peer, s->c->peer_len) < 0) {
        close(sv[0]);
        answer(s, 503, "UNAVAILABLE", "the server takes no more connections");
        return;
    }
    s->fd = sv[0];
    sbx_h2c_resp_init(&s->p, s->no_body);
    req_flush(s);
    stream_arm(s);
}

/* --- nghttp2's callbacks --- */

static int on_begin_headers(nghttp2_session *ses, const nghttp2_frame *fr, void *arg)
{
    struct h2c_conn *c = arg;
    struct h2c_stream *s;

    if (fr->hd.type != NGHTTP2_HEADERS || fr->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (c->f->n_streams >= c->f->o.max_streams || !(s = calloc(1, sizeof(*s)))) {
        nghttp2_submit_rst_stream(ses, NGHTTP2_FLAG_NONE, fr->hd.stream_id, NGHTTP2_REFUSED_STREAM);
        return 0;
    }
    s->w.kind = H2C_STREAM;
    s->c = c;
    s->id = fr->hd.stream_id;
    s->fd = -1;
    s->next = c->streams;
    if (c->streams)
        c->streams->prev = s;
    c->streams = s;
    c->n_streams++;
    c->f->n_streams++;
    nghttp2_session_set_stream_user_data(ses, s->id, s);
    return 0;
}

static int on_header(nghttp2_session *ses, const nghttp2_frame *fr, const uint8_t *name,
                     size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *arg)
{
    struct h2c_stream *s = stream_of(ses, fr->hd.stream_id);
    const char *n = (const char *)name;
    int r = 0;

    (void)flags, (void)arg;
    if (!s || s->head || fr->hd.type != NGHTTP2_HEADERS || fr->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* refused, or trailers (dropped) */
    s->header_bytes += nlen + vlen + 32;
    if (s->header_bytes > H2C_HEADERS)
        s->too_large = true;
    if (s->too_large)
        return 0;
    if (nlen == 7 && memcmp(n, ":method", 7) == 0) {
        r = set_pseudo(&s->method, value, vlen);
        s->no_body = vlen == 4 && memcmp(value, "HEAD", 4) == 0;
    } else if (nlen == 5 && memcmp(n, ":path", 5) == 0) {
        r = set_pseudo(&s->path, value, vlen);
    } else if ((nlen == 10 && memcmp(n, ":authority", 10) == 0) ||
               (nlen == 4 && memcmp(n, "host", 4) == 0 && !s->authority)) {
        free(s->authority);
        s->authority = NULL;
        r = set_pseudo(&s->authority, value, vlen);
    } else if (*n != ':' && !sbx_h2c_hop_by_hop(n, nlen) &&
               !(nlen == 6 && !memcmp(n, "expect", 6))) {
        s->has_length |= nlen == 14 && memcmp(n, "content-length", 14) == 0;
        if (!r)
            r = append(&s->fields, &s->fields_len, n, nlen);
        if (!r)
            r = append(&s->fields, &s->fields_len, ": ", 2);
        if (!r)
            r = append(&s->fields, &s->fields_len, (const char *)value, vlen);
        if (!r)
            r = append(&s->fields, &s->fields_len, "\r\n", 2);
    }
    return r < 0 ? NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE : 0;
}

static int on_frame_recv(nghttp2_session *ses, const nghttp2_frame *fr, void *arg)
{
    struct h2c_stream *s;
    bool end = fr->hd.flags & NGHTTP2_FLAG_END_STREAM;

    (void)arg;
    if ((fr->hd.type != NGHTTP2_HEADERS && fr->hd.type != NGHTTP2_DATA) ||
        !(s = stream_of(ses, fr->hd.stream_id)))
        return 0;
    if (fr->hd.type == NGHTTP2_HEADERS && fr->headers.cat == NGHTTP2_HCAT_REQUEST) {
        req_begin(s, end);
    } else if (end && !s->req_end) {
        s->req_end = true;
        if (s->fd >= 0)
            req_flush(s);
    }
    stream_arm(s);
    return 0;
}

static int on_data(nghttp2_session *ses, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                   void *arg)
{
    struct h2c_stream *s = stream_of(ses, id);

    (void)flags, (void)arg;
    if (!s || s->sink || s->fd < 0) {
        nghttp2_session_consume(ses, id, len);
        return 0;
    }
    if (s->body_off) {
        memmove(s->body, s->body + s->body_off, s->body_len - s->body_off);
        s->body_len -= s->body_off;
        s->body_off = 0;
    }
    if (!s->body && !(s->body = malloc(H2C_WINDOW)))
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (s->body_len + len > H2C_WINDOW) /* nghttp2 holds the client to the window */
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    memcpy(s->body + s->body_len, data, len);
    s->body_len += len;
    s->unconsumed += len;
    req_flush(s);
    stream_arm(s);
    return 0;
}

/* Our response is all sent while the client still sends: it need not (RFC 9113 §8.1). */
static int on_frame_send(nghttp2_session *ses, const nghttp2_frame *fr, void *arg)
{
    struct h2c_stream *s;

    (void)arg;
    if ((fr->hd.type == NGHTTP2_HEADERS || fr->hd.type == NGHTTP2_DATA) &&
        (fr->hd.flags & NGHTTP2_FLAG_END_STREAM) && (s = stream_of(ses, fr->hd.stream_id)) &&
        !s->req_end)
        nghttp2_submit_rst_stream(ses, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
    return 0;
}

static int on_stream_close(nghttp2_session *ses, int32_t id, uint32_t code, void *arg)
{
    struct h2c_stream *s = stream_of(ses, id);

    (void)code, (void)arg;
    if (s) {
        /* What it never gave back still counts against the connection's window. */
        if (s->unconsumed)
            nghttp2_session_consume_connection(ses, s->unconsumed);
        s->unconsumed = 0;
        h2c_stream_kill(s);
    }
    return 0;
}

void h2c_stream_callbacks(nghttp2_session_callbacks *cbs)
{
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
}

/* --- events --- */

static void stream_arm(struct h2c_stream *s)
{
    unsigned want = 0;

    if (s->fd < 0 || s->w.dead)
        return;
    if (req_pending(s))
        want |= EPOLLOUT;
    if (!s->resp_end && s->out_len - s->out_off < sizeof(s->out))
        want |= EPOLLIN;
    h2c_arm(s->c->f, &s->w, s->fd, &s->events, want);
}

void h2c_stream_on_event(struct h2c_stream *s, uint32_t events)
{
    if (events & EPOLLOUT)
        req_flush(s);
    if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
        resp_read(s);
    stream_arm(s);
}

void h2c_stream_kill(struct h2c_stream *s)
{
    struct h2c_conn *c = s->c;

    if (s->w.dead)
        return;
    if (s->fd >= 0)
        close(s->fd); /* the server sees its client gone, if it was not done */
    s->fd = -1;
    nghttp2_session_set_stream_user_data(c->s, s->id, NULL);
    if (s->prev)
        s->prev->next = s->next;
    else
        c->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    c->n_streams--;
    c->f->n_streams--;
    s->w.dead = true;
    s->next = c->f->dead_streams;
    c->f->dead_streams = s;
}

void h2c_stream_free(struct h2c_stream *s)
{
    free(s->method);
    free(s->path);
    free(s->authority);
    free(s->fields);
    free(s->head);
    free(s->body);
    free(s);
}
