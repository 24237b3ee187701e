#define _GNU_SOURCE
#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "proxy_types.h"

#define THREAD_STACK (256 * 1024)

int sbx_proxy_new(struct sbx_proxy **ret, const struct sbx_proxy_opts *o, struct sbx_error *err)
{
    struct sbx_proxy *p = calloc(1, sizeof(*p));

    if (!p)
        return sbx_error_set(err, ENOMEM, "allocate the proxy");
    p->o = *o;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->gone, NULL);
    *ret = p;
    return 0;
}

static void conn_free(struct proxy_conn *c)
{
    if (c->cfd >= 0)
        close(c->cfd);
    if (c->ufd >= 0)
        close(c->ufd);
    if (c->kpipe[0] >= 0) {
        close(c->kpipe[0]);
        close(c->kpipe[1]);
    }
    free(c->up.buf);
    free(c->down.buf);
    free(c->up.pre);
    free(c->down.pre);
    free(c);
}

static void *conn_thread(void *arg)
{
    struct proxy_conn *c = arg;
    struct sbx_proxy *p = c->p;

    proxy_conn_serve(c);
    pthread_mutex_lock(&p->lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        p->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    p->nconns--;
    STAT_SUB(p, connections_open, 1);
    pthread_cond_broadcast(&p->gone);
    pthread_mutex_unlock(&p->lock);
    conn_free(c);
    return NULL;
}

static void peer_name(const struct sockaddr *sa, char *out, size_t size)
{
    const void *addr = NULL;

    if (sa && sa->sa_family == AF_INET)
        addr = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
    else if (sa && sa->sa_family == AF_INET6)
        addr = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    if (!addr || !inet_ntop(sa->sa_family, addr, out, (socklen_t)size))
        snprintf(out, size, "unknown");
    if (strncmp(out, "::ffff:", 7) == 0 && strchr(out, '.'))
        memmove(out, out + 7, strlen(out + 7) + 1); /* a v4 client of the dual-stack socket */
}

/* Refuses a connection beyond the limit: a 503 written without waiting, then closed. */
static void refuse_busy(int fd)
{
    static const char body[] = "{\"detail\": \"Too many connections; retry.\"}\n";
    char msg[256];
    int n = snprintf(msg, sizeof(msg),
                     "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\nRetry-After: 1\r\n\r\n%s",
                     sizeof(body) - 1, body);

    if (send(fd, msg, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
        log_debug("router: busy answer not sent: %s", strerror(errno));
    close(fd);
}

void sbx_proxy_add(struct sbx_proxy *p, int fd, const struct sockaddr *peer, socklen_t len,
                   bool tls)
{
    struct proxy_conn *c = calloc(1, sizeof(*c));
    pthread_attr_t attr;
    pthread_t tid;
    int one = 1, rc;

    (void)len;
    if (!c || !(c->up.buf = malloc(PROXY_BUF)) || !(c->down.buf = malloc(PROXY_BUF))) {
        if (c)
            free(c->up.buf);
        free(c);
        close(fd);
        return;
    }
    c->p = p;
    c->cfd = fd;
    c->ufd = -1;
    c->kpipe[0] = c->kpipe[1] = -1;
    c->tls = tls;
    peer_name(peer, c->peer, sizeof(c->peer));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* Every wait is poll's, under a deadline: splice and recv must never block (a TLS
     * connection's plaintext end comes blocking from socketpair). */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    pthread_mutex_lock(&p->lock);
    if (p->stopping || p->nconns >= p->o.max_connections) {
        pthread_mutex_unlock(&p->lock);
        c->cfd = -1;
        conn_free(c);
        refuse_busy(fd);
        return;
    }
    c->next = p->conns;
    if (p->conns)
        p->conns->prev = c;
    p->conns = c;
    p->nconns++;
    pthread_mutex_unlock(&p->lock);
    STAT_ADD(p, connections, 1);
    STAT_ADD(p, connections_open, 1);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, THREAD_STACK);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&tid, &attr, conn_thread, c);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        log_warn(rc, "router: no thread for a connection");
        shutdown(fd, SHUT_RDWR);
        conn_thread(c); /* unlinks and frees it */
    }
}

void sbx_proxy_stats(struct sbx_proxy *p, struct sbx_proxy_stats *s)
{
    uint64_t *dst = (uint64_t *)s, *src = (uint64_t *)&p->stats;

    for (size_t i = 0; i < sizeof(*s) / sizeof(uint64_t); i++)
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

/* Cuts connections: the idle ones only, or all but those waiting for a wake (the resolver's drain,
 * sbx_resolver_cancel, ends their wait with the same grace, and their answer must not be lost to
 * the cut: it is bounded by the proxy timeout). Called locked. */
static void cut(struct sbx_proxy *p, bool all)
{
    for (struct proxy_conn *c = p->conns; c; c = c->next) {
        if (__atomic_load_n(&c->waking, __ATOMIC_SEQ_CST))
            continue;
        if (all || __atomic_load_n(&c->idle, __ATOMIC_ACQUIRE))
            shutdown(c->cfd, SHUT_RDWR);
        if (all && c->ufd >= 0)
            shutdown(c->ufd, SHUT_RDWR);
    }
}

static bool wait_gone(struct sbx_proxy *p, uint64_t ms)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    while (p->nconns > 0)
        if (pthread_cond_timedwait(&p->gone, &p->lock, &ts) == ETIMEDOUT)
            return p->nconns == 0;
    return true;
}

void sbx_proxy_shutdown(struct sbx_proxy *p, uint64_t grace_ms)
{
    pthread_mutex_lock(&p->lock);
    if (p->stopped) {
        pthread_mutex_unlock(&p->lock);
        return;
    }
    __atomic_store_n(&p->stopping, true, __ATOMIC_RELEASE);
    cut(p, false);
    /* A connection turning idle after this sees stopping and closes by itself. */
    if (!wait_gone(p, grace_ms)) {
        log_info("router: cutting %u HTTP connections still open after the grace", p->nconns);
        cut(p, true);
        while (p->nconns > 0)
            pthread_cond_wait(&p->gone, &p->lock);
    }
    p->stopped = true;
    pthread_mutex_unlock(&p->lock);
}

void sbx_proxy_free(struct sbx_proxy *p)
{
    if (!p)
        return;
    sbx_proxy_shutdown(p, 0);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->gone);
    free(p);
}
