#include "grpc_spec.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "utf8.h"

void sbx_spec_extras_release(struct sbx_spec_extras *x)
{
    free(x->groups);
    free(x->rlimits);
}

int sbx_spec_extras_build(const Sandboxd__V1__ProcessSpec *spec, struct sbx_proc_opts *o,
                          struct sbx_spec_extras *x, struct sbx_error *err)
{
    if (spec->user) {
        const Sandboxd__V1__Credentials *u = spec->user;
        if (u->n_groups > 65536)
            return sbx_error_set(err, EINVAL, "too many groups: %zu", u->n_groups);
        x->groups = calloc(u->n_groups + 1, sizeof(gid_t));
        if (!x->groups)
            return sbx_error_set(err, ENOMEM, "allocate groups");
        for (size_t i = 0; i < u->n_groups; i++)
            x->groups[i] = (gid_t)u->groups[i];
        o->confine.set_user = true;
        o->confine.uid = (uid_t)u->uid;
        o->confine.gid = (gid_t)u->gid;
        o->confine.groups = x->groups;
        o->confine.n_groups = u->n_groups;
    }
    if (!spec->seccomp || !spec->seccomp[0])
        o->confine.seccomp = SBX_SPAWN_SECCOMP_DAEMON;
    else if (strcmp(spec->seccomp, "off") == 0)
        o->confine.seccomp = SBX_SPAWN_SECCOMP_OFF;
    else if (strcmp(spec->seccomp, "default") == 0 && sbx_spawn_has_default_profile())
        o->confine.seccomp = SBX_SPAWN_SECCOMP_DEFAULT;
    else if (strcmp(spec->seccomp, "default") == 0)
        return sbx_error_set(err, EOPNOTSUPP, "the default seccomp profile is unavailable here");
    else
        return sbx_error_set(err, EINVAL, "seccomp must be \"\", \"default\" or \"off\"");
    if (spec->n_rlimits > 64)
        return sbx_error_set(err, EINVAL, "too many rlimits: %zu", spec->n_rlimits);
    x->rlimits = calloc(spec->n_rlimits + 1, sizeof(*x->rlimits));
    if (!x->rlimits)
        return sbx_error_set(err, ENOMEM, "allocate rlimits");
    for (size_t i = 0; i < spec->n_rlimits; i++) {
        const Sandboxd__V1__ResourceLimit *l = spec->rlimits[i];
        int res = sbx_utf8_valid(l->name) ? sbx_rlimit_resource(l->name) : -1;
        uint64_t hard = l->hard ? l->hard : l->soft;
        if (res < 0)
            return sbx_error_set(err, EINVAL, "unknown rlimit \"%s\"", l->name);
        if (l->soft > hard)
            return sbx_error_set(err, EINVAL, "rlimit %s: soft %llu above hard %llu", l->name,
                                 (unsigned long long)l->soft, (unsigned long long)hard);
        x->rlimits[i].resource = res;
        x->rlimits[i].lim.rlim_cur = l->soft == UINT64_MAX ? RLIM_INFINITY : (rlim_t)l->soft;
        x->rlimits[i].lim.rlim_max = hard == UINT64_MAX ? RLIM_INFINITY : (rlim_t)hard;
    }
    o->confine.rlimits = x->rlimits;
    o->confine.n_rlimits = spec->n_rlimits;
    return 0;
}
