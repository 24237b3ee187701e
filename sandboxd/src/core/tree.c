#define _GNU_SOURCE
#include "tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"

#define MAX_MEMBERS 65536
#define MAX_ROUNDS  64
/* Waits of 200 us for members to stop, per signal: past 1 s in all (members in uninterruptible
 * sleep), the signal goes out anyway. */
#define STOP_WAIT_SPINS 5000

bool sbx_pidset_has(const struct sbx_pidset *m, pid_t pid)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->pid[i] == pid)
            return true;
    return false;
}

int sbx_pidset_stop_add(struct sbx_pidset *m, pid_t pid)
{
    (void)kill(pid, SIGSTOP);
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        pid_t *p;
        if (cap > MAX_MEMBERS)
            return -E2BIG;
        p = realloc(m->pid, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        m->pid = p;
        m->cap = cap;
    }
    m->pid[m->n++] = pid;
    return 0;
}

/* The state letter and parent of a process (name: its /proc entry) from /proc; -errno when it
 * is gone or unreadable. */
static int stat_of(int proc_fd, const char *name, char *state, pid_t *ppid)
{
    char path[64], buf[512];
    ssize_t n;
    int fd, pp;
    char *rp;

    snprintf(path, sizeof(path), "%s/stat", name);
    fd = openat(proc_fd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return n < 0 ? -errno : -ESRCH;
    buf[n] = '\0';
    rp = strrchr(buf, ')');
    if (!rp || sscanf(rp + 1, " %c %d", state, &pp) != 2)
        return -EINVAL;
    *ppid = (pid_t)pp;
    return 0;
}

/* The parent of pid from /proc, or -1. */
static pid_t parent_of(int proc_fd, const char *name)
{
    char state;
    pid_t ppid;

    return stat_of(proc_fd, name, &state, &ppid) == 0 ? ppid : -1;
}

/* Whether pid can no longer fork: stopped, traced, dead or gone. */
static bool settled(int proc_fd, pid_t pid)
{
    char name[16], state;
    pid_t ppid;

    snprintf(name, sizeof(name), "%d", (int)pid);
    if (stat_of(proc_fd, name, &state, &ppid) < 0)
        return true;
    return strchr("TtZXx", state) != NULL;
}

/* SIGSTOP is delivered when its target next leaves the kernel: one in the middle of a fork
 * finishes it first. Waits until the members from index `from` on are stopped, so that every
 * child they made is visible to the next scan; *spins bounds the waits. */
static void wait_stopped(const struct sbx_pidset *m, size_t from, int *spins)
{
    _cleanup_close_ int proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const struct timespec pause = {.tv_nsec = 200 * 1000};

    if (proc_fd < 0)
        return;
    for (; *spins > 0 && from < m->n; --*spins) {
        while (from < m->n && settled(proc_fd, m->pid[from]))
            from++;
        if (from < m->n)
            nanosleep(&pause, NULL);
    }
}

/* Adds members' children not yet in m, stopping each; returns how many were new, or -errno. */
static int scan_children(struct sbx_pidset *m, void *arg)
{
    (void)arg;
    _cleanup_close_ int proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d;
    struct dirent *de;
    int added = 0, r = 0;

    if (proc_fd < 0)
        return -errno;
    d = fdopendir(dup(proc_fd));
    if (!d)
        return -errno;
    while ((de = readdir(d)) && r == 0) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        pid_t ppid;

        if (*end || pid <= 0 || sbx_pidset_has(m, (pid_t)pid))
            continue;
        ppid = parent_of(proc_fd, de->d_name);
        if (ppid <= 0 || !sbx_pidset_has(m, ppid))
            continue;
        r = sbx_pidset_stop_add(m, (pid_t)pid);
        added++;
    }
    closedir(d);
    return r < 0 ? r : added;
}

int sbx_pidset_signal(struct sbx_pidset *m, int (*scan)(struct sbx_pidset *set, void *arg),
                      void *arg, int sig)
{
    size_t waited = 0;
    int r = 0, n = 0, spins = STOP_WAIT_SPINS;

    /* Stopped members cannot fork; one that forked before its stop shows up in the next scan. */
    for (int round = 0; round < MAX_ROUNDS; round++) {
        wait_stopped(m, waited, &spins);
        waited = m->n;
        r = scan(m, arg);
        if (r <= 0)
            break;
    }
    for (size_t i = 0; i < m->n; i++)
        if (kill(m->pid[i], sig) == 0)
            n++;
    if (sig != SIGKILL && sig != SIGSTOP)
        for (size_t i = 0; i < m->n; i++)
            (void)kill(m->pid[i], SIGCONT);
    free(m->pid);
    m->pid = NULL;
    m->n = m->cap = 0;
    return r < 0 && n == 0 ? r : n;
}

int sbx_tree_signal(pid_t pid, int sig)
{
    struct sbx_pidset m = {0};
    int r;

    if (kill(pid, 0) < 0)
        return -errno;
    r = sbx_pidset_stop_add(&m, pid);
    if (r < 0) {
        free(m.pid);
        return r;
    }
    return sbx_pidset_signal(&m, scan_children, NULL, sig);
}
