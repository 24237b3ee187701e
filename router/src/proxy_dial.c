#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "proxy_types.h"

/* Splits "host:port" or "[v6]:port" in place. */
static int split_host(char *s, char **host, char **port)
{
    char *colon;

    if (s[0] == '[') {
        char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return -EINVAL;
        *close = '\0';
        *host = s + 1;
        *port = close + 2;
        return 0;
    }
    if (!(colon = strrchr(s, ':')))
        return -EINVAL;
    *colon = '\0';
    *host = s;
    *port = colon + 1;
    return 0;
}

static int connect_one(const struct addrinfo *ai, uint64_t timeout_ms)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1, soerr = 0;
    socklen_t len = sizeof(soerr);
    struct pollfd pfd;

    if (fd < 0)
        return -errno;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
        return fd;
    if (errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        return -e;
    }
    pfd = (struct pollfd){.fd = fd, .events = POLLOUT};
    if (poll(&pfd, 1, (int)timeout_ms) <= 0) {
        close(fd);
        return -ETIMEDOUT;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0 || soerr) {
        close(fd);
        return soerr ? -soerr : -EIO;
    }
    return fd;
}

/* One attempt over every address the name has. */
static int dial_once(const char *target, uint64_t timeout_ms, struct sbx_error *err)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *res;
    char copy[PROXY_HOST_MAX], *host, *port;
    int rc, fd = -EHOSTUNREACH;

    snprintf(copy, sizeof(copy), "%s", target);
    if (split_host(copy, &host, &port) < 0)
        return sbx_error_set(err, EINVAL, "upstream address %s has no port", target);
    if ((rc = getaddrinfo(host, port, &hints, &res)) != 0)
        return sbx_error_set(err, EHOSTUNREACH, "resolve %s: %s", host, gai_strerror(rc));
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
        if ((fd = connect_one(ai, timeout_ms)) >= 0)
            break;
    freeaddrinfo(res);
    if (fd < 0)
        return sbx_error_set(err, -fd, "connect to %s: %s", target, strerror(-fd));
    return fd;
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

int proxy_dial(struct sbx_proxy *p, const char *host, struct sbx_error *err)
{
    uint64_t delay = p->o.retry_initial_ms;
    int fd;

    for (unsigned attempt = 0;; attempt++) {
        STAT_ADD(p, upstream_dials, 1);
        if ((fd = dial_once(host, p->o.dial_timeout_ms, err)) >= 0 || fd == -EINVAL)
            return fd;
        if (attempt >= p->o.max_retries || __atomic_load_n(&p->stopping, __ATOMIC_ACQUIRE))
            return fd;
        STAT_ADD(p, retries, 1);
        sleep_ms(delay);
        delay = delay * 2 > p->o.retry_max_ms ? p->o.retry_max_ms : delay * 2;
    }
}
