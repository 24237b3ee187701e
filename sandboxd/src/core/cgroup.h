/* Per-process cgroups under our own: memory and pids limits, membership for tree kills, OOM
 * kills told apart. cgroup v1 (a hierarchy per controller) and v2 (one hierarchy, where we first
 * move ourselves into a leaf so that our cgroup may enable controllers for its children). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

struct sbx_cgroups;
struct sbx_cgroup;

/* Finds our cgroups and checks that we may make children there. -EOPNOTSUPP (with the reason in
 * err) when the kernel gives us no writable cgroup. On cgroup v2 it moves the calling process
 * into a leaf cgroup "sandboxd" below its own, so that its own may enable controllers. Under
 * gVisor, whose memory limits are stored but never applied (and pids limits not held on v1),
 * those limits are not offered; its cgroups still hold each process's tree. */
int sbx_cgroups_open(struct sbx_cgroups **ret, struct sbx_error *err);
void sbx_cgroups_free(struct sbx_cgroups *c);

/* "v1" or "v2", and whether memory and pids limits can be set. */
const char *sbx_cgroups_version(const struct sbx_cgroups *c);
bool sbx_cgroups_has_memory(const struct sbx_cgroups *c);
bool sbx_cgroups_has_pids(const struct sbx_cgroups *c);
/* Why memory (pids) limits cannot be set here ("gVisor does not enforce cgroup memory
 * limits", "no writable pids cgroup"...), or NULL when they can. */
const char *sbx_cgroups_why_no_memory(const struct sbx_cgroups *c);
const char *sbx_cgroups_why_no_pids(const struct sbx_cgroups *c);

/* Makes a cgroup named name under ours with the given limits (0: none); -EOPNOTSUPP for a limit
 * that cannot be set here. */
int sbx_cgroup_new(struct sbx_cgroups *c, const char *name, uint64_t memory_bytes, uint64_t pids,
                   struct sbx_cgroup **ret, struct sbx_error *err);

/* The cgroup.procs fds a child writes "0" into, between clone and exec, to join. */
#define SBX_CGROUP_MAX_FDS 2
int sbx_cgroup_join_fds(const struct sbx_cgroup *g, const int **fds);

/* Sends sig to every member; returns how many. With SIGKILL, repeats until none is left (or a
 * bound). */
int sbx_cgroup_signal(struct sbx_cgroup *g, int sig);

/* Some process is in the cgroup (what a process left behind, once it has exited itself). */
bool sbx_cgroup_has_members(const struct sbx_cgroup *g);

/* The OOM killer killed a member since the cgroup was made. */
bool sbx_cgroup_oom_killed(struct sbx_cgroup *g);

/* Removes the cgroup; while members live on (what a process left behind) it stays, their limits
 * with it, until a sweep finds it empty. */
void sbx_cgroup_free(struct sbx_cgroup *g);

/* Removes the freed cgroups that have become empty. Thread-safe. */
void sbx_cgroups_sweep(struct sbx_cgroups *c);
