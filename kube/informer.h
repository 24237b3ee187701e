/* An informer: lists a resource, then watches it from the list's resourceVersion with bookmarks,
 * keeping a cache of the objects (keyed "namespace/name") and calling a handler on each change.
 * A broken watch resumes from the last resourceVersion seen; 410 Gone (the version was
 * compacted away) forces a relist, which reports the differences as events. One thread per
 * informer; the handler runs on it and must be quick (queue a key). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "histogram.h"
#include "kube.h"
#include "watch.h"

enum sbx_event {
    SBX_EVENT_ADDED,
    SBX_EVENT_MODIFIED,
    SBX_EVENT_DELETED,
};

/* obj is borrowed for the call. */
typedef void (*sbx_informer_fn)(enum sbx_event ev, json_t *obj, void *arg);

struct sbx_informer_opts {
    const char *name;           /* for logs */
    const char *path;           /* collection path, e.g. "/api/v1/pods" */
    const char *label_selector; /* NULL for all */
    int watch_timeout_s;        /* server-side watch timeout (300 when 0) */
    int page_size;              /* list page size (500 when 0) */
    sbx_informer_fn fn;
    void *arg;
    /* Strips obj (borrowed, modified in place) to the fields the controller reads before it is
     * cached (field projection); NULL keeps whole objects. managedFields always goes. */
    void (*project)(json_t *obj);
};

struct sbx_informer;

int sbx_informer_start(struct sbx_kube *k, const struct sbx_informer_opts *opts,
                       struct sbx_informer **ret, struct sbx_error *err);

/* Asks the thread to stop, without waiting: stopping several informers at once overlaps their
 * waits for the watch to notice. The cache stays readable. Accepts NULL. */
void sbx_informer_stop(struct sbx_informer *inf);

/* Stops the thread and waits for it: its handler is not running after this. The cache stays
 * readable. Accepts NULL. */
void sbx_informer_join(struct sbx_informer *inf);

/* Stops the thread, waits for it and frees the cache. Accepts NULL. */
void sbx_informer_free(struct sbx_informer *inf);

/* True once the first list has been delivered. */
bool sbx_informer_synced(struct sbx_informer *inf);

/* The cached object under key ("ns/name"): a new reference, or NULL. Callers must not modify it
 * (json_deep_copy first). */
json_t *sbx_informer_get(struct sbx_informer *inf, const char *key);

/* A snapshot of every cached object: a new array of shared references (do not modify them). */
json_t *sbx_informer_list(struct sbx_informer *inf);

struct sbx_informer_stats {
    uint64_t lists, watches, events, bookmarks, gone;
};
void sbx_informer_stats(struct sbx_informer *inf, struct sbx_informer_stats *ret);

/* Watch lag: for each event that carries a write of ours (see sbx_kube_write_seen), the time from
 * the API server's answer to the write to the event's arrival. */
const struct sbx_histogram *sbx_informer_lag(struct sbx_informer *inf);

/* Keeps only the members of obj named in `keep` (a NULL-terminated list). */
void sbx_json_keep(json_t *obj, const char *const *keep);
