/* What the directory watch's files share (fswatch.c: the registry, the log and its readers;
 * fswatch_tree.c: inotify, the directories watched, scans; fswatch_snap.c: the periodic
 * rescan). Not for the adapters. */
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

struct fs_watch {
    struct sbx_fswatches *ws;
    struct fs_watch *link; /* in the registry's list */
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

/* Registry internals the tree code needs. */
size_t sbx_fsw_dirs_reserve(struct sbx_fswatches *ws, struct sbx_error *err);
void sbx_fsw_dirs_unreserve(struct sbx_fswatches *ws, size_t n);
uint64_t sbx_fsw_now_ms(void);
void sbx_fsw_ref(struct fs_watch *w);
/* The last reference frees the watch (ended, or never started). */
void sbx_fsw_unref(struct fs_watch *w);

/* The log (fswatch.c). Takes path and from (NULL allowed); merges a write into an unread write
 * of the same path, and drops a create of a path whose latest event is its create (a scan and
 * inotify both saw it). Applies the globs. */
void sbx_fsw_append(struct fs_watch *w, enum sbx_fsev_kind kind, bool dir, char *path, char *from);
/* Logs an overflow the kernel reported. */
void sbx_fsw_append_overflow(struct fs_watch *w, const char *reason);
/* Wakes the reader when something was appended. */
void sbx_fsw_notify(struct fs_watch *w);
/* Ends the watch (on the loop thread): its inotify fd goes, its reader reads what is left,
 * then the error. */
void sbx_fsw_end(struct fs_watch *w, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Whether a path passes the globs; for a directory, whether it is watched at all. */
bool sbx_fsw_included(const struct fs_watch *w, const char *path);
bool sbx_fsw_excluded(const struct fs_watch *w, const char *path);

/* The tree (fswatch_tree.c). */
/* Adds the watched directory and, when recursive, every directory beneath it (not excluded,
 * not through a symlink), creates for what it finds when emit. On the opening thread before
 * the fd is on the loop, or on the loop thread. */
int sbx_fsw_add_tree(struct fs_watch *w, const char *rel, bool emit, struct sbx_error *err);
/* Reads and handles what the inotify fd holds (the loop's callback). */
void sbx_fsw_on_inotify(struct sbx_watch *io, uint32_t events);
/* A move away still unpaired at its due time (the registry's timer asks): told as a move out,
 * unless the queue holds more events (their read pairs it or tells it). Loop thread. */
void sbx_fsw_move_due(struct fs_watch *w);
/* The registry's timer fires within ms (a move away waits to be paired). */
void sbx_fsw_tick_soon(struct sbx_fswatches *ws, uint64_t ms);
/* Drops every directory watched (at the end). */
void sbx_fsw_dirs_release(struct fs_watch *w);
/* Opens rel (a path of names from the kernel, no "..") beneath fd one name at a time, no
 * symlink followed. Returns an fd (O_RDONLY | O_DIRECTORY) or -errno. */
int sbx_fsw_open_dir(int fd, const char *rel);
char *sbx_fsw_join(const char *dir, const char *name);

/* The rescan (fswatch_snap.c). */
int sbx_fsw_snap_take(struct fs_watch *w, struct fs_snap **ret, struct sbx_error *err);
/* Takes a new snapshot and logs what changed since the last one. */
void sbx_fsw_rescan(struct fs_watch *w);
void sbx_fsw_snap_free(struct fs_snap *s);
