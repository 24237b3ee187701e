/* Starting a child from the threaded daemon. Everything the child needs is prepared before the
 * clone; the child (sharing our memory until it execs) makes only async-signal-safe calls. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "error.h"

struct sock_fprog;

struct sbx_rlimit {
    int resource; /* RLIMIT_* */
    struct rlimit lim;
};

/* What confines the child, set up between clone and exec: its cgroups, resource limits and
 * credentials (with raw syscalls: glibc's set*id would try to change every thread of ours,
 * whose memory the child shares). */
struct sbx_spawn_confine {
    const int *cgroup_fds; /* cgroup.procs files the child joins by writing "0" */
    int n_cgroup_fds;
    bool set_user;
    uid_t uid;
    gid_t gid;
    const gid_t *groups;
    size_t n_groups;
    const struct sbx_rlimit *rlimits;
    size_t n_rlimits;
    enum {
        SBX_SPAWN_SECCOMP_DAEMON = 0, /* the daemon's profile (--seccomp) */
        SBX_SPAWN_SECCOMP_DEFAULT,    /* the default profile (sbx_spawn_has_default_profile) */
        SBX_SPAWN_SECCOMP_OFF,        /* none */
    } seccomp;
};

struct sbx_spawn {
    const char *path;  /* executable, resolved (sbx_spawn_lookup) or containing a '/' */
    char *const *argv; /* NULL-terminated */
    char *const *envp; /* NULL-terminated, the whole environment */
    int cwd_fd;        /* directory to fchdir to, or -1 to keep ours */
    bool pty;          /* stdio on a new pseudo-terminal, which becomes the controlling tty */
    bool stdin_null;   /* stdin from /dev/null (no pty) */
    /* Our own stdio, passed through (the main process of sandboxd -- cmd): the child gets a new
     * process group rather than a session, and the foreground of our terminal if we have one. */
    bool inherit_stdio;
    unsigned short cols, rows;
    struct sbx_spawn_confine confine;
    /* Written to /proc/self/oom_score_adj before exec, when not empty (a decimal string). */
    const char *oom_score_adj;
};

/* The RLIMIT_NOFILE every child starts with (before a request's rlimits): the daemon raises its
 * own soft limit for its many fds, and its children get the one it was started with. */
void sbx_spawn_set_base_nofile(const struct rlimit *lim);

/* RLIMIT_* of a lower-case name ("nofile"), or -1. */
int sbx_rlimit_resource(const char *name);

/* The parent's ends, all O_CLOEXEC and O_NONBLOCK. With a pty, out_fd is the master, in_fd a
 * duplicate of it, err_fd is -1. in_fd is -1 with stdin_null; all are -1 with inherit_stdio. */
struct sbx_spawned {
    pid_t pid;
    int in_fd;
    int out_fd;
    int err_fd;
};

/* Starts the child in a new session (its pid is its process group; with inherit_stdio, a new
 * process group only). On exec failure the child
 * is reaped here and the exec errno returned: the caller must keep other reapers out (proc.c holds
 * the reap lock). Returns 0 or -errno. */
int sbx_spawn_run(const struct sbx_spawn *s, struct sbx_spawned *ret, struct sbx_error *err);

/* Finds name in the colon-separated search path (a default one when NULL), as execvp does.
 * A name containing '/' is returned as is. *ret is malloc'ed. Returns 0, -ENOENT or -EACCES. */
int sbx_spawn_lookup(const char *name, const char *search_path, char **ret, struct sbx_error *err);

/* Isolation of every child from now on, applied just before it execs: no_new_privs, then the
 * seccomp program when not NULL (borrowed: it must outlive every spawn); dflt is the default
 * profile a request may ask for by name (NULL when unavailable). Call before the first
 * spawn, while no other thread spawns. */
void sbx_spawn_set_isolation(const struct sock_fprog *seccomp, const struct sock_fprog *dflt,
                             bool no_new_privs);

/* Loads the daemon's seccomp program (with no_new_privs) onto the calling thread, once, for a
 * thread that spawns often: its children inherit it instead of each loading it between clone
 * and exec, where the kernel checks, converts and JIT-compiles it every time. The thread itself
 * then runs under the filter. A child that must not have it (a request's profile "off") is
 * spawned by a thread kept without it. Threads a confined thread creates inherit the filter
 * without knowing it: they must not spawn. After sbx_spawn_set_isolation; nothing to do when
 * the daemon's profile is off. Returns 0 or -errno (the thread is left as it was). */
int sbx_spawn_confine_thread(struct sbx_error *err);

/* Whether a request may ask for the default profile (it was built and the kernel takes it). */
bool sbx_spawn_has_default_profile(void);

/* Checks that a child can be created right now (pids, memory): clones one that exits at once,
 * left for the reaper. Returns 0 or -errno. */
int sbx_spawn_probe(void);
