/* Directory watches on inotify: a directory beneath the root (confined as every path: no
 * symlink leads out, none inside the tree is followed), optionally recursive (new directories
 * are watched and scanned, so a tree made at once is seen whole), events filtered by globs on
 * the path relative to the watched directory, moves paired by cookie into one rename. Each
 * watch keeps its events in a bounded log with consecutive sequence numbers; a reader that
 * falls behind the log is told which numbers it lost (an overflow with a rescan hint), never
 * nothing. A watch whose reader went away is kept for a while, still logging, so that a client
 * can resume it from a sequence number. The inotify fds are read on the daemon's loop thread;
 * readers read from any thread. Knows nothing of the wire. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "loop.h"
#include "path.h"

struct sbx_fswatches;
struct sbx_fswatch;

struct sbx_fswatches_opts {
    size_t max_watches;    /* watches at once, kept ones included */
    size_t max_per_client; /* of one client (its address) */
    size_t max_dirs;       /* inotify watches (directories) of all watches together */
    size_t queue_events;   /* events a watch's log holds; the oldest go first */
    uint64_t retain_ms;    /* a watch without a reader is kept this long */
    uint64_t keepalive_ms; /* a waiting reader is woken this often when nothing happens */
};

/* Event kinds; the numbers are those of the proto's WatchEventKind. */
enum sbx_fsev_kind {
    SBX_FSEV_CREATE = 1,
    SBX_FSEV_WRITE = 2,  /* modified, or closed after writing; repeated writes are merged */
    SBX_FSEV_CHMOD = 3,  /* attributes: mode, owner, times */
    SBX_FSEV_REMOVE = 4, /* removed, or moved out of the watched tree */
    SBX_FSEV_RENAME = 5, /* moved within the tree: from -> path */
    SBX_FSEV_OVERFLOW = 6,
    SBX_FSEV_READY = 7,
};

/* One event as a reader gets it (its strings are its own: sbx_fsev_release). */
struct sbx_fsev {
    uint64_t seq; /* overflow: its `to`; ready: the last sequence number before the next event */
    enum sbx_fsev_kind kind;
    bool dir;
    char *path; /* relative to the watched directory ("." for itself); rename: the new path */
    char *from; /* rename: the old path */
    /* overflow: the sequence numbers lost, from..to inclusive, and why */
    uint64_t lost_from, lost_to;
    const char *reason;
    /* ready */
    const char *watch_id; /* the watch's, valid while the reader is open */
    bool resumed;
    size_t dirs; /* directories watched */
};

void sbx_fsev_release(struct sbx_fsev *ev);

/* Makes the registry; its timer runs on loop. Returns 0 or -errno. */
int sbx_fswatches_new(struct sbx_fswatches **ret, struct sbx_loop *loop,
                      const struct sbx_root *root, const struct sbx_fswatches_opts *o,
                      struct sbx_error *err);
/* On the loop thread, after every reader closed (the adapters' servers have stopped). */
void sbx_fswatches_free(struct sbx_fswatches *ws);
/* The daemon is shutting down: every watch ends (readers read what is left, then -ESHUTDOWN)
 * and no new one opens. On the loop thread. */
void sbx_fswatches_shutdown(struct sbx_fswatches *ws);

struct sbx_fswatch_spec {
    const char *path; /* a user path, resolved beneath the root */
    bool recursive;
    char *const *include; /* globs (fnmatch); none: every path */
    size_t n_include;
    char *const *exclude; /* globs; an excluded directory is not watched at all */
    size_t n_exclude;
    uint64_t rescan_ms; /* compare a snapshot of the tree this often (0: never) */
    const char *client; /* who asks (an address), for max_per_client */
    /* Resume: the watch of that id (from its ready event), from the event after since. */
    const char *resume_id;
    uint64_t since;
};

#define SBX_FSWATCH_MAX_GLOBS    16
#define SBX_FSWATCH_MAX_GLOB_LEN 256

/* Opens a new watch (every inotify watch added before it returns), or resumes a kept one,
 * taking it over from a reader it may still have. Returns 0 and the reader, or -errno:
 * -EXDEV escapes, -ENOTDIR, -ENOENT (also an unknown or expired resume_id), -EINVAL (globs,
 * since beyond the watch's last event), -EMFILE (a limit: ours or the kernel's), -ESHUTDOWN.
 * From any thread. */
int sbx_fswatch_open(struct sbx_fswatches *ws, const struct sbx_fswatch_spec *s,
                     struct sbx_fswatch **ret, struct sbx_error *err);

/* The reader goes: the watch is kept for retain_ms for a resume, then ends. From any thread;
 * after it, w is gone (disarm a waiter first). */
void sbx_fswatch_close(struct sbx_fswatch *w);

/* The reader's next event: 1 and *ev filled; 0 when there is none yet; -errno when the watch
 * ended (err says why: -ESHUTDOWN, -ENOENT the directory went, -EMFILE a limit reached while
 * it grew, -EBUSY another client resumed it). The first event is ready; one that fell out of
 * the log comes as an overflow. */
int sbx_fswatch_next(struct sbx_fswatch *w, struct sbx_fsev *ev, struct sbx_error *err);

/* One-shot wake-up of a reader: fn runs on the loop thread once there is an event past what
 * it read, the watch ended, or keepalive_ms passed. */
struct sbx_fswatch_waiter {
    void (*fn)(struct sbx_fswatch_waiter *wt);
    bool armed;
};

/* Arms wt; false (not armed) when there is news already, so the caller reads again. */
bool sbx_fswatch_wait(struct sbx_fswatch *w, struct sbx_fswatch_waiter *wt);
/* Disarms wt; true when it was armed (fn will not run), false when fn ran or will. */
bool sbx_fswatch_unwait(struct sbx_fswatch *w, struct sbx_fswatch_waiter *wt);
