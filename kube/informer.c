#include "informer.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bucket.h"
#include "cleanup.h"
#include "log.h"

#define MAX_EVENT      (16u << 20) /* one watch event line */
#define MAX_PATH       8192
#define BACKOFF_MIN_MS 250
#define BACKOFF_MAX_MS 10000

struct sbx_informer {
    struct sbx_kube *kube;
    char *name, *path, *selector;
    int watch_timeout_s, page_size;
    sbx_informer_fn fn;
    void *arg;
    void (*project)(json_t *obj);
    struct sbx_histogram lag;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu; /* guards cache, rv, synced, stats */
    pthread_cond_t cond;
    atomic_bool stop; /* also read by the watch's progress callback, unlocked */
    json_t *cache;    /* key -> object */
    char rv[SBX_RV_MAX];
    bool synced, need_list;
    struct sbx_informer_stats stats;
};

static const char *object_rv(json_t *obj)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
}

void sbx_json_keep(json_t *obj, const char *const *keep)
{
    const char *key;
    json_t *v;
    void *tmp;

    json_object_foreach_safe(obj, tmp, key, v)
    {
        const char *const *k = keep;
        while (*k && strcmp(*k, key) != 0)
            k++;
        if (!*k)
            json_object_del(obj, key);
    }
}

/* Drops what the controller never reads: what no one reads (sbx_object_trim), then what this
 * informer's handlers do not (its projection). */
static void trim(struct sbx_informer *inf, json_t *obj)
{
    sbx_object_trim(obj);
    if (inf->project)
        inf->project(obj);
}

static void set_rv(struct sbx_informer *inf, const char *rv)
{
    if (sbx_rv_valid(rv)) {
        pthread_mutex_lock(&inf->mu);
        strcpy(inf->rv, rv);
        pthread_mutex_unlock(&inf->mu);
    }
}

/* Stores obj (stolen) under its key and tells the handler. */
static void apply(struct sbx_informer *inf, enum sbx_event ev, json_t *obj)
{
    char key[SBX_KEY_MAX];

    if (!sbx_object_key(obj, key, sizeof(key))) {
        json_decref(obj);
        return;
    }
    trim(inf, obj);
    pthread_mutex_lock(&inf->mu);
    if (ev == SBX_EVENT_DELETED)
        json_object_del(inf->cache, key);
    else
        json_object_set(inf->cache, key, obj);
    inf->stats.events++;
    pthread_mutex_unlock(&inf->mu);
    inf->fn(ev, obj, inf->arg);
    json_decref(obj);
}

static int build_path(struct sbx_informer *inf, char *buf, size_t size, const char *extra)
{
    char sel[1024];
    int n;

    if (inf->selector && !sbx_kube_escape(inf->selector, sel, sizeof(sel)))
        return -ENAMETOOLONG;
    n = snprintf(buf, size, "%s?%s%s%s", inf->path, extra, inf->selector ? "&labelSelector=" : "",
                 inf->selector ? sel : "");
    return n > 0 && (size_t)n < size ? 0 : -ENAMETOOLONG;
}

/* Gives free pages back to the system. One trim at a time: concurrent ones contend for the same
 * arenas, and glibc's first malloc_trim initializes malloc unlocked, a race when nothing used
 * glibc's malloc before (under AddressSanitizer, whose allocator does not replace malloc_trim:
 * two informers' first lists once crashed it in mtrim). */
static void trim_heap(void)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

    pthread_mutex_lock(&mu);
    malloc_trim(0);
    pthread_mutex_unlock(&mu);
}

/* Lists every page into a fresh map and reports the differences with the cache as events. */
static int relist(struct sbx_informer *inf, struct sbx_error *err)
{
    json_auto_t *fresh = json_object();
    char cont[SBX_CONTINUE_MAX] = "", path[MAX_PATH], extra[3 * SBX_CONTINUE_MAX + 32];
    char rv[SBX_RV_MAX] = "";
    const char *key;
    json_t *obj;
    void *tmp;

    if (!fresh)
        return sbx_error_set(err, ENOMEM, "list");
    do {
        json_auto_t *body = NULL;
        char esc[3 * SBX_CONTINUE_MAX];
        long status;
        if (*cont && !sbx_kube_escape(cont, esc, sizeof(esc)))
            return sbx_error_set(err, ENAMETOOLONG, "continue token");
        snprintf(extra, sizeof(extra), "limit=%d%s%s", inf->page_size, *cont ? "&continue=" : "",
                 *cont ? esc : "");
        if (build_path(inf, path, sizeof(path), extra) < 0)
            return sbx_error_set(err, ENAMETOOLONG, "list path");
        int r = sbx_kube_request(inf->kube, "GET", path, NULL, NULL, &status, &body, err);
        if (r < 0)
            return r;
        if (status == 410 && *cont) { /* the continue token expired: start over */
            json_object_clear(fresh);
            *cont = '\0';
            continue;
        }
        if (status != 200)
            return sbx_error_set(err, EIO, "list %s: HTTP %ld", inf->path, status);
        if ((r = sbx_list_page_parse(body, fresh, cont, rv, err)) < 0)
            return sbx_error_wrap(err, "%s", inf->path);
        /* Projected page by page: a large list never holds whole objects at once. (Objects of
         * earlier pages are projected already: projecting is idempotent and cheap then.) */
        if (inf->project)
            json_object_foreach(fresh, key, obj) inf->project(obj);
    } while (*cont);

    /* Deleted while we were not watching. */
    json_auto_t *gone = json_array();
    pthread_mutex_lock(&inf->mu);
    json_object_foreach(inf->cache, key, obj)
    {
        if (!json_object_get(fresh, key))
            json_array_append(gone, obj);
    }
    pthread_mutex_unlock(&inf->mu);
    size_t i;
    json_array_foreach(gone, i, obj) apply(inf, SBX_EVENT_DELETED, json_incref(obj));
    json_object_foreach_safe(fresh, tmp, key, obj)
    {
        json_t *old = sbx_informer_get(inf, key);
        const char *orv = old ? object_rv(old) : NULL, *nrv = object_rv(obj);
        bool same = orv && nrv && !strcmp(orv, nrv);
        json_decref(old);
        if (!same)
            apply(inf, old ? SBX_EVENT_MODIFIED : SBX_EVENT_ADDED, json_incref(obj));
    }
    set_rv(inf, rv);
    json_decref(fresh);
    fresh = NULL;
    trim_heap(); /* the pages of the list's answers, parsed and dropped */
    pthread_mutex_lock(&inf->mu);
    inf->synced = true;
    inf->need_list = false;
    inf->stats.lists++;
    pthread_mutex_unlock(&inf->mu);
    return 0;
}

/* The resourceVersion we resume from is no longer there: list again. Returns -ESTALE. */
static int gone(struct sbx_informer *inf)
{
    pthread_mutex_lock(&inf->mu);
    inf->need_list = true;
    inf->stats.gone++;
    pthread_mutex_unlock(&inf->mu);
    log_info("%s: watch expired (410 Gone), relisting", inf->name);
    return -ESTALE;
}

/* One watch line: an event, or the end of this watch. */
static int on_line(const char *line, size_t len, void *arg)
{
    struct sbx_informer *inf = arg;
    struct sbx_watch_event ev;
    struct sbx_error err = {0};
    int r = sbx_watch_event_parse(line, len, &ev, &err);

    if (r == -ESTALE)
        return gone(inf);
    if (r < 0) {
        log_warn(0, "%s: %s", inf->name, err.msg);
        return r;
    }
    if (ev.type == SBX_WATCH_BOOKMARK) {
        set_rv(inf, ev.rv);
        pthread_mutex_lock(&inf->mu);
        inf->stats.bookmarks++;
        pthread_mutex_unlock(&inf->mu);
        return 0;
    }
    if (ev.type == SBX_WATCH_IGNORED)
        return 0;
    uint64_t lag = sbx_kube_write_seen(inf->kube, ev.rv);
    if (lag)
        sbx_histogram_observe(&inf->lag, lag);
    set_rv(inf, ev.rv);
    apply(inf,
          ev.type == SBX_WATCH_ADDED      ? SBX_EVENT_ADDED
          : ev.type == SBX_WATCH_MODIFIED ? SBX_EVENT_MODIFIED
                                          : SBX_EVENT_DELETED,
          TAKE_PTR(ev.object));
    return 0;
}

static int watch(struct sbx_informer *inf, struct sbx_error *err)
{
    char path[MAX_PATH], extra[300], rv[3 * SBX_RV_MAX];
    long status = 0;
    int r;

    pthread_mutex_lock(&inf->mu);
    /* Opaque to us, and from the server: escaped like any query value. */
    if (!sbx_kube_escape(inf->rv, rv, sizeof(rv)))
        rv[0] = '\0';
    snprintf(extra, sizeof(extra),
             "watch=1&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=%d", rv,
             inf->watch_timeout_s);
    inf->stats.watches++;
    pthread_mutex_unlock(&inf->mu);
    if (build_path(inf, path, sizeof(path), extra) < 0)
        return sbx_error_set(err, ENAMETOOLONG, "watch path");
    r = sbx_kube_stream(inf->kube, path, MAX_EVENT, on_line, inf, &inf->stop, &status, err);
    if (r == -ESTALE || r == -ECANCELED)
        return r;
    if (r < 0)
        return r;
    if (status == 410)
        return gone(inf);
    if (status != 200)
        return sbx_error_set(err, EIO, "watch %s: HTTP %ld", inf->path, status);
    return 0;
}

/* Sleeps ms unless stopped first. */
static void pause_ms(struct sbx_informer *inf, uint64_t ms)
{
    struct timespec ts = sbx_deadline_in(ms * 1000000u);

    pthread_mutex_lock(&inf->mu);
    while (!inf->stop && pthread_cond_timedwait(&inf->cond, &inf->mu, &ts) == 0)
        ;
    pthread_mutex_unlock(&inf->mu);
}

static void *run(void *p)
{
    struct sbx_informer *inf = p;
    uint64_t backoff = BACKOFF_MIN_MS;

    while (!inf->stop) {
        struct sbx_error err = {0};
        int r = inf->need_list ? relist(inf, &err) : watch(inf, &err);
        if (inf->stop)
            break;
        if (r == 0 || r == -ESTALE) {
            backoff = BACKOFF_MIN_MS;
            continue;
        }
        log_warn(0, "%s: %s; retrying in %llu ms", inf->name, err.msg, (unsigned long long)backoff);
        pause_ms(inf, backoff);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    return NULL;
}

int sbx_informer_start(struct sbx_kube *k, const struct sbx_informer_opts *opts,
                       struct sbx_informer **ret, struct sbx_error *err)
{
    struct sbx_informer *inf = calloc(1, sizeof(*inf));
    int r;

    if (!inf)
        return sbx_error_set(err, ENOMEM, "informer");
    inf->kube = k;
    inf->name = strdup(opts->name);
    inf->path = strdup(opts->path);
    inf->selector = opts->label_selector ? strdup(opts->label_selector) : NULL;
    inf->watch_timeout_s = opts->watch_timeout_s > 0 ? opts->watch_timeout_s : 300;
    inf->page_size = opts->page_size > 0 ? opts->page_size : 500;
    inf->fn = opts->fn;
    inf->arg = opts->arg;
    inf->project = opts->project;
    inf->cache = json_object();
    inf->need_list = true;
    pthread_mutex_init(&inf->mu, NULL);
    pthread_cond_init(&inf->cond, NULL);
    if (!inf->name || !inf->path || !inf->cache || (opts->label_selector && !inf->selector)) {
        sbx_informer_free(inf);
        return sbx_error_set(err, ENOMEM, "informer");
    }
    if ((r = pthread_create(&inf->thread, NULL, run, inf)) != 0) {
        sbx_informer_free(inf);
        return sbx_error_set(err, r, "informer thread");
    }
    inf->started = true;
    *ret = inf;
    return 0;
}

void sbx_informer_stop(struct sbx_informer *inf)
{
    if (!inf)
        return;
    pthread_mutex_lock(&inf->mu);
    atomic_store(&inf->stop, true);
    pthread_cond_broadcast(&inf->cond);
    pthread_mutex_unlock(&inf->mu);
}

void sbx_informer_join(struct sbx_informer *inf)
{
    if (!inf)
        return;
    sbx_informer_stop(inf);
    if (inf->started)
        pthread_join(inf->thread, NULL);
    inf->started = false;
}

void sbx_informer_free(struct sbx_informer *inf)
{
    if (!inf)
        return;
    sbx_informer_join(inf);
    json_decref(inf->cache);
    pthread_cond_destroy(&inf->cond);
    pthread_mutex_destroy(&inf->mu);
    free(inf->name);
    free(inf->path);
    free(inf->selector);
    free(inf);
}

bool sbx_informer_synced(struct sbx_informer *inf)
{
    bool s;

    pthread_mutex_lock(&inf->mu);
    s = inf->synced;
    pthread_mutex_unlock(&inf->mu);
    return s;
}

json_t *sbx_informer_get(struct sbx_informer *inf, const char *key)
{
    json_t *o;

    pthread_mutex_lock(&inf->mu);
    o = json_incref(json_object_get(inf->cache, key));
    pthread_mutex_unlock(&inf->mu);
    return o;
}

json_t *sbx_informer_list(struct sbx_informer *inf)
{
    json_t *arr = json_array(), *obj;
    const char *key;

    pthread_mutex_lock(&inf->mu);
    json_object_foreach(inf->cache, key, obj) json_array_append(arr, obj);
    pthread_mutex_unlock(&inf->mu);
    return arr;
}

void sbx_informer_stats(struct sbx_informer *inf, struct sbx_informer_stats *ret)
{
    pthread_mutex_lock(&inf->mu);
    *ret = inf->stats;
    pthread_mutex_unlock(&inf->mu);
}

const struct sbx_histogram *sbx_informer_lag(struct sbx_informer *inf)
{
    return &inf->lag;
}
