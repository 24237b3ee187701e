/* The default profile, loaded in a child of ours: what it refuses and what it leaves alone. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "seccomp_profile.h"
#include "tap.h"

#define MAX_RESULTS 128
#define NO_I386     (-1000000L) /* the kernel has no i386 entry point */

/* What the filtered child saw, in memory shared with us: errno of each attempt, 0 for success. */
struct results {
    int denied[MAX_RESULTS];
    int clone3, unshare_user, unshare_files, clone_newuser, fork_status, exec_status, getpid_ok;
    long int80_getpid, x32_getpid;
};

static int err_of(long r)
{
    return r < 0 ? errno : 0;
}

#if defined(__x86_64__)
/* getpid (20) through the i386 entry point. */
static long int80_getpid(void)
{
    long ret;
    __asm__ volatile("int $0x80"
                     : "=a"(ret)
                     : "a"(20L)
                     : "memory", "cc", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15");
    return ret;
}
#endif

static int run_child_status(pid_t pid)
{
    int status = 0;

    if (pid < 0)
        return -errno;
    if (pid == 0)
        _exit(7);
    if (waitpid(pid, &status, 0) != pid)
        return -errno;
    return status;
}

static void filtered_child(const struct sock_fprog *prog, struct results *res)
{
    if (prctl(PR_SET_NO_NEW_PRIVS, 1L, 0L, 0L, 0L) < 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog, 0L, 0L) < 0)
        _exit(100);
    /* Every argument -1: harmless even if one of them reached the kernel. */
    for (size_t i = 0; sbx_seccomp_denied[i] && i < MAX_RESULTS; i++) {
        int nr = seccomp_syscall_resolve_name(sbx_seccomp_denied[i]);
        res->denied[i] = nr < 0 ? -1 : err_of(syscall(nr, -1L, -1L, -1L, -1L, -1L, -1L));
    }
    res->clone3 = err_of(syscall(SYS_clone3, NULL, 0UL));
    res->unshare_user = err_of(unshare(CLONE_NEWUSER));
    res->unshare_files = err_of(unshare(CLONE_FILES));
    {
        long r = syscall(SYS_clone, (long)(CLONE_NEWUSER | SIGCHLD), 0L, 0L, 0L, 0L);
        if (r == 0)
            _exit(0);
        res->clone_newuser = err_of(r);
        if (r > 0)
            (void)waitpid((pid_t)r, NULL, 0);
    }
    res->fork_status = run_child_status(fork());
    {
        pid_t pid = fork();
        if (pid == 0) {
            char *argv[] = {"true", NULL};
            execv("/bin/true", argv);
            _exit(99);
        }
        res->exec_status = pid < 0 ? -1 : 0;
        if (pid > 0 && waitpid(pid, &res->exec_status, 0) != pid)
            res->exec_status = -1;
    }
    res->getpid_ok = getpid() > 0;
    res->x32_getpid = err_of(syscall(0x40000000L | SYS_getpid));
#if defined(__x86_64__)
    /* In a child of its own: a kernel without the i386 entry point kills it (SIGSEGV). */
    {
        pid_t pid = fork();
        int status = 0;
        if (pid == 0) {
            res->int80_getpid = int80_getpid();
            _exit(0);
        }
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
            res->int80_getpid = NO_I386;
    }
#endif
    _exit(0);
}

int main(void)
{
    enum sbx_seccomp_profile p = SBX_SECCOMP_OFF;
    struct sock_fprog prog = {0};
    struct sbx_error err = {0};
    struct results *res;
    int status = 0;
    pid_t pid;

    ok(sbx_seccomp_parse_profile("default", &p) == 0 && p == SBX_SECCOMP_DEFAULT, "default");
    ok(sbx_seccomp_parse_profile("off", &p) == 0 && p == SBX_SECCOMP_OFF, "off");
    ok(sbx_seccomp_parse_profile("strict", &p) == -EINVAL, "unknown profile");
    ok(sbx_seccomp_build(SBX_SECCOMP_OFF, &prog, &err) == 0 && !prog.filter && prog.len == 0,
       "off builds an empty program");
    ok(sbx_seccomp_build(SBX_SECCOMP_DEFAULT, &prog, &err) == 0 && prog.filter && prog.len > 10,
       "default builds a program of %u instructions", prog.len);
    ok(sbx_seccomp_check(&prog, &err) == 0, "the kernel takes the program");
    ok(sbx_seccomp_check(NULL, &err) == 0, "the kernel takes no_new_privs alone");
    {
        struct sock_filter bad_insn = {.code = 0xffff};
        struct sock_fprog bad = {.len = 1, .filter = &bad_insn};
        ok(sbx_seccomp_check(&bad, &err) == -EOPNOTSUPP && strstr(err.msg, "refuses"),
           "a program the kernel refuses is told: %s", err.msg);
    }
    res = mmap(NULL, sizeof(*res), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (res == MAP_FAILED)
        return 1;
    memset(res, 0xff, sizeof(*res));
    pid = fork();
    if (pid == 0)
        filtered_child(&prog, res);
    ok(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
       "the filtered child ran to its end (status %#x)", status);
    for (size_t i = 0; sbx_seccomp_denied[i] && i < MAX_RESULTS; i++)
        if (res->denied[i] != -1)
            ok(res->denied[i] == EPERM, "%s: EPERM (got %s)", sbx_seccomp_denied[i],
               strerror(res->denied[i]));
    ok(res->clone3 == ENOSYS, "clone3: ENOSYS (got %s)", strerror(res->clone3));
    ok(res->unshare_user == EPERM, "unshare(CLONE_NEWUSER): EPERM");
    ok(res->unshare_files == 0, "unshare(CLONE_FILES) still works");
    ok(res->clone_newuser == EPERM, "clone(CLONE_NEWUSER): EPERM (got %s)",
       strerror(res->clone_newuser));
    ok(WIFEXITED(res->fork_status) && WEXITSTATUS(res->fork_status) == 7, "fork works");
    ok(WIFEXITED(res->exec_status) && WEXITSTATUS(res->exec_status) == 0, "exec works");
    ok(res->getpid_ok == 1, "getpid works");
    ok(res->x32_getpid == ENOSYS, "an x32 system call: ENOSYS");
#if defined(__x86_64__)
    if (res->int80_getpid == NO_I386)
        printf("# skip: this kernel has no i386 entry point (int 0x80 killed the child)\n");
    else
        ok(res->int80_getpid == -ENOSYS, "an i386 system call (int 0x80): ENOSYS (got %ld)",
           res->int80_getpid);
#endif
    sbx_seccomp_release(&prog);
    ok(!prog.filter && prog.len == 0, "release empties");
    return done_testing();
}
