/* A user's credentials for file operations done on their behalf by one thread of the daemon.
 * The switch is per thread: setfsuid/setfsgid and the raw setgroups system call change the
 * calling thread's credentials only (glibc's setgroups() would change every thread's, through
 * its set*id broadcast). A thread that switched acts as the user for path lookups and
 * permission checks, and what it creates is the user's; the other threads keep the daemon's.
 * The kernel drops the file capabilities (CAP_DAC_OVERRIDE, CAP_FOWNER, ...) from the effective
 * set while the fsuid is not 0, and gives them back when it is 0 again. Knows nothing of the
 * wire. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"

#define SBX_CRED_MAX_GROUPS 64

struct sbx_cred {
    uid_t uid;
    gid_t gid;
    size_t n_groups; /* supplementary groups, the primary one included */
    gid_t groups[SBX_CRED_MAX_GROUPS];
};

/* Looks name up in the user database: uid, primary group, supplementary groups (at most
 * SBX_CRED_MAX_GROUPS; more is -E2BIG) and, when ret_home is not NULL, the home directory
 * (malloc'ed). -ENOENT for an unknown user. */
int sbx_cred_lookup(const char *name, struct sbx_cred *ret, char **ret_home, struct sbx_error *err);

/* What a thread had before sbx_cred_enter, to go back to. */
struct sbx_cred_saved {
    bool active;
    uid_t fsuid;
    gid_t fsgid;
    int n_groups;
    gid_t *groups;
};

/* The calling thread acts as c until sbx_cred_leave(saved). When the thread is c already
 * (the daemon runs as that user), nothing changes. -EPERM when the daemon may not switch. */
int sbx_cred_enter(const struct sbx_cred *c, struct sbx_cred_saved *saved, struct sbx_error *err);
/* Back to the thread's own credentials; accepts a saved that was never entered. Aborts if the
 * kernel refuses: a thread left acting as another user must not serve anyone else. */
void sbx_cred_leave(struct sbx_cred_saved *saved);

/* The owner and group names of uid and gid ("1234" when the database has none), into out
 * buffers of size len. */
void sbx_cred_user_name(uid_t uid, char *out, size_t len);
void sbx_cred_group_name(gid_t gid, char *out, size_t len);
