/* Leader election with a coordination.k8s.io/v1 Lease, as client-go does it: the holder renews
 * every retry period; another candidate takes the lease once it has seen no renewal for the
 * lease duration (by its own clock: no clock skew between nodes matters), with optimistic
 * concurrency on the Lease's resourceVersion. A leader that cannot renew within the renew
 * deadline has lost. On stop, a leader hands the lease back at once. */
#pragma once

#include <stdbool.h>

#include "error.h"
#include "kube.h"

struct sbx_leader_opts {
    const char *namespace, *name, *identity;
    int lease_duration_s; /* 15 */
    int renew_deadline_s; /* 10 */
    int retry_period_s;   /* 2 */
};

struct sbx_leader;

/* Starts campaigning on a thread of its own. */
int sbx_leader_start(struct sbx_kube *k, const struct sbx_leader_opts *o, struct sbx_leader **ret,
                     struct sbx_error *err);

/* 1 while leading, 0 before, -1 once leadership was lost (the process should exit). */
int sbx_leader_state(struct sbx_leader *l);

/* Stops campaigning and, when leading, releases the lease. Accepts NULL. */
void sbx_leader_free(struct sbx_leader *l);
