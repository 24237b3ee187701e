/* A sandboxd.v1 ProcessSpec's credentials and resource limits in the process table's terms:
 * checked here, apart from the calls that start the process, so the fuzz targets reach them. */
#pragma once

#include "error.h"
#include "proc.h"
#include "sandboxd/v1/processes.pb-c.h"

/* What sbx_spec_extras_build allocates; release with sbx_spec_extras_release. */
struct sbx_spec_extras {
    gid_t *groups;
    struct sbx_rlimit *rlimits;
};

/* Checks spec's user, seccomp profile and rlimits and sets o->confine from them (pointing into
 * x). Returns 0, -EINVAL with a message (too many groups or rlimits, an unknown rlimit or
 * profile, soft above hard), or -EOPNOTSUPP (the default profile is unavailable). */
int sbx_spec_extras_build(const Sandboxd__V1__ProcessSpec *spec, struct sbx_proc_opts *o,
                          struct sbx_spec_extras *x, struct sbx_error *err);
void sbx_spec_extras_release(struct sbx_spec_extras *x);
