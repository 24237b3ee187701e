/* What the E2B port's filesystem files share (e2b_fs.c's calls, e2b_fs_watch.c's watches,
 * e2b_files.c's /files): the service's state, the request's user as credentials, a path
 * resolved as envd resolves it, errno as envd's Connect codes, an entry as EntryInfo. Below
 * them all, calling none of them. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "connect.h"
#include "e2b/filesystem/filesystem.pb-c.h"
#include "e2b_fs.h"
#include "e2b_fs_internal.h"
#include "e2b_internal.h"
#include "userfs.h"

struct e2b_fs_state sbx_e2b_fs_state;

const struct sbx_root *sbx_e2b_fs_slash(void)
{
    return &sbx_e2b_fs_state.slash;
}

uint64_t sbx_e2b_fs_max_upload(void)
{
    return sbx_e2b_fs_state.o.max_upload;
}

void sbx_e2b_cred_of(const struct sbx_e2b_user *u, struct sbx_cred *ret)
{
    size_t n = u->n_groups < SBX_CRED_MAX_GROUPS ? u->n_groups : SBX_CRED_MAX_GROUPS;

    ret->uid = u->uid;
    ret->gid = u->gid;
    ret->n_groups = n;
    memcpy(ret->groups, u->groups, n * sizeof(gid_t));
}

int sbx_e2b_fs_resolve(struct sbx_e2b_server *s, const struct sbx_e2b_user *u, const char *path,
                       char **ret, struct sbx_error *err)
{
    char workdir[sizeof(s->default_workdir)];

    if (strlen(path) >= PATH_MAX)
        return sbx_error_set(err, ENAMETOOLONG, "path longer than %d bytes", PATH_MAX - 1);
    if (!path[0] && s) {
        pthread_mutex_lock(&s->lock);
        memcpy(workdir, s->default_workdir, sizeof(workdir));
        pthread_mutex_unlock(&s->lock);
        if (workdir[0])
            path = workdir;
    }
    return sbx_ufs_resolve(path, u->home, ret, err);
}

int sbx_e2b_fs_code(int r)
{
    switch (-r) {
    case ENOENT:
        return SBX_CONNECT_NOT_FOUND;
    case EEXIST:
        return SBX_CONNECT_ALREADY_EXISTS;
    case EACCES:
    case EPERM:
    case EROFS:
        return SBX_CONNECT_PERMISSION_DENIED;
    case EINVAL:
    case ENOTDIR:
    case EISDIR:
    case EBUSY:
    case EREMOTE:
    case ENAMETOOLONG:
    case EXDEV:
        return SBX_CONNECT_INVALID_ARGUMENT;
    case ELOOP:
        return SBX_CONNECT_FAILED_PRECONDITION;
    case EFBIG:
    case EMFILE:
    case ENOSPC:
    case EDQUOT:
        return SBX_CONNECT_RESOURCE_EXHAUSTED;
    case ESHUTDOWN:
        return SBX_CONNECT_UNAVAILABLE;
    default:
        return SBX_CONNECT_INTERNAL;
    }
}

void sbx_e2b_fs_entry_pb(const struct sbx_ufs_entry *u, struct e2b_pb_entry *p)
{
    filesystem__entry_info__init(&p->e);
    google__protobuf__timestamp__init(&p->t);
    p->e.name = u->name;
    p->e.type = (Filesystem__FileType)u->type;
    p->e.path = u->path;
    p->e.size = u->size;
    p->e.mode = u->mode;
    p->e.permissions = (char *)u->permissions;
    p->e.owner = (char *)u->owner;
    p->e.group = (char *)u->group;
    p->t.seconds = u->mtime.tv_sec;
    p->t.nanos = (int32_t)u->mtime.tv_nsec;
    p->e.modified_time = &p->t;
    if (u->target) {
        p->e._symlink_target_case = FILESYSTEM__ENTRY_INFO___SYMLINK_TARGET_SYMLINK_TARGET;
        p->e.symlink_target = u->target;
    }
    p->me = NULL;
    p->mp = NULL;
    if (!u->n_meta || !(p->me = calloc(u->n_meta, sizeof(*p->me))) ||
        !(p->mp = calloc(u->n_meta, sizeof(*p->mp)))) {
        sbx_e2b_fs_entry_pb_release(p);
        return;
    }
    for (size_t i = 0; i < u->n_meta; i++) {
        filesystem__entry_info__metadata_entry__init(&p->me[i]);
        p->me[i].key = u->meta[i].key;
        p->me[i].value = u->meta[i].value;
        p->mp[i] = &p->me[i];
    }
    p->e.n_metadata = u->n_meta;
    p->e.metadata = p->mp;
}

void sbx_e2b_fs_entry_pb_release(struct e2b_pb_entry *p)
{
    free(p->me);
    free(p->mp);
    p->me = NULL;
    p->mp = NULL;
    p->e.n_metadata = 0;
    p->e.metadata = NULL;
}
