#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include "proxy_types.h"

#define SPLICE_PIPE (1 << 20) /* asked of the kernel; it may give less */

/* The connection's kernel pipe, made on first use. */
static int pipe_of(struct proxy_conn *c)
{
    if (c->kpipe[0] >= 0)
        return 0;
    if (pipe2(c->kpipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return -errno;
    fcntl(c->kpipe[1], F_SETPIPE_SZ, SPLICE_PIPE); /* best effort: 64 KiB otherwise */
    return 0;
}

/* Moves what it can of a Content-Length body from `from` to `to` through the kernel pipe, never
 * into our buffers: 1 on progress, 0 when it must wait (the events are added), -errno; *eof when
 * `from` closed before the body was whole. */
static int move(struct proxy_conn *c, int from, int to, struct sbx_h1_body *b, short *from_ev,
                short *to_ev, bool *eof, uint64_t *bytes)
{
    int progress = 0;

    if (b->left > c->kheld) {
        ssize_t n = splice(from, NULL, c->kpipe[1], NULL, (size_t)(b->left - c->kheld),
                           SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n > 0) {
            c->kheld += (size_t)n;
            progress = 1;
        } else if (n == 0) {
            *eof = true;
            return 1;
        } else if (errno == EAGAIN) {
            /* Nothing to read, or the pipe is full: only an empty pipe waits for `from` (a full
             * one waits for `to` below, else a readable `from` would wake us for nothing). */
            if (c->kheld == 0)
                *from_ev |= POLLIN;
        } else if (errno != EINTR) {
            return -errno;
        }
    }
    if (c->kheld > 0) {
        ssize_t n =
            splice(c->kpipe[0], NULL, to, NULL, c->kheld, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n > 0) {
            c->kheld -= (size_t)n;
            b->left -= (uint64_t)n;
            *bytes += (uint64_t)n;
            progress = 1;
        } else if (n < 0 && errno == EAGAIN) {
            *to_ev |= POLLOUT;
        } else if (n < 0 && errno != EINTR) {
            return -errno;
        }
    }
    return progress;
}

/* Whether a direction's body goes through the kernel pipe: a Content-Length body with nothing
 * of it in our buffer (what came with the head is written first). Once it starts, it stays until
 * the body is whole; one direction at a time holds the pipe. */
static bool splices(const struct pipe *p, const struct sbx_h1_body *b, bool active)
{
    if (active)
        return true;
    return b->kind == SBX_H1_BODY_LENGTH && !b->decode && b->left > 0 && p->pre_off == p->pre_len &&
           p->woff == p->wend && p->wend == p->rend;
}

int proxy_splice(struct proxy_conn *c, struct exchange *x, short *cfd_ev, short *ufd_ev)
{
    uint64_t up = 0, down = 0;
    bool eof = false;
    int rc = 0, r;

    if (x->resp_state == EX_BODY && !x->splice_up &&
        (x->splice_down = splices(&c->down, &x->resp, x->splice_down))) {
        if ((r = pipe_of(c)) < 0 ||
            (r = move(c, c->ufd, c->cfd, &x->resp, ufd_ev, cfd_ev, &eof, &down)) < 0)
            return -1; /* either side failed mid-body: the client sees it cut */
        if (eof)
            return -1;
        rc |= r;
        if (x->resp.left == 0) {
            x->splice_down = false;
            x->resp_state = EX_DONE;
        }
    } else if (!x->req_done && !x->splice_down && x->resp_state != EX_TUNNEL &&
               (x->splice_up = splices(&c->up, &x->req, x->splice_up))) {
        if ((r = pipe_of(c)) < 0 ||
            (r = move(c, c->cfd, c->ufd, &x->req, cfd_ev, ufd_ev, &eof, &up)) < 0)
            return -1;
        if (eof)
            return -1; /* the client went away mid-upload */
        rc |= r;
        if (x->req.left == 0) {
            x->splice_up = false;
            x->req_done = true;
        }
    }
    STAT_ADD(c->p, bytes_up, up);
    STAT_ADD(c->p, bytes_down, down);
    return rc;
}
