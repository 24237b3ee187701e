#include "workqueue.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bucket.h"

struct node {
    struct node *next;
    char key[];
};

struct delayed {
    uint64_t due_ns;
    char *key;
};

struct sbx_wq {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    struct node *head, *tail;
    size_t len;
    json_t *dirty;      /* keys queued or to be queued when done */
    json_t *processing; /* keys a worker holds */
    json_t *failures;   /* key -> count */
    json_t *due;        /* key -> due time (ns) of its pending delayed add */
    struct delayed *heap;
    size_t heap_len, heap_cap;
    uint64_t base_ms, max_ms;
    bool shutting_down;
    pthread_t *threads;
    int nthreads;
    sbx_wq_fn fn;
    void *arg;
};

int sbx_wq_new(const struct sbx_wq_opts *opts, struct sbx_wq **ret, struct sbx_error *err)
{
    struct sbx_wq *q = calloc(1, sizeof(*q));

    if (!q)
        return sbx_error_set(err, ENOMEM, "work queue");
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cond, &ca);
    pthread_condattr_destroy(&ca);
    q->dirty = json_object();
    q->processing = json_object();
    q->failures = json_object();
    q->due = json_object();
    q->base_ms = opts && opts->retry_base_ms ? opts->retry_base_ms : 5;
    q->max_ms = opts && opts->retry_max_ms ? opts->retry_max_ms : 1000 * 1000;
    if (!q->dirty || !q->processing || !q->failures || !q->due) {
        sbx_wq_free(q);
        return sbx_error_set(err, ENOMEM, "work queue");
    }
    *ret = q;
    return 0;
}

void sbx_wq_free(struct sbx_wq *q)
{
    if (!q)
        return;
    sbx_wq_join(q);
    free(q->threads);
    while (q->head) {
        struct node *n = q->head;
        q->head = n->next;
        free(n);
    }
    for (size_t i = 0; i < q->heap_len; i++)
        free(q->heap[i].key);
    free(q->heap);
    json_decref(q->dirty);
    json_decref(q->processing);
    json_decref(q->failures);
    json_decref(q->due);
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

/* Appends key to the FIFO. Called with mu held. */
static void push(struct sbx_wq *q, const char *key)
{
    size_t len = strlen(key) + 1;
    struct node *n = malloc(sizeof(*n) + len);

    if (!n)
        return; /* the key stays dirty; its next add or resync brings it back */
    memcpy(n->key, key, len);
    n->next = NULL;
    if (q->tail)
        q->tail->next = n;
    else
        q->head = n;
    q->tail = n;
    q->len++;
    pthread_cond_signal(&q->cond);
}

/* Called with mu held. */
static void add_locked(struct sbx_wq *q, const char *key)
{
    if (q->shutting_down || json_object_get(q->dirty, key))
        return;
    json_object_set_new(q->dirty, key, json_true());
    if (!json_object_get(q->processing, key))
        push(q, key);
}

void sbx_wq_add(struct sbx_wq *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    add_locked(q, key);
    pthread_mutex_unlock(&q->mu);
}

static void heap_swap(struct delayed *a, struct delayed *b)
{
    struct delayed t = *a;
    *a = *b;
    *b = t;
}

static void heap_push(struct sbx_wq *q, uint64_t due_ns, char *key)
{
    size_t i;

    if (q->heap_len == q->heap_cap) {
        size_t cap = q->heap_cap ? q->heap_cap * 2 : 16;
        struct delayed *h = realloc(q->heap, cap * sizeof(*h));
        if (!h) {
            free(key);
            return;
        }
        q->heap = h;
        q->heap_cap = cap;
    }
    i = q->heap_len++;
    q->heap[i] = (struct delayed){due_ns, key};
    while (i > 0 && q->heap[(i - 1) / 2].due_ns > q->heap[i].due_ns) {
        heap_swap(&q->heap[(i - 1) / 2], &q->heap[i]);
        i = (i - 1) / 2;
    }
}

static struct delayed heap_pop(struct sbx_wq *q)
{
    struct delayed top = q->heap[0];
    size_t i = 0;

    q->heap[0] = q->heap[--q->heap_len];
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < q->heap_len && q->heap[l].due_ns < q->heap[m].due_ns)
            m = l;
        if (r < q->heap_len && q->heap[r].due_ns < q->heap[m].due_ns)
            m = r;
        if (m == i)
            break;
        heap_swap(&q->heap[i], &q->heap[m]);
        i = m;
    }
    return top;
}

static void add_after_locked(struct sbx_wq *q, const char *key, uint64_t delay_ms)
{
    uint64_t due_ns = sbx_now_ns() + delay_ms * 1000000u;
    json_t *prev = json_object_get(q->due, key);
    char *copy;

    if (q->shutting_down)
        return;
    if (delay_ms == 0) {
        add_locked(q, key);
        return;
    }
    if (prev && (uint64_t)json_integer_value(prev) <= due_ns)
        return;
    copy = strdup(key);
    if (!copy)
        return;
    json_object_set_new(q->due, key, json_integer((json_int_t)due_ns));
    heap_push(q, due_ns, copy);
    pthread_cond_signal(&q->cond);
}

void sbx_wq_add_after(struct sbx_wq *q, const char *key, uint64_t delay_ms)
{
    pthread_mutex_lock(&q->mu);
    add_after_locked(q, key, delay_ms);
    pthread_mutex_unlock(&q->mu);
}

uint64_t sbx_wq_add_rate_limited(struct sbx_wq *q, const char *key)
{
    uint64_t delay;
    json_int_t n;

    pthread_mutex_lock(&q->mu);
    n = json_integer_value(json_object_get(q->failures, key));
    delay = n >= 40 ? q->max_ms : q->base_ms << n;
    if (delay > q->max_ms)
        delay = q->max_ms;
    json_object_set_new(q->failures, key, json_integer(n + 1));
    add_after_locked(q, key, delay);
    pthread_mutex_unlock(&q->mu);
    return delay;
}

void sbx_wq_forget(struct sbx_wq *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    json_object_del(q->failures, key);
    pthread_mutex_unlock(&q->mu);
}

int sbx_wq_failures(struct sbx_wq *q, const char *key)
{
    int n;

    pthread_mutex_lock(&q->mu);
    n = (int)json_integer_value(json_object_get(q->failures, key));
    pthread_mutex_unlock(&q->mu);
    return n;
}

/* Moves delayed keys that are due into the queue; returns the next due time or 0. Called with
 * mu held. */
static uint64_t promote_due(struct sbx_wq *q)
{
    uint64_t now = sbx_now_ns();

    while (q->heap_len > 0) {
        if (q->heap[0].due_ns > now)
            return q->heap[0].due_ns;
        struct delayed d = heap_pop(q);
        json_t *cur = json_object_get(q->due, d.key);
        /* A stale entry: the key was re-delayed to an earlier time and already handled. */
        if (cur && (uint64_t)json_integer_value(cur) == d.due_ns) {
            json_object_del(q->due, d.key);
            add_locked(q, d.key);
        }
        free(d.key);
    }
    return 0;
}

char *sbx_wq_get(struct sbx_wq *q)
{
    char *key = NULL;

    pthread_mutex_lock(&q->mu);
    for (;;) {
        uint64_t next = promote_due(q);
        if (q->shutting_down)
            break;
        if (q->head) {
            struct node *n = q->head;
            q->head = n->next;
            if (!q->head)
                q->tail = NULL;
            q->len--;
            key = strdup(n->key);
            free(n);
            if (!key)
                continue;
            json_object_set_new(q->processing, key, json_true());
            json_object_del(q->dirty, key);
            break;
        }
        if (next) {
            struct timespec ts = {.tv_sec = (time_t)(next / 1000000000u),
                                  .tv_nsec = (long)(next % 1000000000u)};
            pthread_cond_timedwait(&q->cond, &q->mu, &ts);
        } else {
            pthread_cond_wait(&q->cond, &q->mu);
        }
    }
    pthread_mutex_unlock(&q->mu);
    return key;
}

void sbx_wq_done(struct sbx_wq *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    json_object_del(q->processing, key);
    if (json_object_get(q->dirty, key) && !q->shutting_down)
        push(q, key);
    pthread_mutex_unlock(&q->mu);
}

void sbx_wq_shutdown(struct sbx_wq *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->shutting_down = true;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->mu);
}

void sbx_wq_join(struct sbx_wq *q)
{
    if (!q)
        return;
    sbx_wq_shutdown(q);
    for (int i = 0; i < q->nthreads; i++)
        pthread_join(q->threads[i], NULL);
    q->nthreads = 0;
}

size_t sbx_wq_len(struct sbx_wq *q)
{
    size_t n;

    pthread_mutex_lock(&q->mu);
    n = q->len;
    pthread_mutex_unlock(&q->mu);
    return n;
}

static void *worker(void *p)
{
    struct sbx_wq *q = p;
    char *key;

    while ((key = sbx_wq_get(q))) {
        if (q->fn(key, q->arg) < 0)
            sbx_wq_add_rate_limited(q, key);
        else
            sbx_wq_forget(q, key);
        sbx_wq_done(q, key);
        free(key);
    }
    return NULL;
}

int sbx_wq_start(struct sbx_wq *q, int n, sbx_wq_fn fn, void *arg, struct sbx_error *err)
{
    if (n < 1 || q->threads)
        return sbx_error_set(err, EINVAL, "workers: %d", n);
    q->threads = calloc((size_t)n, sizeof(*q->threads));
    if (!q->threads)
        return sbx_error_set(err, ENOMEM, "workers");
    q->fn = fn;
    q->arg = arg;
    for (int i = 0; i < n; i++) {
        int r = pthread_create(&q->threads[i], NULL, worker, q);
        if (r != 0)
            return sbx_error_set(err, r, "start worker %d", i);
        q->nthreads++;
    }
    return 0;
}
