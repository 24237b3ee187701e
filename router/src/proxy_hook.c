/* The proxy's side of a hook (proxy.h): a request the hook answers gets its body read whole,
 * bounded, and the hook's reply written; a request without X-Sandbox-ID may take its keys from
 * the hook. The proxy knows nothing else of what the hook serves. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cleanup.h"
#include "proxy_types.h"

/* Reads the rest of a body of len bytes, of which the buffer holds [head_len, rend), into a
 * string of its own; the client's buffer is left at the next request. */
static int read_body(struct proxy_conn *c, size_t head_len, size_t len, char **ret)
{
    struct pipe *u = &c->up;
    size_t have = u->rend - head_len, got;
    uint64_t deadline = sbx_now_ms() + c->p->o.head_timeout_ms;
    char *body = malloc(len + 1);

    if (!body)
        return -ENOMEM;
    if (have > len)
        have = len; /* a pipelined request follows */
    memcpy(body, u->buf + head_len, have);
    u->woff = u->wend = head_len + have; /* the buffer's part of the body is taken */
    for (got = have; got < len;) {
        struct pollfd pfd = {.fd = c->cfd, .events = POLLIN};
        uint64_t now = sbx_now_ms();
        if (now >= deadline || poll(&pfd, 1, (int)(deadline - now)) <= 0) {
            free(body);
            return -ETIMEDOUT;
        }
        ssize_t n = recv(c->cfd, body + got, len - got, 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
            free(body);
            return -EPIPE;
        }
        if (n > 0)
            got += (size_t)n;
    }
    body[len] = '\0';
    *ret = body;
    return 0;
}

/* Adds a piece of a chunked body to *body: its data, decoded in place, at most max in all;
 * returns how many bytes of the piece the body took, -EBADMSG or -EFBIG. */
static long take_chunks(struct sbx_h1_body *b, char *piece, size_t n, char *body, size_t *len,
                        size_t max, bool *done)
{
    size_t data;
    long used = sbx_h1_body_feed(b, piece, n, &data, done);

    if (used < 0)
        return -EBADMSG;
    if (data > max - *len)
        return -EFBIG;
    memcpy(body + *len, piece, data);
    *len += data;
    return used;
}

/* Reads a chunked body (the JavaScript SDK's fetch sends its JSON so), decoded, at most max
 * bytes of data, within the head timeout. What follows its last chunk in the buffer is left
 * for the next request; bytes read from the socket past it cannot be handed back, so *extra
 * says the connection must close after the answer. */
static int read_chunked(struct proxy_conn *c, struct sbx_h1_body *b, size_t head_len, size_t max,
                        char **ret, size_t *ret_len, bool *extra)
{
    struct pipe *u = &c->up;
    uint64_t deadline = sbx_now_ms() + c->p->o.head_timeout_ms;
    _cleanup_free_ char *body = malloc(max + 1);
    char piece[16384];
    size_t len = 0;
    bool done = false;
    long used;

    if (!body)
        return -ENOMEM;
    b->decode = true;
    used = take_chunks(b, u->buf + head_len, u->rend - head_len, body, &len, max, &done);
    if (used < 0)
        return (int)used;
    u->woff = u->wend = head_len + (size_t)used;
    while (!done) {
        struct pollfd pfd = {.fd = c->cfd, .events = POLLIN};
        uint64_t now = sbx_now_ms();
        ssize_t n;
        if (now >= deadline || poll(&pfd, 1, (int)(deadline - now)) <= 0)
            return -ETIMEDOUT;
        n = recv(c->cfd, piece, sizeof(piece), 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            return -EPIPE;
        if (n < 0)
            continue;
        if ((used = take_chunks(b, piece, (size_t)n, body, &len, max, &done)) < 0)
            return (int)used;
        *extra = *extra || used < n;
    }
    body[len] = '\0';
    *ret = TAKE_PTR(body);
    *ret_len = len;
    return 0;
}

/* The body of a request the hook answers, whole: Content-Length bytes, or chunks. */
static int hook_body(struct proxy_conn *c, const struct sbx_h1_msg *m, size_t head_len, char **body,
                     size_t *len, bool *extra)
{
    const struct sbx_proxy_hook *h = c->p->o.hook;
    struct sbx_h1_body b;

    if (sbx_h1_request_body(m, &b) < 0)
        return -EINVAL;
    if (b.kind == SBX_H1_BODY_CHUNKED)
        return read_chunked(c, &b, head_len, h->max_body, body, len, extra);
    *len = b.kind == SBX_H1_BODY_LENGTH ? (size_t)b.left : 0;
    if (b.kind == SBX_H1_BODY_LENGTH && b.left > h->max_body)
        return -EFBIG;
    return read_body(c, head_len, *len, body);
}

bool proxy_hook_serve(struct proxy_conn *c, const struct sbx_h1_msg *m, size_t head_len,
                      bool close_after)
{
    const struct sbx_proxy_hook *h = c->p->o.hook;
    struct sbx_proxy_reply r = {0};
    _cleanup_free_ char *body = NULL;
    size_t len = 0;
    bool extra = false;
    int rc;

    c->up.woff = c->up.wend = head_len;
    rc = hook_body(c, m, head_len, &body, &len, &extra);
    if (rc == -EINVAL)
        proxy_answer(c, 400, "A request body needs one Content-Length.", true);
    else if (rc == -EBADMSG)
        proxy_answer(c, 400, "Malformed chunked request body.", true);
    else if (rc == -EFBIG)
        proxy_answer(c, 413, "Request body too large.", true);
    else if (rc == -ETIMEDOUT)
        proxy_answer(c, 408, "Request body not received in time.", true);
    if (rc < 0)
        return false;
    close_after = close_after || extra;
    h->serve(h->arg, m, body, len, &r);
    rc = proxy_reply(c, r.status ? r.status : 500, r.extra, r.body ? r.body : "", close_after);
    free(r.body);
    return rc == 0 && !close_after;
}

int proxy_hook_route(struct proxy_conn *c, const struct sbx_h1_msg *m, struct sbx_preview *pv)
{
    const struct sbx_proxy_hook *h = c->p->o.hook;
    struct sbx_proxy_reply r = {0};
    int rc;

    if (!h || !h->route)
        return 0;
    rc = h->route(h->arg, m, pv, &r);
    if (rc < 0)
        proxy_reply(c, r.status ? r.status : 400, r.extra, r.body ? r.body : "", true);
    free(r.body);
    return rc;
}
