/* Tries what the default seccomp profile refuses and what it must leave working, and prints one
 * "name=result" line each (OK, or the errno's name): the integration tests run it through the
 * daemon with the profile on and off. Every attempt is harmless when it reaches the kernel:
 * arguments are invalid, or the mount happens in a private mount namespace of our own. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void report(const char *name, long r)
{
    const char *e = r < 0 ? strerrorname_np(errno) : NULL;

    if (r >= 0)
        printf("%s=OK\n", name);
    else
        printf("%s=%s\n", name, e ? e : "E?");
}

static void try_fork(void)
{
    int status = 0;
    pid_t pid = fork();

    if (pid == 0)
        _exit(7);
    if (pid < 0) {
        report("fork", -1);
        return;
    }
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 7) {
        printf("fork=BADSTATUS\n");
        return;
    }
    report("fork", 0);
}

/* A real mount, of a tmpfs in a mount namespace of our own, so nothing outside sees it. */
static void try_private_mount(void)
{
    char dir[] = "/tmp/sbx-probe-XXXXXX";
    long r = unshare(CLONE_NEWNS);

    report("unshare_newns", r);
    if (r < 0)
        return;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 || !mkdtemp(dir)) {
        printf("mount_tmpfs=SETUP_FAILED\n");
        return;
    }
    r = mount("sbx-probe", dir, "tmpfs", 0, "size=64k");
    report("mount_tmpfs", r);
    if (r == 0)
        (void)umount(dir);
    (void)rmdir(dir);
}

static void print_status(void)
{
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");

    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "NoNewPrivs:", 11) == 0 || strncmp(line, "Seccomp:", 8) == 0 ||
            strncmp(line, "Seccomp_filters:", 16) == 0) {
            char *colon = strchr(line, ':');
            *colon = '\0';
            printf("%s=%ld\n", line, strtol(colon + 1, NULL, 10));
        }
    if (f)
        fclose(f);
}

int main(void)
{
    /* A target that does not exist: the kernel answers ENOENT, only a filter EPERM. */
    report("mount", mount("sbx-probe", "/nonexistent/sbx-probe", "tmpfs", 0, NULL));
    /* Flags no kernel knows: EINVAL once past the CAP_SYS_BOOT check. */
    report("kexec_load", syscall(SYS_kexec_load, 0UL, 0UL, NULL, 0x7ffe0000UL));
    /* No such command: EINVAL for root. */
    report("bpf", syscall(SYS_bpf, -1L, NULL, 0UL));
    /* No arguments: EINVAL from a kernel that has clone3. */
    report("clone3", syscall(SYS_clone3, NULL, 0UL));
    try_fork();
    try_private_mount();
    print_status();
    return 0;
}
