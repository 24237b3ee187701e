/* The h2c front (h2c.h): one thread, one epoll set over the wake-up eventfd, every h2c
 * connection's socket and every stream's socketpair. The gate's thread queues connections under
 * the lock; nothing else is shared. Objects that die while a batch of events may still name them
 * are freed after the batch. */
#define _GNU_SOURCE
#include "h2c.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cleanup.h"
#include "h2c_internal.h"
#include "log.h"

#define READ_ROUNDS 16 /* reads of one connection per event: the others get their turn */

static ssize_t conn_send(nghttp2_session *ses, const uint8_t *data, size_t len, int flags,
                         void *arg)
{
    struct h2c_conn *c = arg;
    ssize_t n = send(c->fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);

    (void)ses, (void)flags;
    if (n >= 0)
        return n;
    if (errno == EAGAIN || errno == EINTR) {
        c->blocked = true;
        return NGHTTP2_ERR_WOULDBLOCK;
    }
    c->failed = true;
    return NGHTTP2_ERR_CALLBACK_FAILURE;
}

static void conn_kill(struct h2c_conn *c)
{
    struct sbx_h2c *f = c->f;

    if (c->w.dead)
        return;
    while (c->streams)
        h2c_stream_kill(c->streams);
    nghttp2_session_del(c->s);
    c->s = NULL;
    close(c->fd);
    if (c->prev)
        c->prev->next = c->next;
    else
        f->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    f->n_conns--;
    c->w.dead = true;
    c->next = f->dead_conns;
    f->dead_conns = c;
}

void h2c_conn_flush(struct h2c_conn *c)
{
    unsigned want;

    if (c->w.dead)
        return;
    c->blocked = false;
    if (nghttp2_session_send(c->s) != 0 || c->failed) {
        conn_kill(c);
        return;
    }
    /* Nothing to read and nothing the socket refused: done (what the session still holds waits
     * for a window that will never open). */
    want = (nghttp2_session_want_read(c->s) ? EPOLLIN : 0u) | (c->blocked ? EPOLLOUT : 0u);
    if (!want)
        conn_kill(c);
    else
        h2c_arm(c->f, &c->w, c->fd, &c->events, want);
}

/* Reads what the client sent and lets the session act on it. A protocol error has nghttp2 queue
 * GOAWAY; the connection ends once that is sent. */
static void conn_read(struct h2c_conn *c)
{
    uint8_t buf[16384];

    for (int i = 0; i < READ_ROUNDS && !c->w.dead; i++) {
        ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
        ssize_t r;
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) {
            conn_kill(c); /* gone: its streams' servers see their clients gone */
            return;
        }
        c->active_ms = h2c_now_ms();
        r = nghttp2_session_mem_recv(c->s, buf, (size_t)n);
        if (r < 0) {
            log_debug("h2c: ending a connection: %s", nghttp2_strerror((int)r));
            nghttp2_session_terminate_session(c->s, r == NGHTTP2_ERR_FLOODED
                                                        ? NGHTTP2_ENHANCE_YOUR_CALM
                                                        : NGHTTP2_PROTOCOL_ERROR);
            return;
        }
    }
}

static int conn_settings(struct h2c_conn *c, uint32_t refuse)
{
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, SBX_H2C_STREAMS_PER_CONNECTION},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, H2C_HEADERS},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2C_WINDOW},
    };
    int r = nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, iv, SBX_ARRAY_SIZE(iv));

    /* Each stream's window bounds its buffer; the connection's must not be the tighter one, or
     * one stream whose server reads slowly would hold up the others. */
    if (!r)
        r = nghttp2_session_set_local_window_size(c->s, NGHTTP2_FLAG_NONE, 0,
                                                  SBX_H2C_STREAMS_PER_CONNECTION * H2C_WINDOW);
    if (!r && refuse != NGHTTP2_NO_ERROR)
        r = nghttp2_session_terminate_session(c->s, refuse);
    return r;
}

/* Whether two connections come from the same address (the port aside). */
static bool same_peer(const struct h2c_conn *a, const struct h2c_conn *b)
{
    const struct sockaddr_in *a4 = (const void *)&a->peer, *b4 = (const void *)&b->peer;
    const struct sockaddr_in6 *a6 = (const void *)&a->peer, *b6 = (const void *)&b->peer;

    if (a->peer.ss_family != b->peer.ss_family)
        return false;
    if (a->peer.ss_family == AF_INET)
        return a4->sin_addr.s_addr == b4->sin_addr.s_addr;
    if (a->peer.ss_family == AF_INET6)
        return memcmp(&a6->sin6_addr, &b6->sin6_addr, sizeof(a6->sin6_addr)) == 0;
    return true;
}

/* Whether a new connection may stay (NGHTTP2_NO_ERROR), else the GOAWAY code it gets: within
 * its address's share, and within the total once the connection idle longest (no stream) is
 * closed for it, as the gate closes an idle HTTP/1.1 connection for a newcomer. One scan: there
 * are at most max_connections. */
static uint32_t conn_room(struct sbx_h2c *f, struct h2c_conn *c)
{
    struct h2c_conn *idle = NULL;
    unsigned same = 0;

    for (struct h2c_conn *o = f->conns; o; o = o->next) {
        if (o == c)
            continue;
        same += same_peer(o, c);
        /* the list is newest first: of those idle as long, the oldest goes */
        if (!o->n_streams && (!idle || o->active_ms <= idle->active_ms))
            idle = o;
    }
    if (same >= f->o.max_per_peer)
        return NGHTTP2_ENHANCE_YOUR_CALM;
    if (f->n_conns <= f->o.max_connections)
        return NGHTTP2_NO_ERROR;
    if (!idle)
        return NGHTTP2_REFUSED_STREAM;
    nghttp2_session_terminate_session(idle->s, NGHTTP2_NO_ERROR);
    nghttp2_session_send(idle->s); /* its GOAWAY, if the socket takes it */
    conn_kill(idle);
    return NGHTTP2_NO_ERROR;
}

/* A connection from the gate: its session, its settings; past a limit, GOAWAY at once. */
static void conn_admit(struct sbx_h2c *f, struct h2c_pending *p)
{
    struct h2c_conn *c = calloc(1, sizeof(*c));

    if (!c || nghttp2_session_server_new2(&c->s, f->cbs, c, f->opt) != 0) {
        free(c);
        close(p->fd);
        return;
    }
    c->w.kind = H2C_CONN;
    c->f = f;
    c->fd = p->fd;
    c->peer = p->peer;
    c->peer_len = p->len;
    c->active_ms = h2c_now_ms();
    c->next = f->conns;
    if (f->conns)
        f->conns->prev = c;
    f->conns = c;
    f->n_conns++;
    if (conn_settings(c, conn_room(f, c)) != 0) {
        conn_kill(c);
        return;
    }
    h2c_conn_flush(c);
}

static void on_wake(struct sbx_h2c *f, bool *stop)
{
    struct h2c_pending *q;
    uint64_t v;

    (void)!read(f->wake_fd, &v, sizeof(v));
    pthread_mutex_lock(&f->lock);
    q = f->queue;
    f->queue = NULL;
    f->queued = 0;
    *stop = f->stop;
    pthread_mutex_unlock(&f->lock);
    while (q) {
        struct h2c_pending *next = q->next;
        if (*stop)
            close(q->fd);
        else
            conn_admit(f, q);
        free(q);
        q = next;
    }
}

/* Whether a connection has a stream at work: one whose server connection is open (the server
 * times that out itself). A stream still without one waits for the rest of its headers, or
 * for its client to read the last of its answer. */
static bool conn_busy(const struct h2c_conn *c)
{
    for (const struct h2c_stream *s = c->streams; s; s = s->next)
        if (s->fd >= 0)
            return true;
    return false;
}

/* Connections with no stream at work that sent nothing for the idle timeout get GOAWAY and close
 * once it is sent; one whose client reads nothing, not even that, is closed at twice the
 * timeout. So a client that opens streams and never finishes their headers holds them no
 * longer than an idle connection. */
static void expire(struct sbx_h2c *f, uint64_t now)
{
    uint64_t idle = (uint64_t)f->o.idle_timeout_s * 1000;

    for (struct h2c_conn *c = f->conns, *next; c; c = next) {
        next = c->next;
        if (conn_busy(c) || now - c->active_ms < idle)
            continue;
        if (now - c->active_ms >= 2 * idle) {
            conn_kill(c);
            continue;
        }
        nghttp2_session_terminate_session(c->s, NGHTTP2_NO_ERROR);
        h2c_conn_flush(c);
    }
}

static void bury(struct sbx_h2c *f)
{
    while (f->dead_streams) {
        struct h2c_stream *s = f->dead_streams;
        f->dead_streams = s->next;
        h2c_stream_free(s);
    }
    while (f->dead_conns) {
        struct h2c_conn *c = f->dead_conns;
        f->dead_conns = c->next;
        free(c);
    }
}

static void on_event(struct h2c_watch *w, uint32_t events)
{
    if (w->kind == H2C_CONN) {
        struct h2c_conn *c = (struct h2c_conn *)w;
        if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
            conn_read(c);
        h2c_conn_flush(c);
    } else {
        struct h2c_stream *s = (struct h2c_stream *)w;
        struct h2c_conn *c = s->c;
        h2c_stream_on_event(s, events);
        h2c_conn_flush(c);
    }
}

static void *front_main(void *arg)
{
    struct sbx_h2c *f = arg;
    struct epoll_event ev[64];
    uint64_t last = h2c_now_ms();
    bool stop = false;

    while (!stop) {
        int n = epoll_wait(f->ep, ev, SBX_ARRAY_SIZE(ev), f->conns ? H2C_IDLE_POLL : -1);
        uint64_t now;
        for (int i = 0; i < n; i++) {
            struct h2c_watch *w = ev[i].data.ptr;
            if (w->kind == H2C_WAKE)
                on_wake(f, &stop);
            else if (!w->dead)
                on_event(w, ev[i].events);
        }
        now = h2c_now_ms();
        if (now - last >= H2C_IDLE_POLL) {
            expire(f, now);
            last = now;
        }
        bury(f);
    }
    while (f->conns)
        conn_kill(f->conns);
    bury(f);
    return NULL;
}

int sbx_h2c_hand(void *arg, int fd, const struct sockaddr *peer, socklen_t len)
{
    struct sbx_h2c *f = arg;
    struct h2c_pending *p = calloc(1, sizeof(*p));
    uint64_t one = 1;
    bool full;

    if (!p || len > sizeof(p->peer)) {
        free(p);
        close(fd);
        return -ENOMEM;
    }
    p->fd = fd;
    memcpy(&p->peer, peer, len);
    p->len = len;
    pthread_mutex_lock(&f->lock);
    full = f->stop || f->queued >= f->o.max_connections;
    if (!full) {
        p->next = f->queue;
        f->queue = p;
        f->queued++;
    }
    pthread_mutex_unlock(&f->lock);
    if (full) {
        free(p);
        close(fd);
        return -EBUSY;
    }
    (void)!write(f->wake_fd, &one, sizeof(one));
    return 0;
}

int sbx_h2c_start(struct sbx_h2c **ret, const struct sbx_h2c_opts *o, struct sbx_error *err)
{
    struct sbx_h2c *f = calloc(1, sizeof(*f));
    struct epoll_event ev = {.events = EPOLLIN};
    int r;

    if (!f)
        return sbx_error_set(err, ENOMEM, "allocate the h2c front");
    f->o = *o;
    f->ep = f->wake_fd = -1;
    f->wake.kind = H2C_WAKE;
    ev.data.ptr = &f->wake;
    pthread_mutex_init(&f->lock, NULL);
    if (nghttp2_session_callbacks_new(&f->cbs) != 0 || nghttp2_option_new(&f->opt) != 0) {
        sbx_h2c_free(f);
        return sbx_error_set(err, ENOMEM, "allocate the h2c front's nghttp2 settings");
    }
    nghttp2_session_callbacks_set_send_callback(f->cbs, conn_send);
    h2c_stream_callbacks(f->cbs);
    /* A stream's window is given back as its DATA is written to the server, not on receipt. */
    nghttp2_option_set_no_auto_window_update(f->opt, 1);
    f->ep = epoll_create1(EPOLL_CLOEXEC);
    f->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (f->ep < 0 || f->wake_fd < 0 || epoll_ctl(f->ep, EPOLL_CTL_ADD, f->wake_fd, &ev) < 0) {
        r = sbx_error_set(err, errno, "set up the h2c front's epoll");
        sbx_h2c_free(f);
        return r;
    }
    if ((r = -pthread_create(&f->thread, NULL, front_main, f)) < 0) {
        sbx_error_set(err, -r, "start the h2c front's thread");
        sbx_h2c_free(f);
        return r;
    }
    f->running = true;
    *ret = f;
    return 0;
}

void sbx_h2c_free(struct sbx_h2c *f)
{
    uint64_t one = 1;

    if (!f)
        return;
    if (f->running) {
        pthread_mutex_lock(&f->lock);
        f->stop = true;
        pthread_mutex_unlock(&f->lock);
        (void)!write(f->wake_fd, &one, sizeof(one));
        pthread_join(f->thread, NULL);
    }
    while (f->queue) {
        struct h2c_pending *p = f->queue;
        f->queue = p->next;
        close(p->fd);
        free(p);
    }
    nghttp2_session_callbacks_del(f->cbs);
    nghttp2_option_del(f->opt);
    if (f->ep >= 0)
        close(f->ep);
    if (f->wake_fd >= 0)
        close(f->wake_fd);
    pthread_mutex_destroy(&f->lock);
    free(f);
}
