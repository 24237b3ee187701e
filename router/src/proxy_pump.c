#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "proxy_types.h"

#define DONE_CLOSE 1 /* proxy_exchange: the client connection ends quietly */

static bool pipe_pending(const struct pipe *p)
{
    return p->pre_off < p->pre_len || p->woff < p->wend;
}

/* Writes what the pipe has ready: 1 on progress, 0 when the socket is full, -errno. */
static int pipe_write(int fd, struct pipe *p, uint64_t *bytes)
{
    bool pre = p->pre_off < p->pre_len;
    const char *src = pre ? p->pre + p->pre_off : p->buf + p->woff;
    size_t len = pre ? p->pre_len - p->pre_off : p->wend - p->woff;
    ssize_t n;

    if (len == 0)
        return 0;
    n = send(fd, src, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -errno;
    if (pre) {
        p->pre_off += (size_t)n;
    } else {
        p->woff += (size_t)n;
        *bytes += (uint64_t)n;
    }
    if (p->woff == p->wend && p->woff > 0) { /* all written: keep the unframed bytes at 0 */
        memmove(p->buf, p->buf + p->wend, p->rend - p->wend);
        p->rend -= p->wend;
        p->woff = p->wend = 0;
    }
    return 1;
}

/* Reads into the pipe's free room: 1 on progress, 0 when nothing came, -errno; eof is set by a
 * clean end. */
static int pipe_read(int fd, struct pipe *p)
{
    ssize_t n;

    if (p->rend == PROXY_BUF || p->eof)
        return 0;
    n = recv(fd, p->buf + p->rend, PROXY_BUF - p->rend, MSG_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -errno;
    if (n == 0)
        p->eof = true;
    p->rend += (size_t)n;
    return 1;
}

/* Frames the request body's bytes the client sent: -EBADMSG for a malformed one. */
static int frame_request(struct proxy_conn *c, struct exchange *x)
{
    struct pipe *u = &c->up;
    size_t out;
    bool done;
    long n;

    if (x->req_done || u->rend == u->wend)
        return 0;
    if ((n = sbx_h1_body_feed(&x->req, u->buf + u->wend, u->rend - u->wend, &out, &done)) < 0)
        return (int)n;
    u->wend += (size_t)n;
    x->req_done = done;
    return 0;
}

static bool drop_response_field(const struct sbx_h1_msg *m, const struct sbx_h1_field *f,
                                bool decode)
{
    if (f->name_len == 17 && strncasecmp(f->name, "Transfer-Encoding", 17) == 0)
        return decode;
    return sbx_h1_hop_by_hop(m, f);
}

/* The response head as the client gets it. */
static int build_response(struct proxy_conn *c, struct exchange *x, const struct sbx_h1_msg *m,
                          const char *head, size_t head_len)
{
    size_t size = head_len + 256 + (x->az ? strlen(x->az->set_cookie) : 0), n = 0;
    const char *eol = memchr(head, '\r', head_len);
    char *out = malloc(size);

#define PUT(...) n += (size_t)snprintf(out + n, size - n, __VA_ARGS__)
    if (!out)
        return -ENOMEM;
    PUT("HTTP/1.1 %.*s\r\n", (int)(eol - head - 9), head + 9); /* the code and its reason */
    for (unsigned i = 0; i < m->nfields; i++) {
        const struct sbx_h1_field *f = &m->fields[i];
        if (!drop_response_field(m, f, x->resp.decode))
            PUT("%.*s: %.*s\r\n", (int)f->name_len, f->name, (int)f->value_len, f->value);
    }
    if (m->status == 101) {
        const struct sbx_h1_field *f = sbx_h1_get(m, "Upgrade");
        PUT("Connection: Upgrade\r\nUpgrade: %.*s\r\n", f ? (int)f->value_len : 0,
            f ? f->value : "");
    } else if (m->status >= 200 && x->close_after) {
        PUT("Connection: close\r\n");
    }
    if (x->az && x->az->set_cookie[0]) /* the token came by query: later requests by cookie */
        PUT("Set-Cookie: %s\r\n", x->az->set_cookie);
    PUT("\r\n");
#undef PUT
    free(c->down.pre);
    c->down.pre = out;
    c->down.pre_len = n < size ? n : size - 1;
    c->down.pre_off = 0;
    return 0;
}

/* Decides what follows a response head. */
static int response_head(struct proxy_conn *c, struct exchange *x, const struct sbx_h1_msg *m)
{
    if (m->status == 101) {
        if (!x->upgrade)
            return -EPROTO;
        x->resp_state = EX_TUNNEL;
        x->close_after = true;
        STAT_ADD(c->p, upgrades, 1);
        STAT_ADD(c->p, tunnels_open, 1);
        return 0;
    }
    if (m->status < 200)
        return 0; /* interim: the final head follows */
    if (sbx_h1_response_body(m, x->head_request, &x->resp) < 0)
        return -EPROTO;
    x->status = m->status;
    x->keep_upstream = m->minor == 1 && !sbx_h1_has_token(m, "Connection", "close") &&
                       x->resp.kind != SBX_H1_BODY_CLOSE;
    if (x->resp.kind == SBX_H1_BODY_CLOSE)
        x->close_after = true;
    if (x->client_http10 && x->resp.kind == SBX_H1_BODY_CHUNKED)
        x->resp.decode = true; /* an HTTP/1.0 client reads the data until the close */
    x->resp_state = x->resp.kind == SBX_H1_BODY_NONE ? EX_DONE : EX_BODY;
    STAT_ADD(c->p, by_status[m->status / 100 % 6], 1);
    return 0;
}

/* Takes a response head from the upstream's bytes, once the last one went out. */
static int frame_response_head(struct proxy_conn *c, struct exchange *x)
{
    struct pipe *d = &c->down;
    struct sbx_h1_msg *m;
    size_t end;
    int rc;

    if (d->pre_off < d->pre_len || d->rend == d->wend)
        return 0;
    if (!(end = sbx_http_head_end(d->buf + d->wend, d->rend - d->wend)))
        return d->rend == PROXY_BUF ? -EPROTO : 0;
    if (!(m = malloc(sizeof(*m))))
        return -ENOMEM;
    rc = sbx_h1_parse_response(d->buf + d->wend, end, m) ? response_head(c, x, m) : -EPROTO;
    if (rc == 0 && !(x->client_http10 && m->status < 200 && m->status != 101))
        rc = build_response(c, x, m, d->buf + d->wend, end);
    free(m);
    d->wend += end;
    d->woff = d->wend; /* the head as it came is not relayed */
    return rc;
}

static int frame_response_body(struct proxy_conn *c, struct exchange *x)
{
    struct pipe *d = &c->down;
    size_t avail = d->rend - d->wend, out;
    bool done;
    long n;

    if (avail == 0)
        return 0;
    if ((n = sbx_h1_body_feed(&x->resp, d->buf + d->wend, avail, &out, &done)) < 0)
        return (int)n;
    if (x->resp.decode)
        memmove(d->buf + d->wend + out, d->buf + d->wend + n, avail - (size_t)n);
    d->rend -= (size_t)n - out;
    d->wend += out;
    if (done) {
        x->resp_state = EX_DONE;
        if (d->rend > d->wend) { /* bytes past the response: the upstream is not to be trusted */
            d->rend = d->wend;
            x->keep_upstream = false;
        }
    }
    return 0;
}

static int frame(struct proxy_conn *c, struct exchange *x)
{
    int rc;

    if (x->resp_state == EX_TUNNEL) {
        c->up.wend = c->up.rend;
        c->down.wend = c->down.rend;
        return 0;
    }
    if ((rc = frame_request(c, x)) < 0)
        return rc;
    if (x->resp_state == EX_HEAD && (rc = frame_response_head(c, x)) < 0)
        return rc;
    if (x->resp_state == EX_TUNNEL) {
        c->up.wend = c->up.rend; /* what the client sent after its request is the tunnel's */
        return 0;
    }
    if (x->resp_state == EX_BODY)
        return frame_response_body(c, x);
    return 0;
}

/* Whether the exchange is over: >0 done (DONE_CLOSE or 2 for keep-alive), 0 not yet. */
static int finished(struct proxy_conn *c, struct exchange *x)
{
    if (x->resp_state == EX_TUNNEL)
        return c->up.eof && c->down.eof && !pipe_pending(&c->up) && !pipe_pending(&c->down)
                   ? DONE_CLOSE
                   : 0;
    if (x->resp_state != EX_DONE || pipe_pending(&c->down))
        return 0;
    if (!x->req_done) { /* answered before the request was whole: the rest cannot be framed */
        x->keep_upstream = false;
        return DONE_CLOSE;
    }
    if (pipe_pending(&c->up))
        return 0;
    return x->close_after ? DONE_CLOSE : 2;
}

/* A tunnel's half-close: once a side said all and it went out, the other side is told. */
static void half_close(struct pipe *p, int dst)
{
    if (p->eof && !p->shut && !pipe_pending(p)) {
        shutdown(dst, SHUT_WR);
        p->shut = true;
    }
}

/* The poll timeout until the exchange's deadline: -1 for none (a tunnel), 0 once it passed. */
static int timeout_of(struct proxy_conn *c, struct exchange *x, uint64_t last, uint64_t sent)
{
    uint64_t now = sbx_now_ms(), deadline;

    if (x->resp_state == EX_TUNNEL)
        return -1;
    if (x->resp_state == EX_HEAD && x->req_done && !pipe_pending(&c->up))
        deadline = sent + x->head_wait_ms;
    else
        deadline = last + c->p->o.proxy_timeout_ms;
    return deadline > now ? (int)(deadline - now) : 0;
}

/* What a socket error means at this point of the exchange. */
static int failed(struct exchange *x, int err)
{
    (void)err;
    if (x->resp_state == EX_HEAD && x->status == 0)
        return -ECONNRESET; /* nothing reached the client: the caller answers (or retries) */
    return DONE_CLOSE;
}

static int step(struct proxy_conn *c, struct exchange *x, struct pollfd *pfd, bool *progress)
{
    uint64_t up_bytes = 0, down_bytes = 0;
    int rc;

    if ((pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) && !x->splice_up) {
        if ((rc = pipe_read(c->cfd, &c->up)) < 0)
            return DONE_CLOSE;
        *progress |= rc > 0;
        if (c->up.eof && x->resp_state != EX_TUNNEL)
            return DONE_CLOSE; /* the client went away */
    }
    if ((pfd[1].revents & (POLLIN | POLLHUP | POLLERR)) && !x->splice_down) {
        size_t before = c->down.rend;
        if ((rc = pipe_read(c->ufd, &c->down)) < 0)
            return failed(x, rc);
        x->resp_bytes += c->down.rend - before;
        *progress |= rc > 0;
    }
    if ((rc = pipe_write(c->ufd, &c->up, &up_bytes)) < 0)
        return failed(x, rc);
    *progress |= rc > 0;
    if ((rc = pipe_write(c->cfd, &c->down, &down_bytes)) < 0)
        return DONE_CLOSE;
    *progress |= rc > 0;
    STAT_ADD(c->p, bytes_up, up_bytes);
    STAT_ADD(c->p, bytes_down, down_bytes);
    return 0;
}

/* After the upstream's end: what it means for the response. */
static int upstream_ended(struct exchange *x)
{
    if (x->resp_state == EX_TUNNEL)
        return 0;
    if (x->resp_state == EX_BODY && x->resp.kind == SBX_H1_BODY_CLOSE) {
        x->resp_state = EX_DONE;
        x->keep_upstream = false;
        return 0;
    }
    if (x->resp_state == EX_DONE)
        return 0;
    return failed(x, -ECONNRESET);
}

int proxy_exchange(struct proxy_conn *c, struct exchange *x)
{
    uint64_t last = sbx_now_ms(), sent = 0;
    int rc;

    c->down.woff = c->down.wend = c->down.rend = 0;
    c->down.eof = c->down.shut = c->up.shut = false;
    c->down.pre_len = c->down.pre_off = 0;
    x->splice_up = x->splice_down = false;
    if (c->kheld) /* bytes left in the pipe by a cut exchange: the connection cannot go on */
        return -EPROTO;
    x->resp_state = EX_HEAD;
    x->resp_bytes = 0;
    x->status = 0;
    for (;;) {
        bool progress = false;
        struct pollfd pfd[2] = {{.fd = c->cfd}, {.fd = c->ufd}};

        if ((rc = frame(c, x)) < 0)
            return x->status ? DONE_CLOSE : rc == -EBADMSG ? -EBADMSG : -EPROTO;
        if (c->down.eof && (rc = upstream_ended(x)) != 0)
            return rc;
        if ((rc = finished(c, x)) > 0)
            return rc == 2 ? 0 : DONE_CLOSE;
        if (x->resp_state == EX_TUNNEL) {
            half_close(&c->up, c->ufd);
            half_close(&c->down, c->cfd);
        }
        if ((rc = proxy_splice(c, x, &pfd[0].events, &pfd[1].events)) < 0)
            return DONE_CLOSE;
        if (rc > 0) {
            last = sbx_now_ms();
            continue;
        }
        if (!sent && x->req_done && !pipe_pending(&c->up))
            sent = sbx_now_ms();
        if (c->up.rend < PROXY_BUF && !c->up.eof && !x->splice_up)
            pfd[0].events |= POLLIN;
        if (pipe_pending(&c->down))
            pfd[0].events |= POLLOUT;
        if (c->down.rend < PROXY_BUF && !c->down.eof && x->resp_state != EX_DONE && !x->splice_down)
            pfd[1].events |= POLLIN;
        if (pipe_pending(&c->up))
            pfd[1].events |= POLLOUT;
        int wait = timeout_of(c, x, last, sent);
        /* The deadline holds even when a side keeps waking us without progress. */
        rc = wait == 0 ? 0 : poll(pfd, 2, wait);
        if (rc == 0)
            return x->resp_state == EX_HEAD && !x->status ? -ETIMEDOUT : DONE_CLOSE;
        if (rc < 0 && errno != EINTR)
            return DONE_CLOSE;
        if (rc > 0 && (rc = step(c, x, pfd, &progress)) != 0)
            return rc;
        if (progress)
            last = sbx_now_ms();
    }
}
