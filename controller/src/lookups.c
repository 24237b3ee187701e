#include "lookups.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"
#include "cleanup.h"

#define RETRY_BASE_MS  1000ull
#define RETRY_MAX_MS   (5 * 60 * 1000ull)
#define WAITERS_MAX    1024
#define RESULT_KEEP_NS (10 * 1000000000ull) /* a result waits this long for its waiters */

/* A lookup waiting for, or on, a thread: the query copied. */
struct job {
    struct job *next;
    char key[800];
    struct sbx_image_ref ref;
    char os[32], arch[48];
    struct sbx_registry_creds creds[SBX_REGISTRY_CREDS_MAX];
    size_t ncreds;
};

struct sbx_lookups {
    struct sbx_registry *reg;
    struct sbx_lookups_opts opts;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job *head, **tail;
    size_t queued;
    /* key -> {"waiters": [qkey...], "running": bool, "code", "msg", "fails", "retry_at", "at"} */
    json_t *state;
    bool stop;
    pthread_t *threads;
    int nthreads;
};

/* Forgets the oldest finished entries while there are too many. Locked. */
static void make_room(struct sbx_lookups *l)
{
    while (json_object_size(l->state) >= l->opts.failures_max) {
        const char *key, *oldest = NULL;
        json_int_t when = INT64_MAX;
        json_t *v;
        json_object_foreach(l->state, key, v)
        {
            json_int_t t = json_integer_value(json_object_get(v, "at"));
            if (!json_is_true(json_object_get(v, "running")) && t < when) {
                when = t;
                oldest = key;
            }
        }
        if (!oldest)
            return;
        json_object_del(l->state, oldest);
    }
}

/* One lookup's end: its state updated, its waiters handed to done. A result is kept for them a
 * while, should the registry client's cache have let it go by then. */
static void finish(struct sbx_lookups *l, const struct job *j, int rc, json_t *res,
                   const struct sbx_error *e)
{
    json_t *st, *waiters = NULL;
    uint64_t now = sbx_now_ns();

    pthread_mutex_lock(&l->mu);
    st = json_object_get(l->state, j->key);
    if (st) {
        waiters = json_incref(json_object_get(st, "waiters"));
        if (rc >= 0) {
            json_object_clear(st);
            json_object_set(st, "result", res);
            json_object_set_new(st, "at", json_integer((json_int_t)now));
        } else {
            json_int_t fails = json_integer_value(json_object_get(st, "fails")) + 1;
            uint64_t backoff = RETRY_BASE_MS << (fails < 9 ? fails - 1 : 9);
            if (backoff > RETRY_MAX_MS)
                backoff = RETRY_MAX_MS;
            json_object_set_new(st, "running", json_false());
            json_object_set_new(st, "waiters", json_array());
            json_object_set_new(st, "code", json_integer(-rc));
            json_object_set_new(st, "msg", json_string(e->msg));
            json_object_set_new(st, "fails", json_integer(fails));
            json_object_set_new(st, "retry_at",
                                json_integer((json_int_t)(now + backoff * 1000000)));
            json_object_set_new(st, "at", json_integer((json_int_t)now));
        }
    }
    pthread_mutex_unlock(&l->mu);
    json_t *w;
    size_t i;
    json_array_foreach(waiters, i, w) l->opts.done(json_string_value(w), l->opts.arg);
    json_decref(waiters);
}

static void *run(void *arg)
{
    struct sbx_lookups *l = arg;

    for (;;) {
        pthread_mutex_lock(&l->mu);
        while (!l->stop && !l->head)
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop) {
            pthread_mutex_unlock(&l->mu);
            return NULL;
        }
        struct job *j = l->head;
        l->head = j->next;
        if (!l->head)
            l->tail = &l->head;
        l->queued--;
        pthread_mutex_unlock(&l->mu);

        struct sbx_registry_query q = {
            .ref = &j->ref, .os = j->os, .arch = j->arch, .creds = j->creds, .ncreds = j->ncreds};
        struct sbx_error e = {0};
        json_auto_t *res = NULL;
        int rc = sbx_registry_resolve(l->reg, &q, &res, &e);
        finish(l, j, rc, res, &e);
        explicit_bzero(j->creds, sizeof(j->creds));
        free(j);
    }
}

/* Queues a lookup of q under key. Locked. */
static int submit(struct sbx_lookups *l, const struct sbx_registry_query *q, const char *key,
                  json_t *st, struct sbx_error *err)
{
    struct job *j;

    if (l->queued >= l->opts.queue_max)
        return sbx_error_set(err, EBUSY, "%zu image lookups queued already", l->queued);
    if (!(j = calloc(1, sizeof(*j))))
        return sbx_error_set(err, ENOMEM, "image lookup");
    snprintf(j->key, sizeof(j->key), "%s", key);
    j->ref = *q->ref;
    snprintf(j->os, sizeof(j->os), "%s", q->os);
    snprintf(j->arch, sizeof(j->arch), "%s", q->arch);
    j->ncreds = q->ncreds < SBX_REGISTRY_CREDS_MAX ? q->ncreds : SBX_REGISTRY_CREDS_MAX;
    memcpy(j->creds, q->creds, j->ncreds * sizeof(*j->creds));
    json_object_set_new(st, "running", json_true());
    *l->tail = j;
    l->tail = &j->next;
    l->queued++;
    pthread_cond_signal(&l->cv);
    return 0;
}

static void add_waiter(json_t *st, const char *qkey)
{
    json_t *w = json_object_get(st, "waiters"), *e;
    size_t i;

    json_array_foreach(w, i, e)
    {
        if (!strcmp(json_string_value(e), qkey))
            return;
    }
    if (json_array_size(w) < WAITERS_MAX)
        json_array_append_new(w, json_string(qkey));
}

int sbx_lookups_get(struct sbx_lookups *l, const struct sbx_registry_query *q, const char *qkey,
                    json_t **ret, uint64_t *retry_ms, struct sbx_error *err)
{
    char key[800];
    uint64_t now = sbx_now_ns();
    int r = 0;

    if (sbx_registry_cached(l->reg, q, ret))
        return 1;
    sbx_registry_query_key(q, key, sizeof(key));
    *retry_ms = 0;
    pthread_mutex_lock(&l->mu);
    json_t *st = json_object_get(l->state, key);
    json_t *res = json_object_get(st, "result");
    if (res && now - (uint64_t)json_integer_value(json_object_get(st, "at")) < RESULT_KEEP_NS) {
        *ret = json_incref(res);
        pthread_mutex_unlock(&l->mu);
        return 1;
    }
    if (res) {
        json_object_del(l->state, key);
        st = NULL;
    }
    if (!st) {
        make_room(l);
        st = json_pack("{s:[], s:b, s:I}", "waiters", "running", 0, "at", (json_int_t)now);
        if (!st || json_object_set_new(l->state, key, st) < 0) {
            pthread_mutex_unlock(&l->mu);
            return sbx_error_set(err, ENOMEM, "image lookup");
        }
    }
    bool running = json_is_true(json_object_get(st, "running"));
    uint64_t retry_at = (uint64_t)json_integer_value(json_object_get(st, "retry_at"));
    if (!running && retry_at <= now && (r = submit(l, q, key, st, err)) < 0) {
        *retry_ms = RETRY_BASE_MS;
    } else if (!running && retry_at > now) {
        *retry_ms = (retry_at - now) / 1000000 + 1;
    }
    if (r >= 0 && json_is_true(json_object_get(st, "running")))
        add_waiter(st, qkey);
    const char *msg = json_string_value(json_object_get(st, "msg"));
    if (r >= 0 && msg) /* a failure backed off, or being retried: it stands until then */
        r = sbx_error_set(err, (int)json_integer_value(json_object_get(st, "code")), "%s", msg);
    pthread_mutex_unlock(&l->mu);
    return r;
}

int sbx_lookups_new(struct sbx_registry *reg, const struct sbx_lookups_opts *opts,
                    struct sbx_lookups **ret, struct sbx_error *err)
{
    struct sbx_lookups *l = calloc(1, sizeof(*l));
    int n = opts->threads < 1 ? 1 : opts->threads;

    if (!l)
        return sbx_error_set(err, ENOMEM, "image lookups");
    l->reg = reg;
    l->opts = *opts;
    if (l->opts.failures_max < 1)
        l->opts.failures_max = 1;
    l->tail = &l->head;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->state = json_object();
    l->threads = calloc((size_t)n, sizeof(*l->threads));
    if (!l->state || !l->threads) {
        sbx_lookups_free(l);
        return sbx_error_set(err, ENOMEM, "image lookups");
    }
    for (; l->nthreads < n; l->nthreads++) {
        int rc = pthread_create(&l->threads[l->nthreads], NULL, run, l);
        if (rc) {
            sbx_lookups_free(l);
            return sbx_error_set(err, rc, "image lookup thread");
        }
    }
    *ret = l;
    return 0;
}

void sbx_lookups_free(struct sbx_lookups *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    sbx_registry_cancel(l->reg);
    for (int i = 0; i < l->nthreads; i++)
        pthread_join(l->threads[i], NULL);
    while (l->head) {
        struct job *j = l->head;
        l->head = j->next;
        explicit_bzero(j, sizeof(*j));
        free(j);
    }
    json_decref(l->state);
    free(l->threads);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}
