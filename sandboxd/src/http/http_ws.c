#define _GNU_SOURCE
#include "http_ws.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A client that does not answer our close frame within this is cut off. */
#define CLOSE_DEADLINE_MS 5000
/* Read from one socket per event: others on the loop get their turn. */
#define READ_CHUNK      (16 * 1024)
#define READS_PER_EVENT 8

struct sbx_ws {
    struct sbx_watch watch;
    struct sbx_ws_set *set;
    struct sbx_ws *prev, *next;
    struct sbx_ws_parser parser;
    const struct sbx_ws_ops *ops;
    void *data;
    void (*release)(void *arg);
    void *release_arg;
    uint8_t *extra; /* bytes the server read beyond the handshake, parsed first */
    size_t extra_len;
    uint8_t *out; /* frames queued to send, from out_off to out_len */
    size_t out_off, out_len, out_cap;
    uint32_t events; /* registered with the loop */
    bool started, paused, was_full;
    bool close_sent, close_received, over;
    uint64_t deadline_ms; /* when closing: cut off after */
};

struct sbx_ws_set {
    struct sbx_loop *loop;
    pthread_mutex_t lock;
    struct sbx_ws *head;
    unsigned count, max;
    size_t max_msg, max_queue;
    bool stopped;
    struct sbx_timer sweep; /* ends connections whose close deadline passed */
    bool sweep_armed;
};

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static size_t pending(const struct sbx_ws *ws)
{
    return ws->out_len - ws->out_off;
}

/* Takes ws out of the set's list; under its lock. */
static void unlink_locked(struct sbx_ws *ws)
{
    struct sbx_ws_set *set = ws->set;

    if (ws->prev)
        ws->prev->next = ws->next;
    else
        set->head = ws->next;
    if (ws->next)
        ws->next->prev = ws->prev;
    set->count--;
}

static void ws_free(struct sbx_ws *ws)
{
    ws->release(ws->release_arg);
    sbx_ws_parser_release(&ws->parser);
    free(ws->extra);
    free(ws->out);
    free(ws);
}

/* Ends the connection now: out of the loop and the set, the fd handed back, the owner told. */
static void finish(struct sbx_ws *ws)
{
    struct sbx_ws_set *set = ws->set;

    sbx_loop_del(set->loop, &ws->watch);
    pthread_mutex_lock(&set->lock);
    unlink_locked(ws);
    pthread_mutex_unlock(&set->lock);
    ws->ops->closed(ws, ws->data);
    ws_free(ws);
}

/* The events the connection waits for now. */
static void rearm(struct sbx_ws *ws)
{
    uint32_t ev = 0;

    if (!ws->paused && !ws->close_received && !ws->over)
        ev |= EPOLLIN;
    /* Not started, over, or input held while paused: the next turn of the loop sees to it. */
    if (pending(ws) || !ws->started || ws->over || (ws->extra && !ws->paused))
        ev |= EPOLLOUT;
    if (ev != ws->events) {
        ws->events = ev;
        (void)sbx_loop_mod(ws->set->loop, &ws->watch, ev);
    }
}

static void arm_sweep(struct sbx_ws_set *set)
{
    if (!set->sweep_armed && sbx_timer_arm(&set->sweep, CLOSE_DEADLINE_MS) == 0)
        set->sweep_armed = true;
}

/* Sends what the socket takes. */
static void flush(struct sbx_ws *ws)
{
    while (pending(ws)) {
        ssize_t n = send(ws->watch.fd, ws->out + ws->out_off, pending(ws), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            ws->over = true; /* the client is gone */
            ws->out_off = ws->out_len;
            break;
        }
        ws->out_off += (size_t)n;
    }
    if (!pending(ws)) {
        /* Nothing held for an idle connection. */
        free(ws->out);
        ws->out = NULL;
        ws->out_off = ws->out_len = ws->out_cap = 0;
        if (ws->close_sent) {
            if (ws->close_received)
                ws->over = true;
            else
                (void)shutdown(ws->watch.fd, SHUT_WR);
        }
    }
}

/* Appends a frame; control frames may go beyond max_queue (by their 127 bytes at most). */
static int enqueue(struct sbx_ws *ws, uint8_t op, const void *buf, size_t len)
{
    uint8_t hdr[10];
    size_t h = sbx_ws_frame_header(hdr, op, len), need;

    if (ws->out_off) {
        memmove(ws->out, ws->out + ws->out_off, pending(ws));
        ws->out_len -= ws->out_off;
        ws->out_off = 0;
    }
    need = ws->out_len + h + len;
    if (need > ws->out_cap) {
        size_t cap = ws->out_cap ? ws->out_cap : 4096;
        uint8_t *o;
        while (cap < need)
            cap *= 2;
        o = realloc(ws->out, cap);
        if (!o)
            return -ENOMEM;
        ws->out = o;
        ws->out_cap = cap;
    }
    memcpy(ws->out + ws->out_len, hdr, h);
    if (len)
        memcpy(ws->out + ws->out_len + h, buf, len);
    ws->out_len += h + len;
    return 0;
}

static size_t room_of(const struct sbx_ws *ws)
{
    size_t used = pending(ws) + 10;

    if (ws->close_sent || ws->over || used >= ws->set->max_queue)
        return 0;
    return ws->set->max_queue - used;
}

size_t sbx_ws_room(struct sbx_ws *ws)
{
    size_t room = room_of(ws);

    /* Asked while the queue is over half full: the owner holds back, and hears writable() once
     * the client has taken the queue below half. */
    if (room < ws->set->max_queue / 2)
        ws->was_full = true;
    return room;
}

int sbx_ws_send(struct sbx_ws *ws, uint8_t op, const void *buf, size_t len)
{
    int r;

    if (ws->close_sent || ws->over)
        return -EPIPE;
    if (len > room_of(ws)) {
        ws->was_full = true;
        return -ENOBUFS;
    }
    r = enqueue(ws, op, buf, len);
    if (r < 0)
        return r;
    flush(ws);
    rearm(ws);
    return 0;
}

void sbx_ws_pause(struct sbx_ws *ws, bool paused)
{
    ws->paused = paused;
    rearm(ws);
}

void sbx_ws_close(struct sbx_ws *ws, uint16_t code, const char *reason)
{
    uint8_t payload[SBX_WS_CONTROL_MAX];
    size_t n = reason ? strlen(reason) : 0;

    if (ws->close_sent || ws->over)
        return;
    if (n > SBX_WS_CONTROL_MAX - 2)
        n = SBX_WS_CONTROL_MAX - 2;
    payload[0] = (uint8_t)(code >> 8);
    payload[1] = (uint8_t)code;
    if (n)
        memcpy(payload + 2, reason, n);
    if (enqueue(ws, SBX_WS_CLOSE, payload, n + 2) < 0) {
        ws->over = true; /* no memory for a goodbye: the connection just ends */
    } else {
        ws->close_sent = true;
        ws->deadline_ms = now_ms() + CLOSE_DEADLINE_MS;
        arm_sweep(ws->set);
        flush(ws);
    }
    rearm(ws);
}

/* A control frame, or a message for the owner. */
static void dispatch(struct sbx_ws *ws, const struct sbx_ws_msg *m)
{
    switch (m->op) {
    case SBX_WS_PING:
        if (!ws->close_sent && enqueue(ws, SBX_WS_PONG, m->data, m->len) < 0)
            ws->over = true;
        break;
    case SBX_WS_PONG:
        break;
    case SBX_WS_CLOSE:
        ws->close_received = true;
        if (!ws->close_sent) {
            /* Echo the code (none when the client sent none), as RFC 6455 §5.5.1 asks. */
            if (m->len >= 2)
                sbx_ws_close(ws, (uint16_t)(m->data[0] << 8 | m->data[1]), NULL);
            else if (enqueue(ws, SBX_WS_CLOSE, NULL, 0) == 0)
                ws->close_sent = true;
        }
        if (ws->close_sent && !pending(ws))
            ws->over = true;
        break;
    default:
        if (!ws->close_sent)
            ws->ops->message(ws, ws->data, m);
    }
}

/* Keeps what the owner cannot take yet (it paused us): parsed on resuming. */
static void hold(struct sbx_ws *ws, const uint8_t *buf, size_t n)
{
    uint8_t *copy = malloc(n);

    if (!copy) {
        ws->over = true;
        return;
    }
    memcpy(copy, buf, n);
    ws->extra = copy;
    ws->extra_len = n;
}

/* Parses bytes from the client; false once nothing more is to be read now. */
static bool consume(struct sbx_ws *ws, const uint8_t *buf, size_t n)
{
    while (n && !ws->close_received && !ws->over) {
        if (ws->paused) {
            hold(ws, buf, n);
            return false;
        }
        struct sbx_ws_msg m;
        size_t used;
        int r = sbx_ws_parse(&ws->parser, buf, n, &used, &m);
        buf += used;
        n -= used;
        if (r < 0) {
            sbx_ws_close(ws, ws->parser.close_code, ws->parser.why);
            ws->close_received = true; /* read no more: the stream is broken */
            return false;
        }
        if (r == 1)
            dispatch(ws, &m);
    }
    return !ws->close_received && !ws->over;
}

static void on_readable(struct sbx_ws *ws)
{
    uint8_t buf[READ_CHUNK];

    if (ws->extra) {
        uint8_t *held = ws->extra;
        bool more;
        ws->extra = NULL;
        more = consume(ws, held, ws->extra_len);
        free(held);
        if (!more)
            return;
    }
    for (int i = 0; i < READS_PER_EVENT && !ws->paused && !ws->close_received && !ws->over; i++) {
        ssize_t n = recv(ws->watch.fd, buf, sizeof(buf), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            ws->over = true; /* closed without a close frame, or reset */
            return;
        }
        if (!consume(ws, buf, (size_t)n))
            return;
    }
}

static void on_event(struct sbx_watch *w, uint32_t events)
{
    struct sbx_ws *ws = (struct sbx_ws *)((char *)w - offsetof(struct sbx_ws, watch));

    if (!ws->started) {
        ws->started = true;
        ws->ops->writable(ws, ws->data);
    }
    if (events & (EPOLLHUP | EPOLLERR))
        ws->over = true; /* the client is gone both ways, or the socket failed */
    if (!ws->over && !ws->paused && (ws->extra || (events & EPOLLIN)))
        on_readable(ws);
    if (!ws->over && pending(ws))
        flush(ws);
    if (!ws->over && ws->was_full && room_of(ws) >= ws->set->max_queue / 2) {
        ws->was_full = false;
        ws->ops->writable(ws, ws->data);
    }
    if (ws->over) {
        finish(ws);
        return;
    }
    rearm(ws);
}

static void on_sweep(struct sbx_timer *t)
{
    struct sbx_ws_set *set = (struct sbx_ws_set *)((char *)t - offsetof(struct sbx_ws_set, sweep));
    uint64_t now = now_ms();
    bool closing = false;

    set->sweep_armed = false;
    /* Marked here, ended on their next event (EPOLLOUT, right away): the list is not walked
     * while it changes. */
    pthread_mutex_lock(&set->lock);
    for (struct sbx_ws *ws = set->head; ws; ws = ws->next) {
        if (!ws->close_sent || ws->over)
            continue;
        if (now >= ws->deadline_ms) {
            ws->over = true;
            ws->events = EPOLLOUT;
            (void)sbx_loop_mod(set->loop, &ws->watch, EPOLLOUT);
        } else {
            closing = true;
        }
    }
    pthread_mutex_unlock(&set->lock);
    if (closing)
        arm_sweep(set);
}

int sbx_ws_set_new(struct sbx_ws_set **ret, struct sbx_loop *loop, unsigned max, size_t max_msg,
                   size_t max_queue, struct sbx_error *err)
{
    struct sbx_ws_set *set = calloc(1, sizeof(*set));
    int r;

    if (!set)
        return sbx_error_set(err, ENOMEM, "allocate websocket set");
    *set =
        (struct sbx_ws_set){.loop = loop, .max = max, .max_msg = max_msg, .max_queue = max_queue};
    pthread_mutex_init(&set->lock, NULL);
    r = sbx_timer_init(&set->sweep, loop, on_sweep, err);
    if (r < 0) {
        pthread_mutex_destroy(&set->lock);
        free(set);
        return r;
    }
    *ret = set;
    return 0;
}

void sbx_ws_set_free(struct sbx_ws_set *set)
{
    if (!set)
        return;
    pthread_mutex_lock(&set->lock);
    set->stopped = true;
    pthread_mutex_unlock(&set->lock);
    while (set->head)
        finish(set->head);
    sbx_timer_release(&set->sweep);
    pthread_mutex_destroy(&set->lock);
    free(set);
}

unsigned sbx_ws_set_count(struct sbx_ws_set *set)
{
    unsigned n;

    pthread_mutex_lock(&set->lock);
    n = set->count;
    pthread_mutex_unlock(&set->lock);
    return n;
}

/* Keepalive notices a peer that vanished (no FIN, no RST) within minutes rather than hours.
 * TCP_NODELAY, which libmicrohttpd turned off before the upgrade: an echo is a frame of a few
 * bytes, and with Nagle's algorithm one that follows an unacknowledged frame waits for the
 * client's delayed ACK (40 ms; bench/terminal.sh's bursts). */
static void tune_socket(int fd)
{
    int on = 1, idle = 60, intvl = 10, cnt = 6;

    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

bool sbx_ws_set_full(struct sbx_ws_set *set)
{
    return sbx_ws_set_count(set) >= set->max;
}

int sbx_ws_reserve(struct sbx_ws_set *set)
{
    int r = 0;

    pthread_mutex_lock(&set->lock);
    if (set->stopped)
        r = -ESHUTDOWN;
    else if (set->count >= set->max)
        r = -EBUSY;
    else
        set->count++;
    pthread_mutex_unlock(&set->lock);
    return r;
}

void sbx_ws_unreserve(struct sbx_ws_set *set)
{
    pthread_mutex_lock(&set->lock);
    set->count--;
    pthread_mutex_unlock(&set->lock);
}

int sbx_ws_open(struct sbx_ws_set *set, int fd, const uint8_t *extra, size_t n,
                void (*release)(void *arg), void *arg, const struct sbx_ws_ops *ops, void *data,
                struct sbx_error *err)
{
    struct sbx_ws *ws = calloc(1, sizeof(*ws));
    int r;

    if (!ws || (n && !(ws->extra = malloc(n)))) {
        free(ws);
        sbx_ws_unreserve(set);
        release(arg);
        return sbx_error_set(err, ENOMEM, "allocate websocket");
    }
    ws->watch = (struct sbx_watch){.fd = fd, .fn = on_event};
    ws->set = set;
    ws->ops = ops;
    ws->data = data;
    ws->release = release;
    ws->release_arg = arg;
    ws->events = EPOLLOUT;
    if (n)
        memcpy(ws->extra, extra, n);
    ws->extra_len = n;
    sbx_ws_parser_init(&ws->parser, set->max_msg);
    (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    tune_socket(fd);
    pthread_mutex_lock(&set->lock);
    if (set->stopped) {
        set->count--; /* the reservation */
        pthread_mutex_unlock(&set->lock);
        free(ws->extra);
        free(ws);
        release(arg);
        return sbx_error_set(err, ESHUTDOWN, "the server is stopping");
    }
    ws->next = set->head;
    if (set->head)
        set->head->prev = ws;
    set->head = ws; /* counted since its reservation */
    /* Added under the lock: the set's end cannot come between linking it and watching it. The
     * first event (writable, at once) starts it on the loop thread. */
    r = sbx_loop_add(set->loop, &ws->watch, EPOLLOUT, err);
    if (r < 0)
        unlink_locked(ws);
    pthread_mutex_unlock(&set->lock);
    if (r < 0)
        ws_free(ws);
    return r;
}
