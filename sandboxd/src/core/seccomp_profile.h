/* The seccomp filter of the processes we spawn, built once at start-up with libseccomp and
 * exported to a classic BPF program, so that a child between clone and exec only has to hand
 * it to prctl(PR_SET_SECCOMP) (async-signal-safe, no allocation).
 *
 * The default profile, in the spirit of the container runtimes' default profiles: everything is
 * allowed except what reaches the kernel's global state or other processes, which fails with
 * EPERM (see the table in seccomp_profile.c and the README); clone3 fails with ENOSYS, since its
 * flags sit in memory that a filter cannot read, and glibc then falls back to clone, whose flags it
 * can; system calls of a foreign ABI (i386 through int 0x80, x32 on x86_64) fail with ENOSYS.
 *
 * Named seccomp_profile, not seccomp: our include path would shadow libseccomp's <seccomp.h>. */
#pragma once

#include <linux/filter.h>
#include <stddef.h>

#include "error.h"

enum sbx_seccomp_profile {
    SBX_SECCOMP_OFF,
    SBX_SECCOMP_DEFAULT,
};

/* "default" or "off". Returns 0 or -EINVAL. */
int sbx_seccomp_parse_profile(const char *s, enum sbx_seccomp_profile *ret);

/* Builds the program of a profile into *ret (filter malloc'ed; for SBX_SECCOMP_OFF, an empty
 * program: filter NULL, len 0). Returns 0 or -errno. */
int sbx_seccomp_build(enum sbx_seccomp_profile p, struct sock_fprog *ret, struct sbx_error *err);

/* Checks that the kernel takes the program (and no_new_privs): loads both in a child of ours
 * that exits at once. A kernel without seccomp filters (or a sandbox that refuses them) is
 * better told at start-up than by every spawn failing. Call while no other thread runs: it
 * forks. Returns 0 or -errno. */
int sbx_seccomp_check(const struct sock_fprog *prog, struct sbx_error *err);

/* Frees the program and empties it. Accepts an empty one. */
void sbx_seccomp_release(struct sock_fprog *prog);

/* The names of the system calls the default profile refuses with EPERM whatever their
 * arguments, NULL-terminated (for tests and documentation). Names this architecture does not
 * have are skipped when the filter is built. */
extern const char *const sbx_seccomp_denied[];
