/* sbx_kube_cancel against a loopback HTTP server: a request in flight, one waiting for the only
 * connection and one waiting for its turn under the QPS limit all end with -ECANCELED; new ones
 * fail at once; after cancel(false) requests work again. Without cancellation each would wait
 * out its timeout or its slot (minutes) and the test would time out. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "kube.h"
#include "tap.h"

struct server {
    int lfd, port;
    atomic_bool silent; /* hold requests without answering */
    int held[4];
    int nheld;
    sem_t got; /* posted for each request held */
};

static void read_request(int fd)
{
    char buf[4096];
    size_t len = 0;
    ssize_t n;

    while (len < sizeof(buf) - 1 && (n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0) {
        len += (size_t)n;
        buf[len] = '\0';
        if (strstr(buf, "\r\n\r\n"))
            return;
    }
}

static void *serve(void *p)
{
    static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 "Content-Length: 2\r\nConnection: close\r\n\r\n{}";
    struct server *s = p;
    int fd;

    while ((fd = accept(s->lfd, NULL, NULL)) >= 0) {
        read_request(fd);
        if (atomic_load(&s->silent) && s->nheld < 4) {
            s->held[s->nheld++] = fd;
            sem_post(&s->got);
            continue;
        }
        (void)!write(fd, answer, sizeof(answer) - 1);
        close(fd);
    }
    return NULL;
}

static int listen_loopback(int *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
        abort();
    *port = ntohs(sa.sin_port);
    return fd;
}

static struct sbx_kube *client(int port, double qps, int connections)
{
    struct sbx_kube_config cfg = {0};
    struct sbx_kube_opts o = {
        .qps = qps, .burst = 1, .timeout_ms = 600000, .connections = connections};
    struct sbx_error err = {0};
    struct sbx_kube *k = NULL;

    if (asprintf(&cfg.server, "http://127.0.0.1:%d", port) < 0 ||
        sbx_kube_new(&cfg, &o, &k, &err) < 0)
        abort();
    return k;
}

struct call {
    struct sbx_kube *k;
    pthread_t thread;
    int r;
    long status;
    struct sbx_error err;
};

static void *do_get(void *p)
{
    struct call *c = p;

    c->r = sbx_kube_request(c->k, "GET", "/api/v1/namespaces/t/pods/p", NULL, NULL, &c->status,
                            NULL, &c->err);
    return NULL;
}

static void start(struct call *c, struct sbx_kube *k)
{
    *c = (struct call){.k = k};
    if (pthread_create(&c->thread, NULL, do_get, c) != 0)
        abort();
}

static int get(struct sbx_kube *k)
{
    struct call c = {.k = k};

    do_get(&c);
    return c.r == 0 ? (int)c.status : c.r;
}

int main(void)
{
    struct server s = {0};
    pthread_t srv;
    struct call flight, queued, throttled;

    curl_global_init(CURL_GLOBAL_DEFAULT);
    s.lfd = listen_loopback(&s.port);
    sem_init(&s.got, 0, 0);
    pthread_create(&srv, NULL, serve, &s);

    /* One connection: the first request is held by the server, the second waits for it. */
    struct sbx_kube *k = client(s.port, 0, 1);
    ok(get(k) == 200, "a request is answered");
    atomic_store(&s.silent, true);
    start(&flight, k);
    sem_wait(&s.got); /* in flight */
    start(&queued, k);
    usleep(50000); /* lets it reach the wait for the connection (it fails the same way if not) */
    sbx_kube_cancel(k, true);
    pthread_join(flight.thread, NULL);
    pthread_join(queued.thread, NULL);
    ok(flight.r == -ECANCELED, "the request in flight is cancelled (%d: %s)", flight.r,
       flight.err.msg);
    ok(queued.r == -ECANCELED, "the request waiting for a connection is cancelled (%d: %s)",
       queued.r, queued.err.msg);
    ok(get(k) == -ECANCELED, "a new request fails at once");
    atomic_store(&s.silent, false);
    sbx_kube_cancel(k, false);
    ok(get(k) == 200, "after cancel(false) requests are answered again");
    sbx_kube_free(k);

    /* One request every 1000 s: the second waits for its slot. */
    k = client(s.port, 0.001, 1);
    ok(get(k) == 200, "the burst's request is answered");
    start(&throttled, k);
    usleep(50000);
    sbx_kube_cancel(k, true);
    pthread_join(throttled.thread, NULL);
    ok(throttled.r == -ECANCELED, "the request waiting for its turn is cancelled (%d: %s)",
       throttled.r, throttled.err.msg);
    sbx_kube_free(k);

    shutdown(s.lfd, SHUT_RDWR);
    pthread_join(srv, NULL);
    close(s.lfd);
    for (int i = 0; i < s.nheld; i++)
        close(s.held[i]);
    sem_destroy(&s.got);
    curl_global_cleanup();
    return done_testing();
}
