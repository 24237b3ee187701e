#include "loop.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "cleanup.h"

#define MAX_EVENTS 64

struct task {
    struct task *next;
    sbx_task_fn fn;
    void *arg;
};

struct sbx_loop {
    int epfd;
    struct sbx_watch wake; /* eventfd: tasks posted or stop requested */
    pthread_mutex_t lock;
    struct task *head, *tail;
    bool stop;
    pthread_t thread;
    bool running;
    /* Events fetched in the current iteration, so that sbx_loop_del can cancel them. */
    struct epoll_event events[MAX_EVENTS];
    int nevents;
};

static void drain_wake(struct sbx_watch *w, uint32_t events);
static void run_tasks(struct sbx_loop *loop);

int sbx_loop_new(struct sbx_loop **ret, struct sbx_error *err)
{
    struct sbx_loop *loop = calloc(1, sizeof(*loop));
    int r;

    if (!loop)
        return sbx_error_set(err, ENOMEM, "allocate loop");
    pthread_mutex_init(&loop->lock, NULL);
    loop->wake.fd = -1;
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (loop->epfd < 0) {
        r = sbx_error_set(err, errno, "epoll_create1");
        goto fail;
    }
    loop->wake.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (loop->wake.fd < 0) {
        r = sbx_error_set(err, errno, "eventfd");
        goto fail;
    }
    loop->wake.fn = drain_wake;
    r = sbx_loop_add(loop, &loop->wake, EPOLLIN, err);
    if (r < 0)
        goto fail;
    *ret = loop;
    return 0;
fail:
    sbx_loop_free(loop);
    return r;
}

void sbx_loop_run_pending(struct sbx_loop *loop)
{
    for (;;) {
        bool more;
        run_tasks(loop);
        pthread_mutex_lock(&loop->lock);
        more = loop->head != NULL;
        pthread_mutex_unlock(&loop->lock);
        if (!more)
            break;
    }
}

void sbx_loop_free(struct sbx_loop *loop)
{
    if (!loop)
        return;
    /* What was posted after the last iteration (frees, mostly) still runs, and what those post. */
    sbx_loop_run_pending(loop);
    sbx_closep(&loop->epfd);
    sbx_closep(&loop->wake.fd);
    pthread_mutex_destroy(&loop->lock);
    free(loop);
}

int sbx_loop_add(struct sbx_loop *loop, struct sbx_watch *w, uint32_t events, struct sbx_error *err)
{
    struct epoll_event ev = {.events = events, .data.ptr = w};

    if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, w->fd, &ev) < 0)
        return sbx_error_set(err, errno, "epoll_ctl add fd %d", w->fd);
    return 0;
}

int sbx_loop_mod(struct sbx_loop *loop, struct sbx_watch *w, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = w};

    if (epoll_ctl(loop->epfd, EPOLL_CTL_MOD, w->fd, &ev) < 0)
        return -errno;
    return 0;
}

void sbx_loop_del(struct sbx_loop *loop, struct sbx_watch *w)
{
    (void)epoll_ctl(loop->epfd, EPOLL_CTL_DEL, w->fd, NULL);
    if (sbx_loop_is_current(loop)) {
        for (int i = 0; i < loop->nevents; i++)
            if (loop->events[i].data.ptr == w)
                loop->events[i].data.ptr = NULL;
    }
}

int sbx_loop_post(struct sbx_loop *loop, sbx_task_fn fn, void *arg)
{
    struct task *t = malloc(sizeof(*t));
    uint64_t one = 1;
    bool was_empty;

    if (!t)
        return -ENOMEM;
    t->next = NULL;
    t->fn = fn;
    t->arg = arg;
    pthread_mutex_lock(&loop->lock);
    was_empty = !loop->head;
    if (loop->tail)
        loop->tail->next = t;
    else
        loop->head = t;
    loop->tail = t;
    pthread_mutex_unlock(&loop->lock);
    if (was_empty)
        (void)!write(loop->wake.fd, &one, sizeof(one));
    return 0;
}

static void drain_wake(struct sbx_watch *w, uint32_t events)
{
    uint64_t n;

    (void)events;
    (void)!read(w->fd, &n, sizeof(n));
}

/* Runs the posted tasks. Between batches of events only: a task may free a watch that an event
 * fetched in the current batch still points to. */
static void run_tasks(struct sbx_loop *loop)
{
    struct task *list;

    pthread_mutex_lock(&loop->lock);
    list = loop->head;
    loop->head = loop->tail = NULL;
    pthread_mutex_unlock(&loop->lock);
    while (list) {
        struct task *t = list;
        list = t->next;
        t->fn(t->arg);
        free(t);
    }
}

int sbx_loop_run(struct sbx_loop *loop, struct sbx_error *err)
{
    loop->thread = pthread_self();
    __atomic_store_n(&loop->running, true, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&loop->stop, __ATOMIC_ACQUIRE)) {
        int n = epoll_wait(loop->epfd, loop->events, MAX_EVENTS, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return sbx_error_set(err, errno, "epoll_wait");
        }
        loop->nevents = n;
        for (int i = 0; i < n; i++) {
            struct sbx_watch *w = loop->events[i].data.ptr;
            if (w)
                w->fn(w, loop->events[i].events);
        }
        loop->nevents = 0;
        run_tasks(loop);
    }
    __atomic_store_n(&loop->running, false, __ATOMIC_RELEASE);
    return 0;
}

void sbx_loop_stop(struct sbx_loop *loop)
{
    uint64_t one = 1;

    __atomic_store_n(&loop->stop, true, __ATOMIC_RELEASE);
    (void)!write(loop->wake.fd, &one, sizeof(one));
}

bool sbx_loop_is_current(const struct sbx_loop *loop)
{
    return __atomic_load_n(&loop->running, __ATOMIC_ACQUIRE) &&
           pthread_equal(loop->thread, pthread_self());
}

static void timer_fired(struct sbx_watch *w, uint32_t events)
{
    struct sbx_timer *t = (struct sbx_timer *)w;
    uint64_t n;

    (void)events;
    if (read(w->fd, &n, sizeof(n)) == sizeof(n))
        t->fn(t);
}

int sbx_timer_init(struct sbx_timer *t, struct sbx_loop *loop, void (*fn)(struct sbx_timer *t),
                   struct sbx_error *err)
{
    int r;

    t->loop = loop;
    t->fn = fn;
    t->watch.fn = timer_fired;
    t->watch.fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (t->watch.fd < 0)
        return sbx_error_set(err, errno, "timerfd_create");
    r = sbx_loop_add(loop, &t->watch, EPOLLIN, err);
    if (r < 0)
        sbx_closep(&t->watch.fd);
    return r;
}

int sbx_timer_arm(struct sbx_timer *t, uint64_t ms)
{
    struct itimerspec its = {0};

    its.it_value.tv_sec = (time_t)(ms / 1000);
    its.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
    if (timerfd_settime(t->watch.fd, 0, &its, NULL) < 0)
        return -errno;
    return 0;
}

void sbx_timer_release(struct sbx_timer *t)
{
    if (!t->loop || t->watch.fd < 0)
        return;
    sbx_loop_del(t->loop, &t->watch);
    sbx_closep(&t->watch.fd);
    t->watch.fd = -1;
}
