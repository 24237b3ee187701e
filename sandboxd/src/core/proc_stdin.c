/* Writing to a process's stdin: queued, in order, without ever blocking the caller. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc_internal.h"

/* Fails every queued stdin write; called with p->lock held, returns the list to complete. */
struct wreq *proc_take_writes_locked(struct sbx_proc *p)
{
    struct wreq *list = p->wq_head;

    p->wq_head = p->wq_tail = NULL;
    return list;
}

void proc_complete_writes(struct wreq *list, int result)
{
    while (list) {
        struct wreq *w = list;
        list = w->next;
        if (w->done)
            w->done(w->data, result);
        free(w);
    }
}

/* Writes queued data until the pipe is full; returns the completed requests. */
static struct wreq *flush_locked(struct sbx_proc *p, int *result)
{
    struct wreq *done = NULL, **tail = &done;

    *result = 0;
    while (p->wq_head) {
        struct wreq *w = p->wq_head;
        if (w->close) {
            if (p->pty) {
                const char eof = 4; /* VEOF: the line discipline turns it into end of file */
                if (write(p->in.fd, &eof, 1) < 0 && errno == EAGAIN)
                    break;
            } else {
                proc_close_watch(p, &p->in);
            }
        } else {
            ssize_t n = write(p->in.fd, w->buf + w->off, w->len - w->off);
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
        p->wq_head = w->next;
        if (!p->wq_head)
            p->wq_tail = NULL;
        w->next = NULL;
        *tail = w;
        tail = &w->next;
    }
    /* Armed only while writes wait: epoll reports an error on a pipe whose reader is gone
     * whatever was asked, so an idle stdin stays disarmed (oneshot) rather than spinning. */
    if (p->in.fd >= 0 && p->wq_head && !*result)
        (void)sbx_loop_mod(p->t->loop, &p->in, EPOLLOUT | EPOLLONESHOT);
    return done;
}

void proc_on_writable(struct sbx_watch *w, uint32_t events)
{
    struct sbx_proc *p = container_of(w, struct sbx_proc, in);
    struct wreq *done, *failed = NULL;
    int result;

    (void)events;
    pthread_mutex_lock(&p->lock);
    done = flush_locked(p, &result);
    if (result < 0) {
        failed = proc_take_writes_locked(p);
        proc_close_watch(p, &p->in);
    }
    pthread_mutex_unlock(&p->lock);
    proc_complete_writes(done, 0);
    proc_complete_writes(failed, result);
}

static struct wreq *wreq_new(const uint8_t *buf, size_t len, bool close, sbx_write_done_fn done,
                             void *data)
{
    struct wreq *w = malloc(sizeof(*w) + len);

    if (!w)
        return NULL;
    *w = (struct wreq){.len = len, .close = close, .done = done, .data = data};
    if (len)
        memcpy(w->buf, buf, len);
    return w;
}

/* Queues len bytes (when len) and then the close (when close), under one hold of the lock: a
 * process that exits meanwhile fails them together. done runs once, for the last of them. */
static int enqueue(struct sbx_proc *p, const uint8_t *buf, size_t len, bool close,
                   sbx_write_done_fn done, void *data, struct sbx_error *err)
{
    bool both = len && close;
    struct wreq *w = wreq_new(buf, len, close && !both, both ? NULL : done, both ? NULL : data);
    struct wreq *c = both ? wreq_new(NULL, 0, true, done, data) : NULL, *completed, *failed = NULL;
    int result;

    if (!w || (both && !c)) {
        free(w);
        free(c);
        return sbx_error_set(err, ENOMEM, "allocate stdin buffer");
    }
    w->next = c;
    pthread_mutex_lock(&p->lock);
    if (p->in.fd < 0) {
        pthread_mutex_unlock(&p->lock);
        free(w);
        free(c);
        return sbx_error_set(err, EPIPE, "stdin of process %d is closed", p->id);
    }
    if (p->wq_tail)
        p->wq_tail->next = w;
    else
        p->wq_head = w;
    p->wq_tail = c ? c : w;
    completed = flush_locked(p, &result);
    if (result < 0) {
        failed = proc_take_writes_locked(p);
        proc_close_watch(p, &p->in);
    }
    pthread_mutex_unlock(&p->lock);
    proc_complete_writes(completed, 0);
    proc_complete_writes(failed, result);
    return 0;
}

int sbx_proc_write(struct sbx_proc *p, const uint8_t *buf, size_t len, sbx_write_done_fn done,
                   void *data, struct sbx_error *err)
{
    return enqueue(p, buf, len, false, done, data, err);
}

int sbx_proc_close_stdin(struct sbx_proc *p, sbx_write_done_fn done, void *data,
                         struct sbx_error *err)
{
    return enqueue(p, NULL, 0, true, done, data, err);
}

int sbx_proc_write_close(struct sbx_proc *p, const uint8_t *buf, size_t len, sbx_write_done_fn done,
                         void *data, struct sbx_error *err)
{
    return enqueue(p, buf, len, true, done, data, err);
}
