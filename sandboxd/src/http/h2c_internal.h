/* What the h2c front's two files share: the front (h2c.c: its thread, connections and their
 * sessions) and the streams (h2c_stream.c: each one's bridge to an HTTP/1.1 connection). Every
 * object lives on the front's thread alone. */
#pragma once

#include <nghttp2/nghttp2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "h2c.h"
#include "h2c_resp.h"

#define H2C_WINDOW    65535 /* a stream's receive window: its request buffer's bound */
#define H2C_OUT_MAX   16384 /* a stream's response bytes waiting for the client's window */
#define H2C_HEADERS   16384 /* a request's header list, as RFC 9113 counts it */
#define H2C_IDLE_POLL 1000  /* ms between looks for idle connections */

/* What an epoll event names; dead ones are freed after the batch that may still name them. */
enum h2c_kind { H2C_WAKE, H2C_CONN, H2C_STREAM };

struct h2c_watch {
    enum h2c_kind kind;
    bool dead;
};

struct h2c_stream;

struct h2c_conn {
    struct h2c_watch w; /* first: epoll names it */
    struct sbx_h2c *f;
    int fd;
    nghttp2_session *s;
    struct sockaddr_storage peer;
    socklen_t peer_len;
    unsigned events;    /* epoll interest now */
    bool blocked;       /* the socket took no more of the last send */
    bool failed;        /* a callback found the connection broken */
    uint64_t active_ms; /* when it last sent something */
    unsigned n_streams;
    struct h2c_stream *streams;
    struct h2c_conn *prev, *next; /* in f->conns; next also links the dead */
};

struct h2c_stream {
    struct h2c_watch w; /* first: epoll names it */
    struct h2c_conn *c;
    int32_t id;
    int fd;          /* our end of the socketpair; -1 before it is made and after it is shut */
    unsigned events; /* epoll interest now */
    struct h2c_stream *prev, *next; /* in c->streams; next also links the dead */
    /* the request's head, gathered from HEADERS */
    char *method, *path, *authority;
    char *fields; /* "Name: value\r\n" lines */
    size_t fields_len, header_bytes;
    bool too_large, has_length, no_body;
    /* the request as written to the socketpair */
    char *head;
    size_t head_len, head_off;
    char *body; /* DATA not yet written (at most the window) */
    size_t body_len, body_off;
    size_t unconsumed; /* DATA bytes received and not yet given back to the client's window */
    bool chunked, req_end, last_chunk, crlf_due, sink;
    uint64_t chunk_left;
    char frame[32];
    size_t frame_len, frame_off;
    /* the response, read from the socketpair */
    bool relayed;  /* its head has been submitted */
    bool resp_end; /* every byte of it is in out */
    bool deferred; /* the data provider waits for out */
    size_t out_len, out_off;
    char out[H2C_OUT_MAX];
    struct sbx_h2c_resp p;
};

struct h2c_pending {
    int fd;
    struct sockaddr_storage peer;
    socklen_t len;
    struct h2c_pending *next;
};

struct sbx_h2c {
    struct sbx_h2c_opts o;
    int ep, wake_fd;
    pthread_t thread;
    bool running;
    struct h2c_watch wake;
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    pthread_mutex_t lock; /* the queue and stop: the rest is the thread's */
    struct h2c_pending *queue;
    unsigned queued;
    bool stop;
    struct h2c_conn *conns;
    unsigned n_conns, n_streams;
    struct h2c_conn *dead_conns;
    struct h2c_stream *dead_streams;
};

/* h2c_stream.c */
void h2c_stream_callbacks(nghttp2_session_callbacks *cbs);
void h2c_stream_on_event(struct h2c_stream *s, uint32_t events);
/* Closes its socketpair and marks it dead (freed by h2c_bury); the session forgets it. */
void h2c_stream_kill(struct h2c_stream *s);
void h2c_stream_free(struct h2c_stream *s);

/* h2c.c */
/* Sends what the session has to send and sets the socket's epoll interest; kills the
 * connection when the session is over or the socket broken. */
void h2c_conn_flush(struct h2c_conn *c);
void h2c_arm(struct sbx_h2c *f, struct h2c_watch *w, int fd, unsigned *now, unsigned want);
uint64_t h2c_now_ms(void);
