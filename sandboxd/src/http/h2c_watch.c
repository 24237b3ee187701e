/* The h2c front's clock and epoll set, which its connections (h2c.c) and their streams
 * (h2c_stream.c) both use. */
#define _GNU_SOURCE
#include <sys/epoll.h>
#include <time.h>

#include "h2c_internal.h"

uint64_t h2c_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Sets what epoll reports of fd: not watched at all while nothing is wanted, so a hung-up socket
 * that waits for room cannot spin the loop. */
void h2c_arm(struct sbx_h2c *f, struct h2c_watch *w, int fd, unsigned *now, unsigned want)
{
    struct epoll_event ev = {.events = want, .data.ptr = w};
    int op = !*now ? EPOLL_CTL_ADD : want ? EPOLL_CTL_MOD : EPOLL_CTL_DEL;

    if (want == *now)
        return;
    if (epoll_ctl(f->ep, op, fd, &ev) == 0)
        *now = want;
}
