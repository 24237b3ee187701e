#define _GNU_SOURCE
#include "hasher.h"

#include <errno.h>
/* The SHA-256 functions themselves, not the EVP layer: EVP brings OpenSSL's provider machinery
 * (3 MiB of the static binary) for one hash. Deprecated in OpenSSL 3, still implemented there
 * with the same assembly. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Below this, hashing inline costs less than a thread. */
#define THREAD_AFTER (4u << 20)
#define READ_CHUNK   (1u << 20)

struct sbx_hasher {
    int fd;
    SHA256_CTX sha;
    bool threaded;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t written; /* bytes in the file */
    uint64_t hashed;  /* bytes hashed; the thread's, under lock once threaded */
    bool closing;
    int error;
    uint8_t *buf;
};

int sbx_hasher_new(int fd, struct sbx_hasher **ret, struct sbx_error *err)
{
    struct sbx_hasher *h = calloc(1, sizeof(*h));

    if (!h)
        return sbx_error_set(err, ENOMEM, "allocate hasher");
    h->fd = fd;
    SHA256_Init(&h->sha);
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    *ret = h;
    return 0;
}

/* Reads back and hashes what the writer announced, until told to close. */
static void *hash_thread(void *arg)
{
    struct sbx_hasher *h = arg;

    pthread_mutex_lock(&h->lock);
    for (;;) {
        uint64_t at = h->hashed, avail;
        ssize_t n;

        while (h->hashed == h->written && !h->closing)
            pthread_cond_wait(&h->cond, &h->lock);
        if (h->hashed == h->written || h->error)
            break;
        avail = h->written - at;
        pthread_mutex_unlock(&h->lock);
        n = pread(h->fd, h->buf, avail < READ_CHUNK ? avail : READ_CHUNK, (off_t)at);
        if (n > 0)
            SHA256_Update(&h->sha, h->buf, (size_t)n);
        pthread_mutex_lock(&h->lock);
        if (n <= 0)
            h->error = n < 0 ? errno : EIO;
        else
            h->hashed += (uint64_t)n;
    }
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

void sbx_hasher_update(struct sbx_hasher *h, const void *buf, size_t len)
{
    if (!h->threaded) {
        h->written += len;
        if (h->written <= THREAD_AFTER || !(h->buf = malloc(READ_CHUNK)) ||
            pthread_create(&h->thread, NULL, hash_thread, h) != 0) {
            /* Small, or no thread to be had: inline. */
            free(h->buf);
            h->buf = NULL;
            SHA256_Update(&h->sha, buf, len);
            h->hashed = h->written;
            return;
        }
        /* The thread starts where inline hashing stopped: these bytes are its first. */
        pthread_mutex_lock(&h->lock);
        h->threaded = true;
        pthread_cond_signal(&h->cond);
        pthread_mutex_unlock(&h->lock);
        return;
    }
    pthread_mutex_lock(&h->lock);
    h->written += len;
    pthread_cond_signal(&h->cond);
    pthread_mutex_unlock(&h->lock);
}

static void stop(struct sbx_hasher *h)
{
    if (!h->threaded)
        return;
    pthread_mutex_lock(&h->lock);
    h->closing = true;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->thread, NULL);
    h->threaded = false;
}

int sbx_hasher_final(struct sbx_hasher *h, uint8_t out[SBX_SHA256_LEN], struct sbx_error *err)
{
    stop(h);
    if (h->error)
        return sbx_error_set(err, h->error, "hash the written file: %s", strerror(h->error));
    SHA256_Final(out, &h->sha);
    return 0;
}

void sbx_hasher_free(struct sbx_hasher *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->lock);
    if (!h->error)
        h->error = ECANCELED; /* abandoned: the thread need not catch up */
    pthread_mutex_unlock(&h->lock);
    stop(h);
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->lock);
    free(h->buf);
    free(h);
}
