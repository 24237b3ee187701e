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

bool proxy_hook_serve(struct proxy_conn *c, const struct sbx_h1_msg *m, size_t head_len,
                      bool close_after)
{
    const struct sbx_proxy_hook *h = c->p->o.hook;
    struct sbx_h1_body b;
    struct sbx_proxy_reply r = {0};
    _cleanup_free_ char *body = NULL;
    int rc;

    c->up.woff = c->up.wend = head_len;
    if (sbx_h1_request_body(m, &b) < 0 || b.kind == SBX_H1_BODY_CHUNKED) {
        proxy_answer(c, b.kind == SBX_H1_BODY_CHUNKED ? 411 : 400,
                     "A request body needs one Content-Length.", true);
        return false;
    }
    if (b.kind == SBX_H1_BODY_LENGTH && b.left > h->max_body) {
        proxy_answer(c, 413, "Request body too large.", true);
        return false;
    }
    rc = read_body(c, head_len, b.kind == SBX_H1_BODY_LENGTH ? (size_t)b.left : 0, &body);
    if (rc == -ETIMEDOUT)
        proxy_answer(c, 408, "Request body not received in time.", true);
    if (rc < 0)
        return false;
    h->serve(h->arg, m, body, b.kind == SBX_H1_BODY_LENGTH ? (size_t)b.left : 0, &r);
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
