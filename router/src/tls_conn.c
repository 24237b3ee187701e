#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "tls_internal.h"

#define TLS_BUF      (16 * 1024) /* a TLS record's worth */
#define THREAD_STACK (256 * 1024)

/* One direction of the pump. */
struct half {
    char buf[TLS_BUF];
    size_t off, len;
    bool eof, shut;
};

/* The handshake, non-blocking under a deadline: 0, or -1 when it failed. */
static int handshake(SSL *ssl, int fd, uint64_t timeout_ms)
{
    uint64_t deadline = sbx_now_ms() + timeout_ms;

    for (;;) {
        int rc = SSL_accept(ssl), e;
        struct pollfd pfd = {.fd = fd};
        uint64_t now = sbx_now_ms();
        if (rc == 1)
            return 0;
        e = SSL_get_error(ssl, rc);
        if (e == SSL_ERROR_WANT_READ)
            pfd.events = POLLIN;
        else if (e == SSL_ERROR_WANT_WRITE)
            pfd.events = POLLOUT;
        else
            return -1;
        if (now >= deadline || poll(&pfd, 1, (int)(deadline - now)) <= 0)
            return -1;
    }
}

/* What an SSL call that did not complete waits for; false when it failed for good. */
static bool ssl_wait(SSL *ssl, int rc, short *tls_ev)
{
    switch (SSL_get_error(ssl, rc)) {
    case SSL_ERROR_WANT_READ:
        *tls_ev |= POLLIN;
        return true;
    case SSL_ERROR_WANT_WRITE:
        *tls_ev |= POLLOUT;
        return true;
    default:
        return false;
    }
}

/* TLS to plaintext: reads a record when the buffer is empty, writes what it holds. 1 on
 * progress, 0 when it must wait (the events are added), -1 on a hard error. */
static int tls_to_plain(SSL *ssl, int plain, struct half *h, short *tls_ev, short *plain_ev)
{
    int progress = 0;

    if (h->len == h->off && !h->eof) {
        int n = SSL_read(ssl, h->buf, sizeof(h->buf));
        h->off = 0;
        h->len = n > 0 ? (size_t)n : 0;
        if (n > 0 || !ssl_wait(ssl, n, tls_ev)) {
            h->eof = n <= 0; /* close_notify, or the peer gone */
            progress = 1;
        }
    }
    if (h->off < h->len) {
        ssize_t n = send(plain, h->buf + h->off, h->len - h->off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        if (n > 0) {
            h->off += (size_t)n;
            progress = 1;
        } else {
            *plain_ev |= POLLOUT;
        }
    }
    if (h->eof && h->off == h->len && !h->shut) {
        shutdown(plain, SHUT_WR);
        h->shut = true;
        progress = 1;
    }
    return progress;
}

/* Plaintext to TLS, the other way. */
static int plain_to_tls(SSL *ssl, int plain, struct half *h, short *tls_ev, short *plain_ev)
{
    int progress = 0;

    if (h->len == h->off && !h->eof) {
        ssize_t n = recv(plain, h->buf, sizeof(h->buf), MSG_DONTWAIT);
        h->off = 0;
        h->len = n > 0 ? (size_t)n : 0;
        if (n >= 0 || (errno != EAGAIN && errno != EINTR)) {
            h->eof = n <= 0;
            progress = 1;
        } else {
            *plain_ev |= POLLIN;
        }
    }
    if (h->off < h->len) {
        int n = SSL_write(ssl, h->buf + h->off, (int)(h->len - h->off));
        if (n > 0) {
            h->off += (size_t)n;
            progress = 1;
        } else if (!ssl_wait(ssl, n, tls_ev)) {
            return -1;
        }
    }
    if (h->eof && h->off == h->len && !h->shut) {
        SSL_shutdown(ssl); /* close_notify: what the sandbox sent is whole */
        h->shut = true;
        progress = 1;
    }
    return progress;
}

/* The plaintext's other end to the relay (h2) or the proxy. */
static void hand_over(struct tls_conn *c, int fd, bool h2)
{
    if (h2) {
        /* gRPC C core reads what it is given without waiting first: a blocking fd would hold one
         * of its pollers in recvmsg until the client spoke again (the plaintext port's are
         * non-blocking from accept4). */
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        c->t->o.h2(c->t->o.arg, fd);
    } else {
        c->t->o.h1(c->t->o.arg, fd, (struct sockaddr *)&c->peer, c->peer_len);
    }
}

/* Carries bytes both ways until both sides said all, or either failed. Once the plaintext side
 * (the proxy, the relay) has closed, a client that neither sends nor closes gets 5 s. */
static void pump(SSL *ssl, int fd, int plain)
{
    struct half *in = calloc(1, sizeof(*in)), *out = calloc(1, sizeof(*out));

    while (in && out && !(in->shut && out->shut)) {
        short tls_ev = 0, plain_ev = 0;
        int a = tls_to_plain(ssl, plain, in, &tls_ev, &plain_ev);
        int b = plain_to_tls(ssl, plain, out, &tls_ev, &plain_ev);
        if (a < 0 || b < 0)
            break;
        if (a > 0 || b > 0)
            continue;
        struct pollfd pfd[2] = {{.fd = fd, .events = tls_ev}, {.fd = plain, .events = plain_ev}};
        int rc = poll(pfd, 2, out->shut ? 5000 : -1);
        if (rc == 0 || (rc < 0 && errno != EINTR))
            break;
    }
    free(in);
    free(out);
}

static void serve(struct tls_conn *c)
{
    struct sbx_tls *t = c->t;
    SSL_CTX *ctx = tls_context(t);
    SSL *ssl = SSL_new(ctx);
    const unsigned char *alpn = NULL;
    unsigned alpn_len = 0;
    int sp[2];

    SSL_CTX_free(ctx);                                         /* the SSL holds its own reference */
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK); /* SSL calls never block */
    if (!ssl || SSL_set_fd(ssl, c->fd) != 1 || handshake(ssl, c->fd, t->o.handshake_timeout_ms)) {
        pthread_mutex_lock(&t->lock);
        t->stats.handshake_failures++;
        pthread_mutex_unlock(&t->lock);
        log_debug("router: TLS handshake failed: %s", ERR_reason_error_string(ERR_get_error()));
        ERR_clear_error();
        SSL_free(ssl);
        return;
    }
    SSL_get0_alpn_selected(ssl, &alpn, &alpn_len);
    bool h2 = alpn_len == 2 && memcmp(alpn, "h2", 2) == 0;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
        SSL_free(ssl);
        return;
    }
    hand_over(c, sp[1], h2);
    pump(ssl, c->fd, sp[0]);
    close(sp[0]);
    SSL_free(ssl);
}

static void *conn_thread(void *arg)
{
    struct tls_conn *c = arg;
    struct sbx_tls *t = c->t;

    serve(c);
    pthread_mutex_lock(&t->lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        t->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    t->nconns--;
    close(c->fd);
    pthread_cond_broadcast(&t->gone);
    pthread_mutex_unlock(&t->lock);
    free(c);
    return NULL;
}

void sbx_tls_add(struct sbx_tls *t, int fd, const struct sockaddr *peer, socklen_t len)
{
    struct tls_conn *c = calloc(1, sizeof(*c));
    pthread_attr_t attr;
    pthread_t tid;
    int rc;

    pthread_mutex_lock(&t->lock);
    if (!c || t->stopping || t->nconns >= t->o.max_connections) {
        pthread_mutex_unlock(&t->lock);
        free(c);
        close(fd);
        return;
    }
    c->t = t;
    c->fd = fd;
    c->peer_len = len <= sizeof(c->peer) ? len : sizeof(c->peer);
    memcpy(&c->peer, peer, c->peer_len);
    c->next = t->conns;
    if (t->conns)
        t->conns->prev = c;
    t->conns = c;
    t->nconns++;
    t->stats.connections++;
    pthread_mutex_unlock(&t->lock);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, THREAD_STACK);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&tid, &attr, conn_thread, c);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        log_warn(rc, "router: no thread for a TLS connection");
        shutdown(fd, SHUT_RDWR);
        conn_thread(c);
    }
}
