/* The records behind struct sbx_proc and its table, apart from proc.c's code; each process's
 * stdin is a struct sbx_proc_stdin (proc_stdin.h), which knows nothing of them. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loop.h"
#include "proc.h"
#include "proc_stdin.h"

#define NBUCKETS 1024

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

struct out {
    struct sbx_watch w;
    enum sbx_stream stream;
    bool paused;     /* out of epoll for want of credit */
    bool busy;       /* a thread is reading and delivering */
    bool again;      /* someone asked for a pump while busy */
    uint8_t *buf;    /* read-ahead of readahead bytes, used by the busy thread */
    size_t pos, len; /* the last read filled buf[0, len); [pos, len) is still to deliver */
};

struct sbx_proc {
    struct sbx_proctab *t;
    int refs;
    int32_t id;
    pid_t pid;
    bool pty;
    struct sbx_proc *next_id, *next_pid; /* hash chains, under the table lock */
    bool registered;

    pthread_mutex_t lock; /* everything below */
    struct out out[2];
    struct sbx_proc_stdin in;
    int credit;
    bool exited, delivered;
    bool discard; /* output is read and dropped */
    struct sbx_exit ex;
    const struct sbx_proc_sink *sink;
    void *sink_data;
    struct sbx_timer drain; /* armed at the exit while output fds are still open */
    bool drain_expired;     /* from now on an empty fd counts as closed */
};

struct sbx_proctab {
    struct sbx_loop *loop;
    struct sbx_proctab_opts opts;
    size_t chunk_size;
    size_t readahead; /* read from an output pipe at once, a whole number of chunks */
    int32_t next_id;
    pthread_mutex_t lock; /* the hash tables and count */
    struct sbx_proc *by_id[NBUCKETS];
    struct sbx_proc *by_pid[NBUCKETS];
    size_t count;
    size_t starting; /* places reserved by starts in progress */
    bool draining;   /* shutting down: no new start */
    /* Spawners hold it shared from clone to registration, the reaper exclusively around waitpid:
     * a pid the reaper collects is therefore always registered already (or not ours). */
    pthread_rwlock_t reap_lock;
};
