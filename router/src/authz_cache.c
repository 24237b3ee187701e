#define _GNU_SOURCE
#include "authz_cache.h"

#include <openssl/sha.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NIL UINT32_MAX

/* Entries live in one array; a hash table of chains indexes them by key, and a doubly linked
 * list orders them from the most recently used (head) to the least (tail). */
struct node {
    uint8_t key[SBX_DIGEST_LEN];
    struct sbx_authz_entry e;
    uint64_t expires_ms;
    uint32_t chain;      /* next in the bucket */
    uint32_t prev, next; /* in the LRU list */
};

struct sbx_authz_cache {
    pthread_mutex_t lock;
    struct node *nodes;
    uint32_t *buckets;
    uint32_t cap, n, mask;
    uint32_t head, tail;
};

struct sbx_authz_cache *sbx_authz_cache_new(unsigned cap)
{
    struct sbx_authz_cache *c = calloc(1, sizeof(*c));
    uint32_t nb = 1;

    if (!c)
        return NULL;
    c->cap = cap ? cap : 1;
    while (nb < 2 * c->cap && nb < (1u << 30))
        nb <<= 1;
    c->nodes = calloc(c->cap, sizeof(*c->nodes));
    c->buckets = malloc(nb * sizeof(*c->buckets));
    if (!c->nodes || !c->buckets) {
        sbx_authz_cache_free(c);
        return NULL;
    }
    memset(c->buckets, 0xff, nb * sizeof(*c->buckets));
    c->mask = nb - 1;
    c->head = c->tail = NIL;
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

void sbx_authz_cache_free(struct sbx_authz_cache *c)
{
    if (!c)
        return;
    if (c->nodes)
        pthread_mutex_destroy(&c->lock);
    free(c->nodes);
    free(c->buckets);
    free(c);
}

static uint32_t bucket_of(const struct sbx_authz_cache *c, const uint8_t *key)
{
    uint32_t h;

    memcpy(&h, key, sizeof(h)); /* a digest: its bytes are already well spread */
    return h & c->mask;
}

static uint32_t find(const struct sbx_authz_cache *c, const uint8_t *key)
{
    for (uint32_t i = c->buckets[bucket_of(c, key)]; i != NIL; i = c->nodes[i].chain)
        if (memcmp(c->nodes[i].key, key, SBX_DIGEST_LEN) == 0)
            return i;
    return NIL;
}

static void lru_unlink(struct sbx_authz_cache *c, uint32_t i)
{
    struct node *n = &c->nodes[i];

    if (n->prev != NIL)
        c->nodes[n->prev].next = n->next;
    else
        c->head = n->next;
    if (n->next != NIL)
        c->nodes[n->next].prev = n->prev;
    else
        c->tail = n->prev;
}

static void lru_push_front(struct sbx_authz_cache *c, uint32_t i)
{
    struct node *n = &c->nodes[i];

    n->prev = NIL;
    n->next = c->head;
    if (c->head != NIL)
        c->nodes[c->head].prev = i;
    c->head = i;
    if (c->tail == NIL)
        c->tail = i;
}

static void unhash(struct sbx_authz_cache *c, uint32_t i)
{
    uint32_t *p = &c->buckets[bucket_of(c, c->nodes[i].key)];

    while (*p != i)
        p = &c->nodes[*p].chain;
    *p = c->nodes[i].chain;
}

bool sbx_authz_cache_get(struct sbx_authz_cache *c, const uint8_t key[SBX_DIGEST_LEN],
                         uint64_t now_ms, struct sbx_authz_entry *ret)
{
    bool hit = false;
    uint32_t i;

    pthread_mutex_lock(&c->lock);
    i = find(c, key);
    if (i != NIL && c->nodes[i].expires_ms > now_ms) {
        *ret = c->nodes[i].e;
        lru_unlink(c, i);
        lru_push_front(c, i);
        hit = true;
    }
    pthread_mutex_unlock(&c->lock);
    return hit;
}

/* A slot for a new entry: a free one, else the least recently used (an expired entry is never
 * more recently used than a live one that was read after it expired, so the tail serves). */
static uint32_t take_slot(struct sbx_authz_cache *c)
{
    uint32_t i;

    if (c->n < c->cap)
        return c->n++;
    i = c->tail;
    lru_unlink(c, i);
    unhash(c, i);
    return i;
}

void sbx_authz_cache_put(struct sbx_authz_cache *c, const uint8_t key[SBX_DIGEST_LEN],
                         const struct sbx_authz_entry *e, uint64_t expires_ms)
{
    uint32_t i, b;

    pthread_mutex_lock(&c->lock);
    i = find(c, key);
    if (i != NIL) {
        lru_unlink(c, i);
    } else {
        i = take_slot(c);
        memcpy(c->nodes[i].key, key, SBX_DIGEST_LEN);
        b = bucket_of(c, key);
        c->nodes[i].chain = c->buckets[b];
        c->buckets[b] = i;
    }
    c->nodes[i].e = *e;
    c->nodes[i].expires_ms = expires_ms;
    lru_push_front(c, i);
    pthread_mutex_unlock(&c->lock);
}

unsigned sbx_authz_cache_size(struct sbx_authz_cache *c)
{
    unsigned n;

    pthread_mutex_lock(&c->lock);
    n = c->n;
    pthread_mutex_unlock(&c->lock);
    return n;
}

void sbx_sha256(const void *data, size_t len, uint8_t out[SBX_DIGEST_LEN])
{
    SHA256(data, len, out);
}
