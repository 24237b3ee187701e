/* Process trees: a process and every descendant, whatever their group or session. */
#pragma once

#include <sys/types.h>

/* Sends sig to pid and all its descendants. They are stopped first (SIGSTOP, rescanning until
 * no new one appears), so that none forks or is orphaned in between; those not killed are
 * continued afterwards. Descendants already orphaned (re-parented to us) are out of reach.
 * Returns how many processes were signalled, or -errno. */
int sbx_tree_signal(pid_t pid, int sig);
