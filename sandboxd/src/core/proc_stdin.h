/* A process's stdin: writes queued in order and flushed on the loop as the pipe (or pty) takes
 * them, so that a writer never blocks. The process table (proc.c) embeds one in each process;
 * this module knows nothing else of processes. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "loop.h"

/* The most bytes a process's stdin holds that the process has not read: a write past it is
 * refused (-EAGAIN) while others wait, so writers that outpace a process that never reads (a
 * stream of input, calls that time out and come again) cannot grow the daemon without bound.
 * A single write of any size is taken when nothing waits. */
#define SBX_PROC_STDIN_MAX (64u << 20)

/* A queued write or close; private to proc_stdin.c. */
struct sbx_proc_stdin_write;

struct sbx_proc_stdin {
    struct sbx_watch w; /* first: the loop's callback finds the queue from it; fd -1 if closed */
    struct sbx_loop *loop;
    pthread_mutex_t *lock; /* the owner's; guards w.fd and the queue */
    bool pty;              /* a close sends the EOF character instead of closing the fd */
    int32_t id;            /* the owner's, for messages */
    struct sbx_proc_stdin_write *head, *tail;
    size_t queued; /* bytes of the queued writes, whole until each is written */
};

/* An empty queue with no fd (w.fd -1). The owner sets w.fd to the write end and adds w to the
 * loop, unarmed (EPOLLONESHOT): it is armed while writes wait. */
void sbx_proc_stdin_init(struct sbx_proc_stdin *s, struct sbx_loop *loop, pthread_mutex_t *lock,
                         bool pty);

/* Queues len bytes (when len) and then the close (when close), under one hold of the lock: a
 * process that exits meanwhile fails them together. done(data, 0 or -errno) runs once, for the
 * last of them, maybe before this returns, maybe on the loop thread. Returns 0, -ENOMEM,
 * -EPIPE once stdin is closed, or -EAGAIN past SBX_PROC_STDIN_MAX. Takes the lock. */
int sbx_proc_stdin_queue(struct sbx_proc_stdin *s, const uint8_t *buf, size_t len, bool close,
                         void (*done)(void *data, int result), void *data, struct sbx_error *err);

/* Closes stdin (removing it from the loop) and takes every queued write off it, for
 * sbx_proc_stdin_complete once the lock is released. Called with the lock held, or when no
 * other thread can reach s. */
struct sbx_proc_stdin_write *sbx_proc_stdin_shut_locked(struct sbx_proc_stdin *s);

/* Calls each write's done(result) and frees the list; without the lock. */
void sbx_proc_stdin_complete(struct sbx_proc_stdin_write *list, int result);
