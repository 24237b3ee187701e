/* The daemon's event loop: one epoll instance run by the main thread. Watches on fds, timers and
 * tasks posted from other threads (gRPC completion-queue threads). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

#include "error.h"

struct sbx_loop;
struct sbx_watch;

typedef void (*sbx_watch_fn)(struct sbx_watch *w, uint32_t events);

/* A watched fd. Embed it in the owner's struct; the loop never frees it. */
struct sbx_watch {
    int fd;
    sbx_watch_fn fn;
};

typedef void (*sbx_task_fn)(void *arg);

/* Creates a loop; returns 0 or -errno. */
int sbx_loop_new(struct sbx_loop **ret, struct sbx_error *err);
void sbx_loop_free(struct sbx_loop *loop);

/* Registers w->fd with epoll for events (EPOLLIN, EPOLLOUT, EPOLLONESHOT...). Thread-safe. */
int sbx_loop_add(struct sbx_loop *loop, struct sbx_watch *w, uint32_t events,
                 struct sbx_error *err);

/* Changes the events of a registered watch (re-arms a oneshot watch). Thread-safe. */
int sbx_loop_mod(struct sbx_loop *loop, struct sbx_watch *w, uint32_t events);

/* Unregisters w; the caller then closes the fd. An event for w already fetched in this loop
 * iteration is dropped (the watch must stay allocated until the current callback returns). */
void sbx_loop_del(struct sbx_loop *loop, struct sbx_watch *w);

/* Runs fn(arg) on the loop thread soon, after the current batch of events (so it may free what
 * a fetched event points to); or at sbx_loop_free. Thread-safe; returns 0 or -ENOMEM. */
int sbx_loop_post(struct sbx_loop *loop, sbx_task_fn fn, void *arg);

/* Runs the posted tasks, and those they post, now; after the loop stopped, so that what one
 * module's frees post runs before the next module goes. */
void sbx_loop_run_pending(struct sbx_loop *loop);

/* Runs until sbx_loop_stop(); returns 0 or -errno. */
int sbx_loop_run(struct sbx_loop *loop, struct sbx_error *err);

/* Makes sbx_loop_run() return after the current iteration. Thread-safe. */
void sbx_loop_stop(struct sbx_loop *loop);

/* True when called from the thread running the loop. */
bool sbx_loop_is_current(const struct sbx_loop *loop);

/* A one-shot timer on the loop (timerfd). */
struct sbx_timer {
    struct sbx_watch watch;
    struct sbx_loop *loop;
    void (*fn)(struct sbx_timer *t);
};

int sbx_timer_init(struct sbx_timer *t, struct sbx_loop *loop, void (*fn)(struct sbx_timer *t),
                   struct sbx_error *err);
/* Arms the timer to fire once after ms milliseconds (0 disarms). */
int sbx_timer_arm(struct sbx_timer *t, uint64_t ms);
void sbx_timer_release(struct sbx_timer *t);
