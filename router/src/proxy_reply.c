/* The proxy's own answers on a client connection (proxy_types.h): a JSON body of ours, the
 * reference's {"detail"} refusals, a redirect; each counted by status, each write bounded by
 * the proxy timeout. Below the connection and the parts it calls (authorization, hooks). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "proxy_types.h"

static bool write_all(int fd, const char *buf, size_t len, uint64_t timeout_ms)
{
    uint64_t deadline = sbx_now_ms() + timeout_ms;

    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return false;
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        uint64_t now = sbx_now_ms();
        if (now >= deadline || poll(&pfd, 1, (int)(deadline - now)) == 0)
            return false;
    }
    return true;
}

/* Answers a body of ours (JSON), with the head fields extra ("" or lines ending "\r\n"), and
 * counts it. */
int proxy_reply(struct proxy_conn *c, unsigned status, const char *extra, const char *body,
                bool close)
{
    char head[600];
    size_t blen = strlen(body);
    char length[96] = "";
    int hlen;

    if (status != 204) /* which has no body, and says no length (RFC 9110 §8.6) */
        snprintf(length, sizeof(length),
                 "Content-Type: application/json\r\nContent-Length: %zu\r\n", blen);
    hlen = snprintf(head, sizeof(head), "HTTP/1.1 %u %s\r\n%s%s%s\r\n", status,
                    status < 300   ? "OK"
                    : status < 500 ? "Refused"
                                   : "Error",
                    length, extra, close ? "Connection: close\r\n" : "");
    if (hlen >= (int)sizeof(head))
        return -EINVAL;

    STAT_ADD(c->p, by_status[status / 100 % 6], 1);
    return write_all(c->cfd, head, (size_t)hlen, c->p->o.proxy_timeout_ms) &&
                   write_all(c->cfd, body, blen, c->p->o.proxy_timeout_ms)
               ? 0
               : -EPIPE;
}

int proxy_answer(struct proxy_conn *c, unsigned status, const char *msg, bool close)
{
    char body[600];
    size_t n = (size_t)snprintf(body, sizeof(body), "{\"detail\": \"");

    for (; *msg && n < sizeof(body) - 8; msg++) { /* a JSON string: quotes escaped, no controls */
        if (*msg == '"' || *msg == '\\')
            body[n++] = '\\';
        body[n++] = (unsigned char)*msg < 0x20 ? ' ' : *msg;
    }
    snprintf(body + n, sizeof(body) - n, "\"}\n");
    return proxy_reply(c, status, "", body, close);
}

int proxy_redirect(struct proxy_conn *c, const char *loc)
{
    static const char head[] = "HTTP/1.1 308 Permanent Redirect\r\nLocation: ";
    static const char tail[] = "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

    STAT_ADD(c->p, by_status[3], 1);
    return write_all(c->cfd, head, sizeof(head) - 1, c->p->o.proxy_timeout_ms) &&
                   write_all(c->cfd, loc, strlen(loc), c->p->o.proxy_timeout_ms) &&
                   write_all(c->cfd, tail, sizeof(tail) - 1, c->p->o.proxy_timeout_ms)
               ? 0
               : -EPIPE;
}
