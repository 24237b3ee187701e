/* What the directory watch's files share, from the bottom up: fswatch_log.c (the log, the globs,
 * the waiter, the directory budget); fswatch_tree.c (inotify, the directories watched, scans)
 * and fswatch_snap.c (the periodic rescan), which write to the log; fswatch.c (the registry, a
 * watch's life and end, the reader), which calls them all and is called by none. Not for the
 * adapters. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fswatch.h"

/* One logged event. Overflows the kernel reported are logged too (lost_from == lost_to ==
 * their own number: how many events went is unknown). */
struct fs_entry {
    uint64_t seq;
    enum sbx_fsev_kind kind;
    bool dir;
    char *path, *from;
    const char *reason;
};

/* A watched directory: the inotify watch descriptor and its path relative to the watched
 * directory ("" for itself). */
struct fs_dir {
    int wd; /* 0: empty slot, -1: removed */
    char *path;
};

struct fs_dirs {
    struct fs_dir *slot;
    size_t cap, used, live; /* used: slots not empty (live + removed) */
};

struct fs_snap;

/* The registry's limit on directories watched by all watches together (--max-watch-dirs). */
struct fs_dir_budget {
    size_t used; /* atomic */
    size_t max;
};

struct fs_watch {
    struct sbx_fswatches *ws;
    struct fs_dir_budget *budget; /* the registry's */
    struct fs_watch *link;        /* in the registry's list */
    char id[17];
    char *client;
    int refs;
    /* What it watches; set at open, read only after. */
    bool recursive;
    char **include, **exclude;
    size_t n_include, n_exclude;
    uint64_t rescan_ms;
    int base_fd; /* the watched directory (O_PATH) */
    /* Loop thread only (and the opening thread before the fd is on the loop). */
    struct sbx_watch io; /* the inotify fd */
    int root_wd;
    struct fs_dirs dirs;
    bool have_pending; /* a move away not yet paired with its arrival */
    uint32_t pending_cookie;
    char *pending_from;
    bool pending_dir;
    uint64_t pending_due_ms; /* when the queue ran dry behind it: told as a move out at this time */
    struct fs_snap *snap;
    uint64_t next_rescan_ms;
    /* Why the tree's handling of events must end the watch (fswatch.c ends it after). */
    bool failing;
    struct sbx_error fail_err;
    /* Under lock. */
    pthread_mutex_t lock;
    struct fs_entry *log;
    size_t cap, bytes;
    uint64_t first, next; /* sequence numbers held: [first, next) */
    bool news;            /* appended since the waiter was last woken */
    struct sbx_fswatch *reader;
    uint64_t read_upto; /* the reader's cursor, kept while detached: writes it has not read merge */
    uint64_t detached_at_ms;
    struct sbx_fswatch_waiter *waiter;
    uint64_t waiter_since_ms;
    bool ended;
    struct sbx_error end_err;
};

/* The reader: one client's cursor in a watch's log. */
struct sbx_fswatch {
    struct fs_watch *w;
    uint64_t cursor; /* the next sequence number it reads */
    bool ready_pending, resumed;
};

/* The log (fswatch_log.c). */
uint64_t sbx_fsw_now_ms(void);
/* A directory more for a watch: -EMFILE past the budget. */
size_t sbx_fsw_dirs_reserve(struct fs_dir_budget *b, struct sbx_error *err);
void sbx_fsw_dirs_unreserve(struct fs_dir_budget *b, size_t n);
/* Takes path and from (NULL allowed); merges a write into an unread write of the same path, and
 * drops a create of a path whose latest event is its create (a scan and inotify both saw it).
 * Applies the globs. */
void sbx_fsw_append(struct fs_watch *w, enum sbx_fsev_kind kind, bool dir, char *path, char *from);
/* Logs an overflow the kernel reported. */
void sbx_fsw_append_overflow(struct fs_watch *w, const char *reason);
/* Wakes the reader when something was appended. */
void sbx_fsw_notify(struct fs_watch *w);
/* Whether a path passes the globs; for a directory, whether it is watched at all. */
bool sbx_fsw_included(const struct fs_watch *w, const char *path);
bool sbx_fsw_excluded(const struct fs_watch *w, const char *path);
/* The entry of seq (held: first <= seq < next), and its release. Under the watch's lock. */
struct fs_entry *sbx_fsw_entry_at(struct fs_watch *w, uint64_t seq);
void sbx_fsw_entry_free(struct fs_entry *e);
/* Under the watch's lock: reader r has something to read (an event, ready, or the end). */
bool sbx_fsw_has_news_locked(struct fs_watch *w, struct sbx_fswatch *r);
/* Under the watch's lock: takes the armed waiter, to be fired once unlocked. */
struct sbx_fswatch_waiter *sbx_fsw_take_waiter_locked(struct fs_watch *w);
void sbx_fsw_fire(struct sbx_fswatch_waiter *wt);

/* The tree (fswatch_tree.c). */
/* Adds the watched directory and, when recursive, every directory beneath it (not excluded,
 * not through a symlink), creates for what it finds when emit. On the opening thread before
 * the fd is on the loop, or on the loop thread. */
int sbx_fsw_add_tree(struct fs_watch *w, const char *rel, bool emit, struct sbx_error *err);
/* Reads and handles what the inotify fd holds (for the loop's callback in fswatch.c): -errno
 * with the reason in err when the watch must end (its directory went, a directory it must
 * watch cannot be), else 0 and *tick_ms > 0 when the registry's timer must fire within that
 * (a move away waits to be paired). */
int sbx_fsw_read_events(struct fs_watch *w, uint64_t *tick_ms, struct sbx_error *err);
/* A move away still unpaired at its due time (the registry's timer asks): told as a move out,
 * unless the queue holds more events (their read pairs it or tells it). Loop thread. */
void sbx_fsw_move_due(struct fs_watch *w);
/* Drops every directory watched (at the end). */
void sbx_fsw_dirs_release(struct fs_watch *w);
/* Opens rel (a path of names from the kernel, no "..") beneath fd one name at a time, no
 * symlink followed. Returns an fd (O_RDONLY | O_DIRECTORY) or -errno. */
int sbx_fsw_open_dir(int fd, const char *rel);
char *sbx_fsw_join(const char *dir, const char *name);

/* The rescan (fswatch_snap.c). */
int sbx_fsw_snap_take(struct fs_watch *w, struct fs_snap **ret, struct sbx_error *err);
/* Takes a new snapshot and logs what changed since the last one; -errno when it cannot (the
 * watch then ends). */
int sbx_fsw_rescan(struct fs_watch *w, struct sbx_error *err);
void sbx_fsw_snap_free(struct fs_snap *s);
