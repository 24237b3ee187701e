#define _GNU_SOURCE
#include "listener.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "clock.h"
#include "listen.h"
#include "log.h"
#include "parse.h"

/* RFC 9113 §3.4: every HTTP/2 connection (h2c with prior knowledge, as gRPC clients speak it)
 * opens with these 24 bytes. */
static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
#define PREFACE_LEN (sizeof(preface) - 1)

struct pending {
    int fd;
    uint64_t deadline_ms;
    struct sockaddr_storage peer;
    socklen_t peer_len;
};

struct sbx_listener {
    struct sbx_listener_opts o;
    int lfd, efd, wake;
    pthread_t thread;
    bool started;
    struct pending *p; /* waiting for their first bytes; fd -1: a free slot */
    unsigned n;        /* slots in use at the front: compacted as they go */
    uint64_t h2, h1, dropped;
    pthread_mutex_t lock; /* the counts */
};

static void count(struct sbx_listener *l, uint64_t *c)
{
    pthread_mutex_lock(&l->lock);
    (*c)++;
    pthread_mutex_unlock(&l->lock);
}

static void drop(struct sbx_listener *l, unsigned i)
{
    epoll_ctl(l->efd, EPOLL_CTL_DEL, l->p[i].fd, NULL);
    close(l->p[i].fd);
    count(l, &l->dropped);
    l->p[i] = l->p[--l->n];
}

/* Hands the connection over once its first bytes tell; false while they do not yet. */
static bool sort(struct sbx_listener *l, unsigned i)
{
    char buf[PREFACE_LEN];
    ssize_t n = recv(l->p[i].fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
    struct pending p = l->p[i];

    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return false;
    if (n <= 0) {
        drop(l, i);
        return true;
    }
    if ((size_t)n < PREFACE_LEN && memcmp(buf, preface, (size_t)n) == 0)
        return false; /* the start of the preface, so far */
    epoll_ctl(l->efd, EPOLL_CTL_DEL, p.fd, NULL);
    l->p[i] = l->p[--l->n];
    if ((size_t)n == PREFACE_LEN && memcmp(buf, preface, PREFACE_LEN) == 0) {
        count(l, &l->h2);
        l->o.h2(l->o.arg, p.fd);
    } else {
        count(l, &l->h1);
        l->o.h1(l->o.arg, p.fd, (struct sockaddr *)&p.peer, p.peer_len);
    }
    return true;
}

static void accept_all(struct sbx_listener *l)
{
    int one = 1;

    for (;;) {
        struct pending p = {.peer_len = sizeof(p.peer)};
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP};
        p.fd =
            accept4(l->lfd, (struct sockaddr *)&p.peer, &p.peer_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (p.fd < 0)
            return; /* EAGAIN, or a connection gone before we took it */
        /* Small frames go at once: gRPC C core sets this on the sockets it accepts itself, not
         * on those handed to it (a unary call through the router waited 40 ms for the client's
         * delayed ACK), and libmicrohttpd leaves it as it finds it. */
        (void)setsockopt(p.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (l->n == l->o.max_pending) {
            unsigned oldest = 0;
            for (unsigned i = 1; i < l->n; i++)
                if (l->p[i].deadline_ms < l->p[oldest].deadline_ms)
                    oldest = i;
            drop(l, oldest);
        }
        p.deadline_ms = sbx_now_ms() + l->o.head_timeout_ms;
        ev.data.fd = p.fd;
        if (epoll_ctl(l->efd, EPOLL_CTL_ADD, p.fd, &ev) < 0) {
            close(p.fd);
            continue;
        }
        l->p[l->n++] = p;
    }
}

static void expire(struct sbx_listener *l)
{
    uint64_t now = sbx_now_ms();

    for (unsigned i = 0; i < l->n;)
        if (l->p[i].deadline_ms <= now)
            drop(l, i);
        else
            i++;
}

static void *run(void *arg)
{
    struct sbx_listener *l = arg;
    struct epoll_event ev[64];

    for (;;) {
        int n = epoll_wait(l->efd, ev, 64, 250);
        for (int k = 0; k < n; k++) {
            int fd = ev[k].data.fd;
            if (fd == l->wake)
                return NULL;
            if (fd == l->lfd) {
                accept_all(l);
                continue;
            }
            for (unsigned i = 0; i < l->n; i++)
                if (l->p[i].fd == fd) {
                    sort(l, i);
                    break;
                }
        }
        expire(l);
    }
}

int sbx_listener_parse_addr(const char *addr, char *host, size_t size, int *port,
                            struct sbx_error *err)
{
    const char *colon = strrchr(addr, ':');
    size_t hl;
    long long p;

    if (!colon || sbx_parse_int(colon + 1, 0, 65535, &p) < 0)
        return sbx_error_set(err, EINVAL, "address '%s' is not host:port or :port", addr);
    hl = (size_t)(colon - addr);
    if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']') {
        addr++;
        hl -= 2;
    }
    if (hl >= size)
        return sbx_error_set(err, EINVAL, "address '%s' is too long", addr);
    memcpy(host, addr, hl);
    host[hl] = '\0';
    *port = (int)p;
    return 0;
}

int sbx_listener_start(struct sbx_listener **ret, const struct sbx_listener_opts *o,
                       struct sbx_error *err)
{
    struct sbx_listener *l = calloc(1, sizeof(*l));
    struct epoll_event ev = {.events = EPOLLIN};
    const char *families;
    int port;

    if (!l || !(l->p = calloc(o->max_pending ? o->max_pending : 1, sizeof(*l->p)))) {
        free(l);
        return sbx_error_set(err, ENOMEM, "allocate listener");
    }
    l->o = *o;
    if (!l->o.max_pending)
        l->o.max_pending = 1;
    l->lfd = l->efd = l->wake = -1;
    pthread_mutex_init(&l->lock, NULL);
    port = sbx_listen(o->host, o->port, (int)((o->head_timeout_ms + 999) / 1000), &l->lfd,
                      &families, err);
    if (port < 0) {
        sbx_listener_free(l);
        return port;
    }
    l->efd = epoll_create1(EPOLL_CLOEXEC);
    l->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->efd < 0 || l->wake < 0) {
        sbx_listener_free(l);
        return sbx_error_set(err, errno, "epoll");
    }
    ev.data.fd = l->lfd;
    epoll_ctl(l->efd, EPOLL_CTL_ADD, l->lfd, &ev);
    ev.data.fd = l->wake;
    epoll_ctl(l->efd, EPOLL_CTL_ADD, l->wake, &ev);
    if (pthread_create(&l->thread, NULL, run, l) != 0) {
        sbx_listener_free(l);
        return sbx_error_set(err, EAGAIN, "start listener thread");
    }
    l->started = true;
    log_info("router: listening on %s port %d (%s)", o->host ? o->host : "every address", port,
             families);
    *ret = l;
    return port;
}

void sbx_listener_counts(struct sbx_listener *l, uint64_t *h2, uint64_t *h1, uint64_t *dropped)
{
    pthread_mutex_lock(&l->lock);
    *h2 = l->h2;
    *h1 = l->h1;
    *dropped = l->dropped;
    pthread_mutex_unlock(&l->lock);
}

void sbx_listener_stop(struct sbx_listener *l)
{
    if (!l)
        return;
    if (l->started) {
        uint64_t one = 1;
        (void)!write(l->wake, &one, sizeof(one));
        pthread_join(l->thread, NULL);
        l->started = false;
    }
    for (unsigned i = 0; i < l->n; i++)
        close(l->p[i].fd);
    l->n = 0;
    sbx_closep(&l->lfd);
    sbx_closep(&l->efd);
    sbx_closep(&l->wake);
}

void sbx_listener_free(struct sbx_listener *l)
{
    if (!l)
        return;
    sbx_listener_stop(l);
    pthread_mutex_destroy(&l->lock);
    free(l->p);
    free(l);
}
