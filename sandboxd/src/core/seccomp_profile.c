#define _GNU_SOURCE
#include "seccomp_profile.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

SBX_DEFINE_CLEANUP(scmp_filter_ctx, seccomp_release)

/* EPERM whatever the arguments. Grouped by what they would reach. */
const char *const sbx_seccomp_denied[] = {
    /* the kernel itself: modules, a new kernel, reboot, kernel log, raw I/O ports */
    "init_module",
    "finit_module",
    "delete_module",
    "create_module",
    "query_module",
    "get_kernel_syms",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "syslog",
    "iopl",
    "ioperm",
    "uselib",
    "_sysctl",
    /* the mount table, old API and new */
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    /* other namespaces */
    "setns",
    /* the kernel keyrings, shared beyond the sandbox */
    "keyctl",
    "add_key",
    "request_key",
    /* large kernel attack surfaces the workloads we run do not need */
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    /* other processes' memory and file descriptors */
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "pidfd_getfd",
    "kcmp",
    /* the machine's clock, swap, accounting and quotas */
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "stime",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    "nfsservctl",
    /* files by handle, which bypass the path (the "shocker" escape) */
    "open_by_handle_at",
    NULL,
};

/* Namespace flags: clone and unshare fail with EPERM when any of them is asked for. */
static const uint64_t ns_flags[] = {
    CLONE_NEWNS,  CLONE_NEWUTS,    CLONE_NEWIPC, CLONE_NEWUSER,
    CLONE_NEWPID, CLONE_NEWCGROUP, CLONE_NEWNET, CLONE_NEWTIME,
};

int sbx_seccomp_parse_profile(const char *s, enum sbx_seccomp_profile *ret)
{
    if (strcmp(s, "default") == 0)
        *ret = SBX_SECCOMP_DEFAULT;
    else if (strcmp(s, "off") == 0)
        *ret = SBX_SECCOMP_OFF;
    else
        return -EINVAL;
    return 0;
}

static int add_rules(scmp_filter_ctx ctx, struct sbx_error *err)
{
    int r, nr;

    for (size_t i = 0; sbx_seccomp_denied[i]; i++) {
        nr = seccomp_syscall_resolve_name(sbx_seccomp_denied[i]);
        if (nr == __NR_SCMP_ERROR || nr < 0)
            continue; /* not a system call of this architecture */
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
        if (r < 0)
            return sbx_error_set(err, -r, "seccomp rule for '%s'", sbx_seccomp_denied[i]);
    }
    for (size_t i = 0; i < SBX_ARRAY_SIZE(ns_flags); i++) {
        uint64_t f = ns_flags[i];
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 1,
                             SCMP_A0(SCMP_CMP_MASKED_EQ, f, f));
        /* clone's low byte is the exit signal, where CLONE_NEWTIME's bit lies. */
        if (r == 0 && f > 0xff)
            r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                 SCMP_A0(SCMP_CMP_MASKED_EQ, f, f));
        if (r < 0)
            return sbx_error_set(err, -r, "seccomp rule for namespace flag %#llx",
                                 (unsigned long long)f);
    }
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
    if (r < 0)
        return sbx_error_set(err, -r, "seccomp rule for 'clone3'");
    return 0;
}

/* Exports ctx as BPF through a memfd and reads it back. */
static int export_bpf(scmp_filter_ctx ctx, struct sock_fprog *ret, struct sbx_error *err)
{
    _cleanup_close_ int fd = -1;
    _cleanup_free_ struct sock_filter *insns = NULL;
    struct stat st;
    ssize_t n;
    int r;

    fd = memfd_create("sandboxd-seccomp", MFD_CLOEXEC);
    if (fd < 0)
        return sbx_error_set(err, errno, "memfd_create");
    r = seccomp_export_bpf(ctx, fd);
    if (r < 0)
        return sbx_error_set(err, -r, "export seccomp filter");
    if (fstat(fd, &st) < 0)
        return sbx_error_set(err, errno, "stat seccomp filter");
    if (st.st_size <= 0 || st.st_size % (off_t)sizeof(struct sock_filter) != 0 ||
        st.st_size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS)
        return sbx_error_set(err, EINVAL, "seccomp filter of %lld bytes", (long long)st.st_size);
    insns = malloc((size_t)st.st_size);
    if (!insns)
        return sbx_error_set(err, ENOMEM, "allocate seccomp filter");
    n = pread(fd, insns, (size_t)st.st_size, 0);
    if (n != st.st_size)
        return sbx_error_set(err, n < 0 ? errno : EIO, "read seccomp filter back");
    ret->len = (unsigned short)(st.st_size / (off_t)sizeof(struct sock_filter));
    ret->filter = TAKE_PTR(insns);
    return 0;
}

int sbx_seccomp_build(enum sbx_seccomp_profile p, struct sock_fprog *ret, struct sbx_error *err)
{
    _cleanup_(seccomp_releasep) scmp_filter_ctx ctx = NULL;
    int r;

    *ret = (struct sock_fprog){0};
    if (p == SBX_SECCOMP_OFF)
        return 0;
    ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return sbx_error_set(err, ENOMEM, "seccomp_init");
    /* Only the native ABI: the filter would not match the numbers of another, so its calls are
     * refused (on x86_64, libseccomp sends x32 numbers here too). We set no_new_privs ourselves
     * and optimise the filter into a binary tree: a denylist is walked on every allowed call. */
    if ((r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(ENOSYS))) < 0 ||
        (r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0)) < 0)
        return sbx_error_set(err, -r, "seccomp filter attributes");
    /* libseccomp before 2.5 has no binary tree: the same filter, only slower. */
    (void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
    r = add_rules(ctx, err);
    if (r < 0)
        return r;
    return export_bpf(ctx, ret, err);
}

int sbx_seccomp_check(const struct sock_fprog *prog, struct sbx_error *err)
{
    int status = 0;
    pid_t pid = fork();

    if (pid < 0)
        return sbx_error_set(err, errno, "fork");
    if (pid == 0) {
        if (prctl(PR_SET_NO_NEW_PRIVS, 1L, 0L, 0L, 0L) < 0)
            _exit(1);
        if (prog && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog, 0L, 0L) < 0)
            _exit(errno == EINVAL ? 2 : 3);
        _exit(0);
    }
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return sbx_error_set(err, errno, "waitpid");
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 1)
        return sbx_error_set(err, EOPNOTSUPP, "the kernel refuses no_new_privs");
    return sbx_error_set(err, EOPNOTSUPP, "the kernel refuses the seccomp filter (status %#x)",
                         (unsigned)status);
}

void sbx_seccomp_release(struct sock_fprog *prog)
{
    free(prog->filter);
    *prog = (struct sock_fprog){0};
}
