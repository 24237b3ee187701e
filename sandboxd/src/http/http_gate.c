/* The REST port's gate: see http_gate.h. One thread, one epoll set: the listening socket, the
 * connections waiting for their first head (peeked, never read, so the server reads the same
 * bytes) and the refused ones lingering until their peer has read the answer. One lock guards
 * every table: the server's threads report on served connections under it. */
#define _GNU_SOURCE
#include "http_gate.h"

#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "http_head.h"
#include "listen.h"
#include "log.h"
#include "metrics.h"

#define HEAD_MAX     16384 /* a first head longer than this is refused (431) */
#define LINGER_MS    2000  /* a refused connection is closed after this at the latest */
#define PAUSE_MS     100   /* accepting pauses this long when the process is out of fds */
#define ACCEPT_BATCH 1024  /* connections accepted per wake-up: a full backlog drops SYNs */
#define PEER_BUCKETS 1024

/* How an HTTP/2 connection with prior knowledge opens (RFC 9113 §3.4). */
static const char h2_preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
#define H2_PREFACE_LEN (sizeof(h2_preface) - 1)

enum state { NEW, HELD, LINGER, SERVED, DEAD }; /* NEW: in no list yet; DEAD: freed */

struct link {
    struct sbx_gate_conn *prev, *next;
};

struct list {
    struct sbx_gate_conn *head, *tail;
    unsigned n;
};

struct peer {
    unsigned char addr[16]; /* IPv4 as IPv4-mapped IPv6 */
    unsigned count;         /* held and served */
    struct list held;       /* its connections waiting for a head, oldest first */
    struct peer *next;
};

struct sbx_gate_conn {
    int fd;
    enum state state;
    bool busy;    /* served, with a request in progress */
    bool evicted; /* served, shut down by us: the server will close it */
    bool got_bytes;
    uint64_t since_ms; /* accepted (held), refused (lingering), idle since (served) */
    struct peer *peer;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    struct link link;  /* in held, linger or idle */
    struct link plink; /* in its peer's held */
};

struct sbx_gate {
    struct sbx_gate_opts o;
    int listen_fd, ep, stop_fd;
    const char *families;
    pthread_t thread;
    bool running;
    pthread_mutex_t lock;
    struct list held, linger, idle;
    struct peer *heavy; /* the peer seen holding the most connections without a head */
    unsigned served;
    uint64_t paused_until;
    struct peer *peers[PEER_BUCKETS];
    struct sbx_gate_conn **by_fd;
    size_t by_fd_len;
    char buf[HEAD_MAX];
};

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* --- lists: one function for both links of a connection --- */

static struct link *link_of(struct sbx_gate_conn *c, bool peer)
{
    return peer ? &c->plink : &c->link;
}

static void list_push(struct list *l, struct sbx_gate_conn *c, bool peer)
{
    struct link *k = link_of(c, peer);

    k->prev = l->tail;
    k->next = NULL;
    if (l->tail)
        link_of(l->tail, peer)->next = c;
    else
        l->head = c;
    l->tail = c;
    l->n++;
}

static void list_remove(struct list *l, struct sbx_gate_conn *c, bool peer)
{
    struct link *k = link_of(c, peer);

    if (k->prev)
        link_of(k->prev, peer)->next = k->next;
    else
        l->head = k->next;
    if (k->next)
        link_of(k->next, peer)->prev = k->prev;
    else
        l->tail = k->prev;
    k->prev = k->next = NULL;
    l->n--;
}

/* --- peers --- */

static void peer_key(const struct sockaddr_storage *ss, unsigned char key[16])
{
    memset(key, 0, 16);
    if (ss->ss_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    } else if (ss->ss_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    }
}

static struct peer **peer_slot(struct sbx_gate *g, const unsigned char key[16])
{
    uint32_t h = 2166136261u;
    struct peer **p;

    for (int i = 0; i < 16; i++)
        h = (h ^ key[i]) * 16777619u;
    for (p = &g->peers[h % PEER_BUCKETS]; *p && memcmp((*p)->addr, key, 16) != 0; p = &(*p)->next)
        ;
    return p;
}

static struct peer *peer_find(struct sbx_gate *g, const unsigned char key[16])
{
    return *peer_slot(g, key);
}

static void peer_release(struct sbx_gate *g, struct peer *p)
{
    struct peer **slot;

    if (--p->count)
        return;
    if (g->heavy == p)
        g->heavy = NULL;
    slot = peer_slot(g, p->addr);
    *slot = p->next;
    free(p);
}

/* --- connections --- */

static struct sbx_gate_conn *conn_new(struct sbx_gate *g, int fd, const struct sockaddr_storage *ss,
                                      socklen_t len)
{
    struct sbx_gate_conn *c = calloc(1, sizeof(*c));
    unsigned char key[16];
    struct peer **slot;

    if (!c)
        return NULL;
    peer_key(ss, key);
    slot = peer_slot(g, key);
    if (!*slot) {
        *slot = calloc(1, sizeof(**slot));
        if (!*slot) {
            free(c);
            return NULL;
        }
        memcpy((*slot)->addr, key, 16);
    }
    c->peer = *slot;
    c->peer->count++;
    c->fd = fd;
    c->addr = *ss;
    c->addr_len = len;
    c->since_ms = now_ms();
    return c;
}

/* Closes a held or lingering connection and frees it. Events name connections by their fd, looked
 * up in by_fd: one later in a batch finds it gone. */
static void conn_close(struct sbx_gate *g, struct sbx_gate_conn *c)
{
    if (c->state == HELD) {
        list_remove(&g->held, c, false);
        list_remove(&c->peer->held, c, true);
    } else if (c->state == LINGER) {
        list_remove(&g->linger, c, false);
    }
    if ((size_t)c->fd < g->by_fd_len && g->by_fd[c->fd] == c)
        g->by_fd[c->fd] = NULL;
    close(c->fd);
    if (c->peer)
        peer_release(g, c->peer);
    free(c);
}

/* Forgets a served connection (the server closes its socket). */
static void served_forget(struct sbx_gate *g, struct sbx_gate_conn *c)
{
    if (!c->busy && !c->evicted)
        list_remove(&g->idle, c, false);
    if ((size_t)c->fd < g->by_fd_len && g->by_fd[c->fd] == c)
        g->by_fd[c->fd] = NULL;
    g->served--;
    peer_release(g, c->peer);
    free(c);
}

/* Shuts down the served connection idle longest (of peer p, or of anyone): the server sees it
 * end and closes it. */
static bool evict_idle(struct sbx_gate *g, const struct peer *p)
{
    struct sbx_gate_conn *c = g->idle.head;

    while (c && p && c->peer != p)
        c = c->link.next;
    if (!c)
        return false;
    list_remove(&g->idle, c, false);
    c->evicted = true;
    shutdown(c->fd, SHUT_RDWR);
    sbx_metrics_connection_closed(SBX_CONN_IDLE);
    return true;
}

static const char *reason_phrase(unsigned status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 408:
        return "Request Timeout";
    case 431:
        return "Request Header Fields Too Large";
    case 501:
        return "Not Implemented";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Service Unavailable";
    }
}

/* Reads and drops what a refused connection still sends; closes it at its end. */
static enum state linger_drain(struct sbx_gate *g, struct sbx_gate_conn *c)
{
    ssize_t n;

    while ((n = recv(c->fd, g->buf, sizeof(g->buf), 0)) > 0)
        ;
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        conn_close(g, c);
        return DEAD;
    }
    return LINGER;
}

static bool watch(struct sbx_gate *g, struct sbx_gate_conn *c)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.fd = c->fd};

    return epoll_ctl(g->ep, EPOLL_CTL_ADD, c->fd, &ev) == 0;
}

/* Answers a JSON error, closes our side for writing and lingers until the peer has read it
 * (closing with its unread head in our buffer would reset the connection, answer and all). */
static enum state refuse(struct sbx_gate *g, struct sbx_gate_conn *c, unsigned status,
                         const char *code, const char *message, bool head_method)
{
    json_t *j = json_pack("{s:s, s:s}", "code", code, "message", message);
    _cleanup_free_ char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    size_t blen = body ? strlen(body) + 1 : 0;
    char resp[1024], date[64];
    time_t now = time(NULL);
    struct tm tm;
    int n;

    json_decref(j);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&now, &tm));
    n = snprintf(resp, sizeof(resp),
                 "HTTP/1.1 %u %s\r\nDate: %s\r\nContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\nConnection: close\r\n%s\r\n%s%s",
                 status, reason_phrase(status), date, blen,
                 status == 503 ? "Retry-After: 1\r\n" : "", head_method || !body ? "" : body,
                 head_method || !body ? "" : "\n");
    if (n > 0 && (size_t)n < sizeof(resp))
        (void)!send(c->fd, resp, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
    sbx_metrics_request(SBX_METRIC_HTTP, (int)status);
    shutdown(c->fd, SHUT_WR);
    if (c->state == HELD) {
        list_remove(&g->held, c, false);
        list_remove(&c->peer->held, c, true);
    } else if (!watch(g, c)) { /* NEW: not watched yet */
        conn_close(g, c);
        return DEAD;
    }
    c->state = LINGER;
    c->since_ms = now_ms();
    peer_release(g, c->peer); /* answered: no longer one of its peer's connections */
    c->peer = NULL;
    list_push(&g->linger, c, false);
    return linger_drain(g, c);
}

/* Room among the served connections for one more: an idle one goes if there is none. Those shut
 * down for newcomers count until the server has closed them, and never exceed the ceiling;
 * probes have a reserve beyond it. */
static bool make_room(struct sbx_gate *g, bool probe)
{
    unsigned ceiling = sbx_gate_ceiling(&g->o) - g->o.probe_reserve;

    if (g->served < g->o.max_served)
        return true;
    if (g->served < ceiling && evict_idle(g, NULL))
        return true;
    if (!probe || g->served >= ceiling + g->o.probe_reserve)
        return false;
    evict_idle(g, NULL); /* if one is idle, the next newcomer need not wait for it */
    return true;
}

static bool by_fd_set(struct sbx_gate *g, int fd, struct sbx_gate_conn *c)
{
    if ((size_t)fd >= g->by_fd_len) {
        size_t n = (size_t)fd * 2 + 64;
        struct sbx_gate_conn **t = realloc(g->by_fd, n * sizeof(*t));
        if (!t)
            return false;
        memset(t + g->by_fd_len, 0, (n - g->by_fd_len) * sizeof(*t));
        g->by_fd = t;
        g->by_fd_len = n;
    }
    /* A record left by a connection the server dropped without telling us (held and lingering
     * ones leave none: conn_close clears theirs before closing the fd). */
    if (g->by_fd[fd] && g->by_fd[fd]->state == SERVED)
        served_forget(g, g->by_fd[fd]);
    g->by_fd[fd] = c;
    return true;
}

/* Takes a held connection out of the gate's watch and lists, for a hand-over. */
static void unhold(struct sbx_gate *g, struct sbx_gate_conn *c)
{
    epoll_ctl(g->ep, EPOLL_CTL_DEL, c->fd, NULL);
    list_remove(&g->held, c, false);
    list_remove(&c->peer->held, c, true);
}

/* Hands a connection whose head passed to the server. Unlocks around the hand-over: the server
 * may report on the connection at once, from its own threads. */
static void serve(struct sbx_gate *g, struct sbx_gate_conn *c)
{
    struct sockaddr_storage addr = c->addr;
    socklen_t len = c->addr_len;
    int fd = c->fd;

    unhold(g, c);
    c->state = SERVED;
    c->busy = true; /* until the server has answered the head that is waiting */
    g->served++;
    pthread_mutex_unlock(&g->lock);
    int r = g->o.hand(g->o.arg, fd, (const struct sockaddr *)&addr, len);
    pthread_mutex_lock(&g->lock);
    if (r < 0 && (size_t)fd < g->by_fd_len && g->by_fd[fd] == c)
        served_forget(g, c);
}

/* Hands a connection that opened with the HTTP/2 preface to the h2c front and forgets it: the
 * front keeps its own limits. Unlocks around the hand-over, as serve does. */
static void hand_h2(struct sbx_gate *g, struct sbx_gate_conn *c)
{
    struct sockaddr_storage addr = c->addr;
    socklen_t len = c->addr_len;
    int fd = c->fd;

    unhold(g, c);
    if ((size_t)fd < g->by_fd_len && g->by_fd[fd] == c)
        g->by_fd[fd] = NULL;
    peer_release(g, c->peer);
    free(c);
    pthread_mutex_unlock(&g->lock);
    g->o.hand_h2(g->o.arg, fd, (const struct sockaddr *)&addr, len);
    pthread_mutex_lock(&g->lock);
}

/* Whether the n bytes peeked are the HTTP/2 preface or its beginning. */
static bool h2_preface_prefix(const char *buf, size_t n)
{
    return memcmp(buf, h2_preface, n < H2_PREFACE_LEN ? n : H2_PREFACE_LEN) == 0;
}

/* Looks at what a held connection sent: still half a head (HELD), refused (LINGER), handed to
 * the server (SERVED: it may be gone already, freed by the server's threads) or closed (DEAD). */
static enum state on_held(struct sbx_gate *g, struct sbx_gate_conn *c, uint32_t events)
{
    struct sbx_http_verdict v;
    struct sbx_http_head h;
    ssize_t n = recv(c->fd, g->buf, sizeof(g->buf), MSG_PEEK);
    size_t end;

    if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            conn_close(g, c); /* gone before its head */
            return DEAD;
        }
        return HELD;
    }
    c->got_bytes = true;
    if (g->o.hand_h2 && h2_preface_prefix(g->buf, (size_t)n)) {
        if ((size_t)n >= H2_PREFACE_LEN) {
            hand_h2(g, c);
            return SERVED;
        }
        if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
            conn_close(g, c); /* half a preface, and no more will come */
            return DEAD;
        }
        return HELD;
    }
    end = sbx_http_head_end(g->buf, (size_t)n);
    if (!end) {
        if ((size_t)n == sizeof(g->buf))
            return refuse(g, c, 431, "HEADERS_TOO_LARGE", "request head longer than 16 KiB", false);
        if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
            conn_close(g, c); /* half a head, and no more will come */
            return DEAD;
        }
        return HELD;
    }
    if (!sbx_http_head_check(g->buf, end, g->o.is_probe, &h, &v))
        return refuse(g, c, v.status, v.code, v.message, h.head_method);
    if (!make_room(g, h.probe))
        return refuse(g, c, 503, "TOO_MANY_CONNECTIONS", "the server is at its connection limit",
                      h.head_method);
    serve(g, c);
    return SERVED;
}

/* Closes the oldest connection of l (the gate's held, or a peer's) still without a whole head. One
 * whose head has come meanwhile is no longer half-open: it is served (or refused) instead, and
 * the next is tried. True when one was closed. */
static bool evict_held(struct sbx_gate *g, struct list *l, struct peer *p, enum sbx_metric_conn why)
{
    bool closed = false;

    if (p)
        p->count++; /* l is p's: p must outlive serving its connections */
    while (l->head && !closed) {
        struct sbx_gate_conn *c = l->head;
        enum state st = on_held(g, c, 0);
        if (st == HELD) {
            conn_close(g, c);
            sbx_metrics_connection_closed(why);
        }
        closed = st == HELD || st == DEAD;
    }
    if (p)
        peer_release(g, p);
    return closed;
}

/* One connection fewer held: a refused one (it only waits for its peer to read the answer),
 * else the oldest without a head of the peer holding the most (a flood from one address does
 * not push out everyone else's), else the oldest of all. False when none could go. */
static bool make_held_room(struct sbx_gate *g)
{
    if (g->linger.head) {
        conn_close(g, g->linger.head);
        return true;
    }
    if (g->heavy && g->heavy->held.head &&
        evict_held(g, &g->heavy->held, g->heavy, SBX_CONN_HELD_LIMIT))
        return true;
    return evict_held(g, &g->held, NULL, SBX_CONN_HELD_LIMIT);
}

static void admit(struct sbx_gate *g, int fd, const struct sockaddr_storage *ss, socklen_t len)
{
    unsigned char key[16];
    struct peer *p;
    struct sbx_gate_conn *c;
    bool over = false;

    peer_key(ss, key);
    p = peer_find(g, key);
    if (p && p->count >= g->o.max_per_peer && !evict_held(g, &p->held, p, SBX_CONN_PEER_LIMIT)) {
        p = peer_find(g, key);
        over = p && p->count >= g->o.max_per_peer && !evict_idle(g, p);
    }
    if (g->held.n + g->linger.n >= g->o.max_pending)
        make_held_room(g);
    c = conn_new(g, fd, ss, len);
    if (!c) {
        close(fd);
        return;
    }
    if (!by_fd_set(g, fd, c)) {
        conn_close(g, c);
        return;
    }
    if (over) {
        refuse(g, c, 503, "TOO_MANY_CONNECTIONS", "too many connections from this address", false);
        return;
    }
    c->state = HELD;
    list_push(&g->held, c, false);
    list_push(&c->peer->held, c, true);
    if (!g->heavy || c->peer->held.n > g->heavy->held.n)
        g->heavy = c->peer;
    if (!watch(g, c))
        conn_close(g, c);
}

static void pause_accept(struct sbx_gate *g)
{
    epoll_ctl(g->ep, EPOLL_CTL_DEL, g->listen_fd, NULL);
    g->paused_until = now_ms() + PAUSE_MS;
    log_warn(EMFILE, "http: out of file descriptors; accepting pauses for %d ms", PAUSE_MS);
}

static void on_accept(struct sbx_gate *g)
{
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd = accept4(g->listen_fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            admit(g, fd, &ss, len);
        } else if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            if (!make_held_room(g)) {
                pause_accept(g);
                return;
            }
        } else if (errno != EINTR && errno != ECONNABORTED) {
            return; /* EAGAIN: none left */
        }
    }
}

/* Heads that did not come in time, refused connections lingering too long, a pause that is
 * over. */
static void expire(struct sbx_gate *g, uint64_t now)
{
    while (g->held.head && now - g->held.head->since_ms >= g->o.head_timeout_ms) {
        struct sbx_gate_conn *c = g->held.head;
        if (c->got_bytes)
            refuse(g, c, 408, "REQUEST_TIMEOUT", "the request head did not arrive in time", false);
        else
            conn_close(g, c);
        sbx_metrics_connection_closed(SBX_CONN_HEAD_TIMEOUT);
    }
    while (g->linger.head && now - g->linger.head->since_ms >= LINGER_MS)
        conn_close(g, g->linger.head);
    if (g->paused_until && now >= g->paused_until) {
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = g->listen_fd};
        g->paused_until = 0;
        epoll_ctl(g->ep, EPOLL_CTL_ADD, g->listen_fd, &ev);
    }
}

static int next_timeout(struct sbx_gate *g, uint64_t now)
{
    uint64_t next = UINT64_MAX;

    if (g->held.head)
        next = g->held.head->since_ms + g->o.head_timeout_ms;
    if (g->linger.head && g->linger.head->since_ms + LINGER_MS < next)
        next = g->linger.head->since_ms + LINGER_MS;
    if (g->paused_until && g->paused_until < next)
        next = g->paused_until;
    if (next == UINT64_MAX)
        return -1;
    return next <= now ? 0 : (int)(next - now);
}

static void *gate_main(void *arg)
{
    struct sbx_gate *g = arg;
    struct epoll_event ev[64];
    bool stop = false;

    pthread_mutex_lock(&g->lock);
    while (!stop) {
        int timeout = next_timeout(g, now_ms());
        pthread_mutex_unlock(&g->lock);
        int n = epoll_wait(g->ep, ev, SBX_ARRAY_SIZE(ev), timeout);
        pthread_mutex_lock(&g->lock);
        for (int i = 0; i < n; i++) {
            int fd = ev[i].data.fd;
            struct sbx_gate_conn *c = (size_t)fd < g->by_fd_len ? g->by_fd[fd] : NULL;
            if (fd == g->stop_fd)
                stop = true;
            else if (fd == g->listen_fd)
                on_accept(g);
            else if (c && c->state == HELD)
                on_held(g, c, ev[i].events);
            else if (c && c->state == LINGER)
                linger_drain(g, c);
        }
        expire(g, now_ms());
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

int sbx_gate_start(struct sbx_gate **ret, const struct sbx_gate_opts *o, struct sbx_error *err)
{
    struct sbx_gate *g = calloc(1, sizeof(*g));
    struct epoll_event lev = {.events = EPOLLIN}, sev = {.events = EPOLLIN};
    int r, port;

    if (!g)
        return sbx_error_set(err, ENOMEM, "allocate the http gate");
    g->o = *o;
    g->listen_fd = g->ep = g->stop_fd = -1;
    pthread_mutex_init(&g->lock, NULL);
    if ((r = sbx_listen(o->host, o->port, (int)((o->head_timeout_ms + 999) / 1000), &g->listen_fd,
                        &g->families, err)) < 0)
        goto fail;
    lev.data.fd = g->listen_fd;
    g->ep = epoll_create1(EPOLL_CLOEXEC);
    g->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    sev.data.fd = g->stop_fd;
    if (g->ep < 0 || g->stop_fd < 0 || epoll_ctl(g->ep, EPOLL_CTL_ADD, g->listen_fd, &lev) < 0 ||
        epoll_ctl(g->ep, EPOLL_CTL_ADD, g->stop_fd, &sev) < 0) {
        r = sbx_error_set(err, errno, "set up the http gate's epoll");
        goto fail;
    }
    port = r;
    if ((r = -pthread_create(&g->thread, NULL, gate_main, g)) < 0) {
        sbx_error_set(err, -r, "start the http gate's thread");
        goto fail;
    }
    g->running = true;
    *ret = g;
    return port;
fail:
    sbx_gate_free(g);
    return r;
}

unsigned sbx_gate_ceiling(const struct sbx_gate_opts *o)
{
    return 2 * o->max_served + o->probe_reserve;
}

const char *sbx_gate_families(const struct sbx_gate *g)
{
    return g->families;
}

struct sbx_gate_conn *sbx_gate_served_find(struct sbx_gate *g, int fd)
{
    struct sbx_gate_conn *c = NULL;

    pthread_mutex_lock(&g->lock);
    if (fd >= 0 && (size_t)fd < g->by_fd_len)
        c = g->by_fd[fd];
    pthread_mutex_unlock(&g->lock);
    return c;
}

void sbx_gate_served_busy(struct sbx_gate *g, struct sbx_gate_conn *c, bool busy)
{
    if (!c)
        return;
    pthread_mutex_lock(&g->lock);
    if (c->busy != busy && !c->evicted) {
        if (busy) {
            list_remove(&g->idle, c, false);
        } else {
            c->since_ms = now_ms();
            list_push(&g->idle, c, false);
        }
    }
    c->busy = busy;
    pthread_mutex_unlock(&g->lock);
}

void sbx_gate_served_closed(struct sbx_gate *g, struct sbx_gate_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&g->lock);
    served_forget(g, c);
    pthread_mutex_unlock(&g->lock);
}

unsigned sbx_gate_held(struct sbx_gate *g)
{
    unsigned n;

    pthread_mutex_lock(&g->lock);
    n = g->held.n + g->linger.n;
    pthread_mutex_unlock(&g->lock);
    return n;
}

void sbx_gate_stop(struct sbx_gate *g)
{
    uint64_t one = 1;

    if (!g || !g->running)
        return;
    (void)!write(g->stop_fd, &one, sizeof(one));
    pthread_join(g->thread, NULL);
    g->running = false;
    pthread_mutex_lock(&g->lock);
    while (g->held.head)
        conn_close(g, g->held.head);
    while (g->linger.head)
        conn_close(g, g->linger.head);
    pthread_mutex_unlock(&g->lock);
}

void sbx_gate_free(struct sbx_gate *g)
{
    if (!g)
        return;
    sbx_gate_stop(g);
    for (size_t fd = 0; fd < g->by_fd_len; fd++)
        if (g->by_fd[fd])
            served_forget(g, g->by_fd[fd]);
    free(g->by_fd);
    if (g->listen_fd >= 0)
        close(g->listen_fd);
    if (g->ep >= 0)
        close(g->ep);
    if (g->stop_fd >= 0)
        close(g->stop_fd);
    pthread_mutex_destroy(&g->lock);
    free(g);
}
