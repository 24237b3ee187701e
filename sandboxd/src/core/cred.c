#define _GNU_SOURCE
#include "cred.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cleanup.h"

/* Room for the user database's answers (getpw*_r, getgr*_r); a group with more members than
 * this holds is named by its number. */
#define PWBUF_SIZE (16 * 1024)

int sbx_cred_lookup(const char *name, struct sbx_cred *ret, char **ret_home, struct sbx_error *err)
{
    _cleanup_free_ char *buf = malloc(PWBUF_SIZE);
    struct passwd pw, *found = NULL;
    int n = SBX_CRED_MAX_GROUPS, r;

    if (!buf)
        return sbx_error_set(err, ENOMEM, "allocate user lookup");
    r = getpwnam_r(name, &pw, buf, PWBUF_SIZE, &found);
    if (r != 0)
        return sbx_error_set(err, r, "look up user '%s': %s", name, strerror(r));
    if (!found)
        return sbx_error_set(err, ENOENT, "unknown user '%s'", name);
    if (getgrouplist(name, pw.pw_gid, ret->groups, &n) < 0)
        return sbx_error_set(err, E2BIG, "user '%s' is in more than %d groups", name,
                             SBX_CRED_MAX_GROUPS);
    ret->uid = pw.pw_uid;
    ret->gid = pw.pw_gid;
    ret->n_groups = (size_t)n;
    if (ret_home) {
        *ret_home = strdup(pw.pw_dir && pw.pw_dir[0] ? pw.pw_dir : "/");
        if (!*ret_home)
            return sbx_error_set(err, ENOMEM, "allocate home");
    }
    return 0;
}

/* setfsuid and setfsgid answer the previous id whatever happens; asking again with an id no
 * one has (-1) tells whether the change took. */
static bool set_fsuid(uid_t uid)
{
    setfsuid(uid);
    return (uid_t)setfsuid((uid_t)-1) == uid;
}

static bool set_fsgid(gid_t gid)
{
    setfsgid(gid);
    return (gid_t)setfsgid((gid_t)-1) == gid;
}

static int raw_setgroups(size_t n, const gid_t *groups)
{
    return syscall(SYS_setgroups, n, groups) < 0 ? -errno : 0;
}

int sbx_cred_enter(const struct sbx_cred *c, struct sbx_cred_saved *saved, struct sbx_error *err)
{
    int n, r;

    *saved = (struct sbx_cred_saved){0};
    if (geteuid() == c->uid && getegid() == c->gid)
        return 0; /* the daemon is that user: its own groups stand */
    n = getgroups(0, NULL);
    if (n < 0)
        return sbx_error_set(err, errno, "getgroups: %s", strerror(errno));
    saved->groups = malloc(((size_t)n + 1) * sizeof(gid_t));
    if (!saved->groups)
        return sbx_error_set(err, ENOMEM, "allocate groups");
    saved->n_groups = getgroups(n, saved->groups);
    saved->fsuid = (uid_t)setfsuid((uid_t)-1);
    saved->fsgid = (gid_t)setfsgid((gid_t)-1);
    if (saved->n_groups < 0) {
        r = sbx_error_set(err, errno, "getgroups: %s", strerror(errno));
        free(TAKE_PTR(saved->groups));
        return r;
    }
    /* From here on, leaving undoes whatever part of the switch happened. */
    saved->active = true;
    r = raw_setgroups(c->n_groups, c->groups);
    if (r == 0 && !set_fsgid(c->gid))
        r = -EPERM;
    if (r == 0 && !set_fsuid(c->uid))
        r = -EPERM;
    if (r < 0) {
        sbx_cred_leave(saved);
        return sbx_error_set(err, -r, "cannot act as uid %u: %s", (unsigned)c->uid, strerror(-r));
    }
    return 0;
}

void sbx_cred_leave(struct sbx_cred_saved *saved)
{
    if (!saved->active)
        return;
    saved->active = false;
    /* The uid first: with fsuid 0 again the thread may set the rest. */
    if (!set_fsuid(saved->fsuid) || !set_fsgid(saved->fsgid) ||
        raw_setgroups((size_t)saved->n_groups, saved->groups) < 0)
        abort();
    free(TAKE_PTR(saved->groups));
}

void sbx_cred_user_name(uid_t uid, char *out, size_t len)
{
    _cleanup_free_ char *buf = malloc(PWBUF_SIZE);
    struct passwd pw, *found = NULL;

    if (buf && getpwuid_r(uid, &pw, buf, PWBUF_SIZE, &found) == 0 && found)
        snprintf(out, len, "%s", pw.pw_name);
    else
        snprintf(out, len, "%u", (unsigned)uid);
}

void sbx_cred_group_name(gid_t gid, char *out, size_t len)
{
    _cleanup_free_ char *buf = malloc(PWBUF_SIZE);
    struct group gr, *found = NULL;

    if (buf && getgrgid_r(gid, &gr, buf, PWBUF_SIZE, &found) == 0 && found)
        snprintf(out, len, "%s", gr.gr_name);
    else
        snprintf(out, len, "%u", (unsigned)gid);
}
