/* Writing to a process's stdin: queued, in order, without ever blocking the caller. */
#define _GNU_SOURCE
#include "proc_stdin.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

struct sbx_proc_stdin_write {
    struct sbx_proc_stdin_write *next;
    size_t len, off;
    bool close; /* a close marker, not data */
    void (*done)(void *data, int result);
    void *data;
    uint8_t buf[];
};

static void close_watch(struct sbx_proc_stdin *s)
{
    if (s->w.fd < 0)
        return;
    sbx_loop_del(s->loop, &s->w);
    close(s->w.fd);
    s->w.fd = -1;
}

struct sbx_proc_stdin_write *sbx_proc_stdin_shut_locked(struct sbx_proc_stdin *s)
{
    struct sbx_proc_stdin_write *list = s->head;

    s->head = s->tail = NULL;
    s->queued = 0;
    close_watch(s);
    return list;
}

void sbx_proc_stdin_complete(struct sbx_proc_stdin_write *list, int result)
{
    while (list) {
        struct sbx_proc_stdin_write *w = list;
        list = w->next;
        if (w->done)
            w->done(w->data, result);
        free(w);
    }
}

/* Writes queued data until the pipe is full; returns the completed requests. */
static struct sbx_proc_stdin_write *flush_locked(struct sbx_proc_stdin *s, int *result)
{
    struct sbx_proc_stdin_write *done = NULL, **tail = &done;

    *result = 0;
    while (s->head) {
        struct sbx_proc_stdin_write *w = s->head;
        if (w->close) {
            if (s->pty) {
                const char eof = 4; /* VEOF: the line discipline turns it into end of file */
                if (write(s->w.fd, &eof, 1) < 0 && errno == EAGAIN)
                    break;
            } else {
                close_watch(s);
            }
        } else {
            ssize_t n = write(s->w.fd, w->buf + w->off, w->len - w->off);
            if (n < 0 && errno == EAGAIN)
                break;
            if (n < 0 && errno != EINTR) {
                *result = -errno;
                break;
            }
            w->off += n > 0 ? (size_t)n : 0;
            if (w->off < w->len)
                continue;
        }
        s->head = w->next;
        if (!s->head)
            s->tail = NULL;
        s->queued -= w->len;
        w->next = NULL;
        *tail = w;
        tail = &w->next;
    }
    /* Armed only while writes wait: epoll reports an error on a pipe whose reader is gone
     * whatever was asked, so an idle stdin stays disarmed (oneshot) rather than spinning. */
    if (s->w.fd >= 0 && s->head && !*result)
        (void)sbx_loop_mod(s->loop, &s->w, EPOLLOUT | EPOLLONESHOT);
    return done;
}

/* Writes what the pipe takes and shuts stdin if a write fails; then releases the lock and
 * completes what was written and what failed. Called with the lock held. */
static void flush_unlock(struct sbx_proc_stdin *s)
{
    struct sbx_proc_stdin_write *done, *failed = NULL;
    int result;

    done = flush_locked(s, &result);
    if (result < 0)
        failed = sbx_proc_stdin_shut_locked(s);
    pthread_mutex_unlock(s->lock);
    sbx_proc_stdin_complete(done, 0);
    sbx_proc_stdin_complete(failed, result);
}

/* The loop's callback for a writable stdin. */
static void on_writable(struct sbx_watch *w, uint32_t events)
{
    struct sbx_proc_stdin *s = (struct sbx_proc_stdin *)w; /* w is its first member */

    (void)events;
    pthread_mutex_lock(s->lock);
    flush_unlock(s);
}

void sbx_proc_stdin_init(struct sbx_proc_stdin *s, struct sbx_loop *loop, pthread_mutex_t *lock,
                         bool pty)
{
    *s = (struct sbx_proc_stdin){
        .w = {.fd = -1, .fn = on_writable}, .loop = loop, .lock = lock, .pty = pty};
}

static struct sbx_proc_stdin_write *write_new(const uint8_t *buf, size_t len, bool close,
                                              void (*done)(void *data, int result), void *data)
{
    struct sbx_proc_stdin_write *w = malloc(sizeof(*w) + len);

    if (!w)
        return NULL;
    *w = (struct sbx_proc_stdin_write){.len = len, .close = close, .done = done, .data = data};
    if (len)
        memcpy(w->buf, buf, len);
    return w;
}

int sbx_proc_stdin_queue(struct sbx_proc_stdin *s, const uint8_t *buf, size_t len, bool close,
                         void (*done)(void *data, int result), void *data, struct sbx_error *err)
{
    bool both = len && close;
    struct sbx_proc_stdin_write *w =
        write_new(buf, len, close && !both, both ? NULL : done, both ? NULL : data);
    struct sbx_proc_stdin_write *c = both ? write_new(NULL, 0, true, done, data) : NULL;

    if (!w || (both && !c)) {
        free(w);
        free(c);
        return sbx_error_set(err, ENOMEM, "allocate stdin buffer");
    }
    w->next = c;
    pthread_mutex_lock(s->lock);
    if (s->w.fd < 0) {
        pthread_mutex_unlock(s->lock);
        free(w);
        free(c);
        return sbx_error_set(err, EPIPE, "stdin of process %d is closed", s->id);
    }
    if (len && s->queued && s->queued + len > SBX_PROC_STDIN_MAX) {
        size_t held = s->queued;
        pthread_mutex_unlock(s->lock);
        free(w);
        free(c);
        return sbx_error_set(err, EAGAIN,
                             "stdin of process %d holds %zu bytes it has not read (at most %u "
                             "MiB): write again once it reads",
                             s->id, held, SBX_PROC_STDIN_MAX >> 20);
    }
    s->queued += len;
    if (s->tail)
        s->tail->next = w;
    else
        s->head = w;
    s->tail = c ? c : w;
    flush_unlock(s);
    return 0;
}
