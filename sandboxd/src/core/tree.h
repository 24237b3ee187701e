/* Process trees: a process and every descendant, whatever their group or session; and the
 * stop-signal-continue that reaches a set of processes that may fork meanwhile. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct sbx_pidset {
    pid_t *pid;
    size_t n, cap;
};

bool sbx_pidset_has(const struct sbx_pidset *s, pid_t pid);
/* Adds pid after stopping it (SIGSTOP); -E2BIG past a bound, -ENOMEM. */
int sbx_pidset_stop_add(struct sbx_pidset *s, pid_t pid);

/* Grows set with scan (which adds members with sbx_pidset_stop_add and returns how many were new,
 * or -errno) until a round finds none, waiting before each round until the members found so far
 * have stopped (bounded), so that no member forks away; then sends sig to every
 * member and, unless sig is SIGKILL or SIGSTOP, continues them. Frees the set. Returns how many
 * were signalled, or -errno when none was. */
int sbx_pidset_signal(struct sbx_pidset *set, int (*scan)(struct sbx_pidset *set, void *arg),
                      void *arg, int sig);

/* Sends sig to pid and all its descendants. They are stopped first (SIGSTOP, rescanning until
 * no new one appears), so that none forks or is orphaned in between; those not killed are
 * continued afterwards. Descendants already orphaned (re-parented to us) are out of reach.
 * Returns how many processes were signalled, or -errno. */
int sbx_tree_signal(pid_t pid, int sig);
