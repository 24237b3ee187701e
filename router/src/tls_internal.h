/* Shared by tls.c (contexts, reloads, the connections' registry) and tls_conn.c (one
 * connection: the handshake and the plaintext pump). */
#pragma once

#include <openssl/ssl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#include "tls.h"

struct file_stamp {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

struct tls_conn {
    struct sbx_tls *t;
    struct tls_conn *prev, *next;
    int fd;
    struct sockaddr_storage peer;
    socklen_t peer_len;
};

struct sbx_tls {
    struct sbx_tls_opts o;
    pthread_mutex_t lock;
    pthread_cond_t gone;
    SSL_CTX *ctx; /* the current one; each connection holds a reference to its own */
    struct file_stamp cert, key;
    uint64_t checked_ms;
    struct tls_conn *conns;
    unsigned nconns;
    bool stopping;
    struct sbx_tls_stats stats;
};

/* The context for a new connection (a reference the caller frees), reloaded first when the
 * files changed. */
SSL_CTX *tls_context(struct sbx_tls *t);
