#define _GNU_SOURCE
#include "cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "tree.h"

enum { CTL_MEMORY, CTL_PIDS, N_CTL };

/* A cgroup's directory (ours, PATH_MAX at most, plus a name), and a file in it. */
#define DIR_MAX       (PATH_MAX + 256)
#define FILE_PATH_MAX (DIR_MAX + 64)

/* SIGKILL rounds of sbx_cgroup_signal, 1 ms apart, until the member list is empty. */
#define KILL_ROUNDS 200

/* What gVisor's uname(2) says in every version: its release ends in "-gvisor" (before 2025 it
 * was a plain "4.4.0"), its version is this fixed string. */
#define GVISOR_UTS_VERSION "#1 SMP Sun Jan 10 15:06:54 PST 2016"

static const char *const ctl_names[N_CTL] = {"memory", "pids"};

struct sbx_cgroups {
    bool v2;
    /* Our cgroup's directory per controller (v1), or the one directory (v2, in [0] and [1]);
     * empty when that controller is not usable. */
    char dir[N_CTL][PATH_MAX];
    char leaf[PATH_MAX + 16];            /* v2: the leaf we moved into */
    char why_not[N_CTL][PATH_MAX + 128]; /* why a controller's limits cannot be set */
    bool ignored[N_CTL];                 /* limits would be taken, not held (gVisor) */
    pthread_mutex_t lock;
    struct sbx_cgroup *graveyard; /* freed while members lived on: removed once empty */
};

struct sbx_cgroup {
    struct sbx_cgroups *c;
    char dir[N_CTL][DIR_MAX]; /* v2: [i] the same for every controller */
    int join[SBX_CGROUP_MAX_FDS];
    int n_join;
    uint64_t oom_before;
    struct sbx_cgroup *next; /* in the graveyard */
};

/* Writes a string to dir/file; 0 or -errno. */
static int write_file(const char *dir, const char *file, const char *value)
{
    char path[FILE_PATH_MAX];
    _cleanup_close_ int fd = -1;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (write(fd, value, strlen(value)) < 0)
        return -errno;
    return 0;
}

/* Reads "key N" from dir/file (memory.events, memory.oom_control); 0 when absent. */
static uint64_t read_key(const char *dir, const char *file, const char *key)
{
    char path[FILE_PATH_MAX], name[64];
    _cleanup_fclose_ FILE *f = NULL;
    unsigned long long v;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    f = fopen(path, "re");
    while (f && fscanf(f, "%63s %llu", name, &v) == 2)
        if (strcmp(name, key) == 0)
            return v;
    return 0;
}

/* The mount point and root of the hierarchy holding controller (v1), or of cgroup2 (NULL). */
static bool find_mount(const char *controller, char *mnt, size_t mlen, char *root, size_t rlen)
{
    _cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096];

    while (f && fgets(line, sizeof(line), f)) {
        char r[PATH_MAX], m[PATH_MAX], fstype[64], super[1024];
        const char *sep = strstr(line, " - ");
        if (!sep || sscanf(line, "%*s %*s %*s %4095s %4095s", r, m) != 2 ||
            sscanf(sep + 3, "%63s %*s %1023s", fstype, super) != 2)
            continue;
        if (controller ? strcmp(fstype, "cgroup") != 0 : strcmp(fstype, "cgroup2") != 0)
            continue;
        if (controller) {
            bool found = false;
            for (char *tok = strtok(super, ","); tok; tok = strtok(NULL, ","))
                found |= strcmp(tok, controller) == 0;
            if (!found)
                continue;
        }
        snprintf(mnt, mlen, "%s", m);
        snprintf(root, rlen, "%s", r);
        return true;
    }
    return false;
}

/* Our path in the hierarchy of controller (v1), or in the unified one (NULL). */
static bool find_path(const char *controller, char *path, size_t len)
{
    _cleanup_fclose_ FILE *f = fopen("/proc/self/cgroup", "re");
    char line[4096];

    while (f && fgets(line, sizeof(line), f)) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        bool match = false;
        if (!c2)
            continue;
        *c2 = '\0';
        line[strcspn(c2 + 1, "\n") + (size_t)(c2 + 1 - line)] = '\0';
        if (!controller) {
            match = c1[1] == '\0';
        } else {
            for (char *tok = strtok(c1 + 1, ","); tok; tok = strtok(NULL, ","))
                match |= strcmp(tok, controller) == 0;
        }
        if (match) {
            snprintf(path, len, "%s", c2 + 1);
            return true;
        }
    }
    return false;
}

/* dir = mount + (path relative to the mount's root). */
static bool cgroup_dir(const char *controller, char *dir, size_t len)
{
    char mnt[PATH_MAX], root[PATH_MAX], path[PATH_MAX];
    const char *rel;
    size_t rl;

    if (!find_mount(controller, mnt, sizeof(mnt), root, sizeof(root)) ||
        !find_path(controller, path, sizeof(path)))
        return false;
    rl = strlen(root);
    rel = strcmp(root, "/") != 0 && strncmp(path, root, rl) == 0 ? path + rl : path;
    return (size_t)snprintf(dir, len, "%s%s", mnt, strcmp(rel, "/") == 0 ? "" : rel) < len;
}

/* Can we make a child cgroup in dir? */
static bool writable(const char *dir)
{
    char probe[PATH_MAX + 64];

    snprintf(probe, sizeof(probe), "%s/sandboxd-probe-%d", dir, getpid());
    if (mkdir(probe, 0755) < 0 && errno != EEXIST)
        return false;
    return rmdir(probe) == 0;
}

/* Reads the first line of dir/file into buf; false when it cannot. */
static bool read_line(const char *dir, const char *file, char *buf, size_t len)
{
    char path[FILE_PATH_MAX];
    _cleanup_fclose_ FILE *f = NULL;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    f = fopen(path, "re");
    if (!f || !fgets(buf, (int)len, f))
        return false;
    buf[strcspn(buf, "\n")] = '\0';
    return true;
}

/* Is name a word of the space-separated list? */
static bool has_word(const char *list, const char *name)
{
    size_t n = strlen(name);

    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return true;
    return false;
}

/* v2: enables each controller that dir offers for its children; false when none could be. */
static bool enable_controllers(struct sbx_cgroups *c, const char *dir, const char *offered)
{
    for (int i = 0; i < N_CTL; i++) {
        char add[32];
        int r;
        if (!has_word(offered, ctl_names[i])) {
            snprintf(c->why_not[i], sizeof(c->why_not[i]), "no %s controller in cgroup v2",
                     ctl_names[i]);
            continue;
        }
        snprintf(add, sizeof(add), "+%s", ctl_names[i]);
        r = write_file(dir, "cgroup.subtree_control", add);
        if (r == 0)
            snprintf(c->dir[i], sizeof(c->dir[i]), "%s", dir);
        else
            snprintf(c->why_not[i], sizeof(c->why_not[i]), "cannot enable %s below '%s': %s%s",
                     ctl_names[i], dir, strerror(-r),
                     r == -EBUSY ? " (other processes share our cgroup: sandboxd must be the "
                                   "first process of its container)"
                                 : "");
    }
    return c->dir[CTL_MEMORY][0] || c->dir[CTL_PIDS][0];
}

/* v2: a cgroup that holds processes cannot enable controllers for children (the "no internal
 * processes" rule, the root excepted), so we first move into a leaf of our own, then enable
 * memory and pids below ours; children are made beside the leaf. When no controller can be
 * enabled we move back and remove the leaf: nothing is left changed. */
static int open_v2(struct sbx_cgroups *c, const char *dir, struct sbx_error *err)
{
    char offered[256], pid[32];
    int r;

    if (!read_line(dir, "cgroup.controllers", offered, sizeof(offered)))
        offered[0] = '\0';
    if (!has_word(offered, "memory") && !has_word(offered, "pids"))
        return sbx_error_set(err, EOPNOTSUPP, "cgroup v2 '%s' offers neither memory nor pids", dir);
    if ((size_t)snprintf(c->leaf, sizeof(c->leaf), "%s/sandboxd", dir) >= sizeof(c->leaf))
        return sbx_error_set(err, ENAMETOOLONG, "cgroup path '%s' is too long", dir);
    if (mkdir(c->leaf, 0755) < 0 && errno != EEXIST)
        return sbx_error_set(err, EOPNOTSUPP, "mkdir '%s': %s", c->leaf, strerror(errno));
    snprintf(pid, sizeof(pid), "%d", getpid());
    r = write_file(c->leaf, "cgroup.procs", pid);
    if (r < 0)
        return sbx_error_set(err, EOPNOTSUPP, "cannot move into '%s': %s", c->leaf, strerror(-r));
    c->v2 = true;
    if (enable_controllers(c, dir, offered))
        return 0;
    (void)write_file(dir, "cgroup.procs", pid);
    (void)rmdir(c->leaf);
    /* Both fail for the same reason, as a rule: one is enough to tell. */
    return sbx_error_set(err, EOPNOTSUPP, "%s",
                         c->why_not[has_word(offered, "pids") ? CTL_PIDS : CTL_MEMORY]);
}

static bool under_gvisor(void)
{
    struct utsname u;

    if (uname(&u) < 0)
        return false;
    return strstr(u.release, "gvisor") || strcmp(u.version, GVISOR_UTS_VERSION) == 0;
}

/* Limits gVisor would take and not hold; the cgroups still hold the tree together. Its cgroups
 * (v1 and v2) store a memory limit but never apply it and count no OOM kill
 * (pkg/sentry/fsimpl/cgroupfs and cgroup2fs, memory.go). Its v1 pids controller lets a cgroup
 * grow past pids.max (a fork bomb under pids.max 16 reached thousands of processes and stalled
 * the sandbox); its v2 one holds it. */
static void refuse_unheld_limits(struct sbx_cgroups *c)
{
    if (!under_gvisor())
        return;
    c->ignored[CTL_MEMORY] = true;
    snprintf(c->why_not[CTL_MEMORY], sizeof(c->why_not[CTL_MEMORY]),
             "gVisor does not enforce cgroup memory limits");
    if (!c->v2) {
        c->ignored[CTL_PIDS] = true;
        snprintf(c->why_not[CTL_PIDS], sizeof(c->why_not[CTL_PIDS]),
                 "gVisor's cgroup v1 does not hold pids.max (runsc --in-sandbox-cgroup=v2 does)");
    }
}

int sbx_cgroups_open(struct sbx_cgroups **ret, struct sbx_error *err)
{
    _cleanup_free_ struct sbx_cgroups *c = calloc(1, sizeof(*c));
    char dir[PATH_MAX];
    int r;

    if (!c)
        return sbx_error_set(err, ENOMEM, "allocate cgroups");
    pthread_mutex_init(&c->lock, NULL);
    for (int i = 0; i < N_CTL; i++) {
        snprintf(c->why_not[i], sizeof(c->why_not[i]), "no writable %s cgroup", ctl_names[i]);
        if (cgroup_dir(ctl_names[i], dir, sizeof(dir)) && writable(dir))
            snprintf(c->dir[i], sizeof(c->dir[i]), "%s", dir);
    }
    if (!c->dir[CTL_MEMORY][0] && !c->dir[CTL_PIDS][0] && cgroup_dir(NULL, dir, sizeof(dir)) &&
        writable(dir)) {
        r = open_v2(c, dir, err);
        if (r < 0)
            return r;
    }
    if (!c->dir[CTL_MEMORY][0] && !c->dir[CTL_PIDS][0])
        return sbx_error_set(err, EOPNOTSUPP,
                             "no writable memory or pids cgroup (v1 or v2) is given to us");
    refuse_unheld_limits(c);
    *ret = TAKE_PTR(c);
    return 0;
}

void sbx_cgroups_free(struct sbx_cgroups *c)
{
    if (!c)
        return;
    sbx_cgroups_sweep(c);
    while (c->graveyard) {
        struct sbx_cgroup *g = c->graveyard;
        c->graveyard = g->next;
        log_warn(EBUSY, "cgroup %s still has processes: left in place",
                 g->dir[0][0] ? g->dir[0] : g->dir[1]);
        free(g);
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
}

const char *sbx_cgroups_version(const struct sbx_cgroups *c)
{
    return c->v2 ? "v2" : "v1";
}

bool sbx_cgroups_has_memory(const struct sbx_cgroups *c)
{
    return c && c->dir[CTL_MEMORY][0] && !c->ignored[CTL_MEMORY];
}

bool sbx_cgroups_has_pids(const struct sbx_cgroups *c)
{
    return c && c->dir[CTL_PIDS][0] && !c->ignored[CTL_PIDS];
}

const char *sbx_cgroups_why_no_memory(const struct sbx_cgroups *c)
{
    if (!c)
        return "no cgroups";
    return sbx_cgroups_has_memory(c) ? NULL : c->why_not[CTL_MEMORY];
}

const char *sbx_cgroups_why_no_pids(const struct sbx_cgroups *c)
{
    if (!c)
        return "no cgroups";
    return sbx_cgroups_has_pids(c) ? NULL : c->why_not[CTL_PIDS];
}

/* The directories of g to visit: one in v2, one per usable controller in v1. */
static int dirs_of(const struct sbx_cgroup *g, const char *dirs[N_CTL])
{
    int n = 0;

    for (int i = 0; i < N_CTL; i++) {
        if (!g->dir[i][0])
            continue;
        dirs[n++] = g->dir[i];
        if (g->c->v2)
            break;
    }
    return n;
}

static uint64_t oom_kills(const struct sbx_cgroup *g)
{
    if (!g->dir[CTL_MEMORY][0])
        return 0;
    return g->c->v2 ? read_key(g->dir[CTL_MEMORY], "memory.events", "oom_kill")
                    : read_key(g->dir[CTL_MEMORY], "memory.oom_control", "oom_kill");
}

int sbx_cgroup_new(struct sbx_cgroups *c, const char *name, uint64_t memory_bytes, uint64_t pids,
                   struct sbx_cgroup **ret, struct sbx_error *err)
{
    struct sbx_cgroup *g = NULL;
    const char *dirs[N_CTL];
    char v[32];
    int n, r = 0;

    if (memory_bytes && !sbx_cgroups_has_memory(c))
        return sbx_error_set(err, EOPNOTSUPP, "memory limits: %s", sbx_cgroups_why_no_memory(c));
    if (pids && !sbx_cgroups_has_pids(c))
        return sbx_error_set(err, EOPNOTSUPP, "pids limits: %s", sbx_cgroups_why_no_pids(c));
    g = calloc(1, sizeof(*g));
    if (!g)
        return sbx_error_set(err, ENOMEM, "allocate cgroup");
    g->c = c;
    for (int i = 0; i < N_CTL; i++)
        if (c->dir[i][0])
            snprintf(g->dir[i], sizeof(g->dir[i]), "%s/%s", c->dir[i], name);
    n = dirs_of(g, dirs);
    for (int i = 0; i < n && r == 0; i++) {
        char procs[FILE_PATH_MAX];
        if (mkdir(dirs[i], 0755) < 0 && errno != EEXIST) {
            r = sbx_error_set(err, errno, "mkdir %s", dirs[i]);
            break;
        }
        snprintf(procs, sizeof(procs), "%s/cgroup.procs", dirs[i]);
        g->join[g->n_join] = open(procs, O_WRONLY | O_CLOEXEC);
        if (g->join[g->n_join] < 0)
            r = sbx_error_set(err, errno, "open %s", procs);
        else
            g->n_join++;
    }
    if (r == 0 && memory_bytes) {
        snprintf(v, sizeof(v), "%llu", (unsigned long long)memory_bytes);
        r = write_file(g->dir[CTL_MEMORY], c->v2 ? "memory.max" : "memory.limit_in_bytes", v);
        if (r == 0 && c->v2)
            (void)write_file(g->dir[CTL_MEMORY], "memory.swap.max", "0");
        if (r < 0)
            r = sbx_error_set(err, -r, "set memory limit of %s", g->dir[CTL_MEMORY]);
    }
    if (r == 0 && pids) {
        snprintf(v, sizeof(v), "%llu", (unsigned long long)pids);
        r = write_file(g->dir[CTL_PIDS], "pids.max", v);
        if (r < 0)
            r = sbx_error_set(err, -r, "set pids limit of %s", g->dir[CTL_PIDS]);
    }
    if (r < 0) {
        sbx_cgroup_free(g);
        return r;
    }
    g->oom_before = oom_kills(g);
    *ret = g;
    return 0;
}

int sbx_cgroup_join_fds(const struct sbx_cgroup *g, const int **fds)
{
    *fds = g->join;
    return g->n_join;
}

/* Calls fn(pid, arg) for each member listed in dir's cgroup.procs; returns the sum of what fn
 * returned, or the first negative value, which ends the scan. A list that cannot be read has no
 * members. */
static int for_each_member(const char *dir, int (*fn)(pid_t pid, void *arg), void *arg)
{
    char path[FILE_PATH_MAX];
    _cleanup_fclose_ FILE *f = NULL;
    long pid;
    int n = 0, r;

    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    f = fopen(path, "re");
    while (f && fscanf(f, "%ld", &pid) == 1) {
        if (pid <= 0)
            continue;
        r = fn((pid_t)pid, arg);
        if (r < 0)
            return r;
        n += r;
    }
    return n;
}

/* Stops pid and adds it to the set (arg) unless it is there already; 1 when added. */
static int stop_new_member(pid_t pid, void *arg)
{
    struct sbx_pidset *set = arg;
    int r;

    if (sbx_pidset_has(set, pid))
        return 0;
    r = sbx_pidset_stop_add(set, pid);
    return r < 0 ? r : 1;
}

/* Adds the members of the cgroup not yet in set, stopping each; how many were new. */
static int scan_members(struct sbx_pidset *set, void *arg)
{
    return for_each_member(arg, stop_new_member, set);
}

static int kill_member(pid_t pid, void *arg)
{
    (void)arg;
    return kill(pid, SIGKILL) == 0;
}

static int count_member(pid_t pid, void *arg)
{
    (void)pid;
    (void)arg;
    return 1;
}

int sbx_cgroup_signal(struct sbx_cgroup *g, int sig)
{
    struct sbx_pidset set = {0};
    const char *dirs[N_CTL];
    const struct timespec pause = {.tv_nsec = 1000 * 1000};
    int n;

    if (dirs_of(g, dirs) == 0)
        return 0;
    /* Every member is stopped first (rounds until none is new), so that none forks away. */
    n = sbx_pidset_signal(&set, scan_members, (void *)dirs[0], sig);
    /* A killed member leaves the cgroup when it has exited: until the list is empty (bounded),
     * whatever is still listed is killed again, in case it escaped the stop. */
    for (int round = 0; sig == SIGKILL && round < KILL_ROUNDS; round++) {
        if (for_each_member(dirs[0], kill_member, NULL) == 0)
            break;
        nanosleep(&pause, NULL);
    }
    return n;
}

bool sbx_cgroup_has_members(const struct sbx_cgroup *g)
{
    const char *dirs[N_CTL];

    return dirs_of(g, dirs) > 0 && for_each_member(dirs[0], count_member, NULL) > 0;
}

bool sbx_cgroup_oom_killed(struct sbx_cgroup *g)
{
    return oom_kills(g) > g->oom_before;
}

/* Removes g's directories; false when members remain (EBUSY). */
static bool remove_dirs(struct sbx_cgroup *g)
{
    bool done = true;

    for (int i = 0; i < N_CTL; i++) {
        if (!g->dir[i][0])
            continue;
        if (rmdir(g->dir[i]) == 0 || errno == ENOENT)
            g->dir[i][0] = '\0';
        else
            done = false;
    }
    return done;
}

void sbx_cgroup_free(struct sbx_cgroup *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_join; i++)
        close(g->join[i]);
    g->n_join = 0;
    if (remove_dirs(g)) {
        free(g);
        return;
    }
    /* What the process left behind lives on, still within its limits: the cgroup goes once it
     * is empty (sbx_cgroups_sweep). */
    pthread_mutex_lock(&g->c->lock);
    g->next = g->c->graveyard;
    g->c->graveyard = g;
    pthread_mutex_unlock(&g->c->lock);
}

void sbx_cgroups_sweep(struct sbx_cgroups *c)
{
    struct sbx_cgroup **pp;

    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    for (pp = &c->graveyard; *pp;) {
        struct sbx_cgroup *g = *pp;
        if (remove_dirs(g)) {
            *pp = g->next;
            free(g);
        } else {
            pp = &g->next;
        }
    }
    pthread_mutex_unlock(&c->lock);
}
