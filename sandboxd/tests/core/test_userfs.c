/* userfs and cred: envd's path resolution and entry format, listings to a depth, changes, and
 * the per-thread switch to another user (nobody): denied where nobody may not go, owner of what
 * it creates, while the daemon's other threads keep their own credentials. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "tap.h"
#include "userfs.h"

static struct sbx_root slash;
static struct sbx_cred me, nobody;
static char dir[64];

static char *at(const char *rel)
{
    static char buf[8][512];
    static int i;

    i = (i + 1) % 8;
    snprintf(buf[i], sizeof(buf[i]), "%s/%s", dir, rel);
    return buf[i];
}

static void resolves(const char *in, const char *want)
{
    _cleanup_free_ char *out = NULL;
    int r = sbx_ufs_resolve(in, "/home/u", &out, NULL);

    ok(want ? r == 0 && strcmp(out, want) == 0 : r == -EINVAL, "resolve '%s' -> %s (want %s)", in,
       r == 0 ? out : "error", want ? want : "error");
}

static void mode_is(mode_t m, const char *want)
{
    char s[16];

    sbx_ufs_mode_string(m, s);
    ok(strcmp(s, want) == 0, "mode %o is %s (want %s)", (unsigned)m, s, want);
}

static void test_formats(void)
{
    resolves("", "/home/u");
    resolves("~", "/home/u");
    resolves("~/a/../b", "/home/u/b");
    resolves("x/./y", "/home/u/x/y");
    resolves("/etc//passwd/", "/etc/passwd");
    resolves("/../..", "/");
    resolves("~root/x", NULL);
    mode_is(S_IFREG | 0644, "-rw-r--r--");
    mode_is(S_IFDIR | 0755, "drwxr-xr-x");
    mode_is(S_IFLNK | 0777, "Lrwxrwxrwx");
    mode_is(S_IFDIR | S_ISVTX | 01777, "dtrwxrwxrwx");
    mode_is(S_IFCHR | 0666, "Dcrw-rw-rw-");
    mode_is(S_IFREG | S_ISUID | 0755, "urwxr-xr-x");
    mode_is(S_IFIFO | 0600, "prw-------");
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_stat_list(void)
{
    struct sbx_ufs_entry e, *es = NULL;
    struct sbx_error err = {0};
    size_t n = 0;
    int r;

    mkdir(at("t"), 0755);
    mkdir(at("t/b"), 0755);
    mkdir(at("t/b/c"), 0755);
    write_file(at("t/b/c/deep"), "x");
    write_file(at("t/a"), "hello");
    symlink(at("t/a"), at("t/link"));
    symlink("nowhere", at("t/dangling"));

    r = sbx_ufs_stat(&me, at("t/a"), &e, &err);
    ok(r == 0 && e.type == SBX_UFS_FILE && e.size == 5 && strcmp(e.name, "a") == 0 &&
           strcmp(e.path, at("t/a")) == 0 && strcmp(e.owner, "root") == 0 &&
           strcmp(e.permissions, "-rw-r--r--") == 0 && !e.target,
       "stat a file: %s %s %s", r ? err.msg : e.permissions, r ? "" : e.owner, r ? "" : e.group);
    sbx_ufs_entry_release(&e);
    r = sbx_ufs_stat(&me, at("t/link"), &e, &err);
    ok(r == 0 && e.type == SBX_UFS_FILE && e.permissions[0] == 'L' && e.mode == 0644 && e.target &&
           strcmp(e.target, at("t/a")) == 0,
       "a symlink: its target's type and mode, its own permissions, the resolved target");
    sbx_ufs_entry_release(&e);
    r = sbx_ufs_stat(&me, at("t/dangling"), &e, &err);
    ok(r == 0 && e.type == SBX_UFS_UNKNOWN && e.mode == 0 && e.target,
       "a dangling symlink: unknown type");
    sbx_ufs_entry_release(&e);
    ok(sbx_ufs_stat(&me, at("t/none"), &e, &err) == -ENOENT, "stat of nothing: -ENOENT (%s)",
       err.msg);

    r = sbx_ufs_list(&me, at("t"), 0, &es, &n, &err);
    ok(r == 0 && n == 4 && strcmp(es[0].name, "a") == 0 && strcmp(es[1].name, "b") == 0 &&
           strcmp(es[2].name, "dangling") == 0 && strcmp(es[3].name, "link") == 0,
       "depth 0 lists one level, sorted (%zu)", n);
    sbx_ufs_entries_free(es, n);
    r = sbx_ufs_list(&me, at("t"), 2, &es, &n, &err);
    ok(r == 0 && n == 5 && strcmp(es[1].path, at("t/b")) == 0 &&
           strcmp(es[2].path, at("t/b/c")) == 0 && strcmp(es[3].name, "dangling") == 0,
       "depth 2: each directory followed by what it holds (%zu)", n);
    sbx_ufs_entries_free(es, n);
    r = sbx_ufs_list(&me, at("t"), 9, &es, &n, &err);
    ok(r == 0 && n == 6 && strcmp(es[3].path, at("t/b/c/deep")) == 0, "depth 9: all (%zu)", n);
    sbx_ufs_entries_free(es, n);
    symlink(at("t"), at("tl"));
    r = sbx_ufs_list(&me, at("tl"), 1, &es, &n, &err);
    ok(r == 0 && n == 4 && strcmp(es[0].path, at("tl/a")) == 0,
       "a symlink to a directory is followed, paths beneath it as asked");
    sbx_ufs_entries_free(es, n);
    ok(sbx_ufs_list(&me, at("t/a"), 1, &es, &n, &err) == -ENOTDIR, "list a file: -ENOTDIR");
    ok(sbx_ufs_list(&me, at("t/none"), 1, &es, &n, &err) == -ENOENT, "list nothing: -ENOENT");
    symlink(at("loop2"), at("loop1"));
    symlink(at("loop1"), at("loop2"));
    ok(sbx_ufs_list(&me, at("loop1"), 1, &es, &n, &err) == -ELOOP, "a symlink cycle: -ELOOP");
}

static void test_changes(void)
{
    struct sbx_ufs_entry e;
    struct sbx_error err = {0};
    struct stat st;
    int r;

    r = sbx_ufs_mkdir(&slash, &me, at("m/x/y"), &e, &err);
    ok(r == 0 && e.type == SBX_UFS_DIR && strcmp(e.name, "y") == 0, "mkdir with parents: %s",
       r ? err.msg : "");
    sbx_ufs_entry_release(&e);
    ok(sbx_ufs_mkdir(&slash, &me, at("m/x"), &e, &err) == -EEXIST, "mkdir again: -EEXIST");
    write_file(at("m/f"), "f");
    ok(sbx_ufs_mkdir(&slash, &me, at("m/f"), &e, &err) == -ENOTDIR, "mkdir over a file: -ENOTDIR");

    r = sbx_ufs_move(&slash, &me, at("m/f"), at("m/new/parent/g"), &e, &err);
    ok(r == 0 && strcmp(e.path, at("m/new/parent/g")) == 0 && e.type == SBX_UFS_FILE,
       "move into new parents: %s", r ? err.msg : "");
    sbx_ufs_entry_release(&e);
    ok(sbx_ufs_move(&slash, &me, at("m/f"), at("m/h"), &e, &err) == -ENOENT,
       "move of nothing: -ENOENT");

    ok(sbx_ufs_remove(&slash, &me, at("m"), &err) == 0 && lstat(at("m"), &st) < 0, "remove a tree");
    ok(sbx_ufs_remove(&slash, &me, at("m"), &err) == 0, "remove nothing: no error");
    ok(sbx_ufs_remove(&slash, &me, "/", &err) == -EBUSY, "remove '/': refused");

    write_file(at("r"), "read me");
    r = sbx_ufs_open_read(&me, at("r"), &st, &err);
    ok(r >= 0 && st.st_size == 7, "open a file for reading");
    if (r >= 0)
        close(r);
    ok(sbx_ufs_open_read(&me, dir, &st, &err) == -EISDIR, "open a directory: -EISDIR");
    ok(sbx_ufs_open_read(&me, at("none"), &st, &err) == -ENOENT, "open nothing: -ENOENT");
    {
        struct sbx_fs_writer *w = NULL;
        uint64_t size = 0;
        chmod(at("r"), 0640);
        r = sbx_ufs_writer_begin(&slash, &me, at("r"), &w, &err);
        if (r == 0)
            r = sbx_ufs_writer_commit(&me, w, &size, &err);
        ok(r == 0 && stat(at("r"), &st) == 0 && (st.st_mode & 0777) == 0640 && st.st_size == 0,
           "a file written over keeps its permission bits");
    }
    {
        struct sbx_ufs_meta m[] = {{"zeta", "last"}, {"alpha", "first value"}};
        struct sbx_ufs_meta bad[] = {{"k", "tab\there"}};
        r = sbx_ufs_meta_set(&me, at("r"), m, 2, &err);
        if (r == 0)
            r = sbx_ufs_stat(&me, at("r"), &e, &err);
        ok(r == 0 && e.n_meta == 2 && strcmp(e.meta[0].key, "alpha") == 0 &&
               strcmp(e.meta[0].value, "first value") == 0 && strcmp(e.meta[1].key, "zeta") == 0,
           "metadata set is read back with the entry, by key: %s", r ? err.msg : "");
        if (r == 0)
            sbx_ufs_entry_release(&e);
        ok(sbx_ufs_meta_check(m, 2, &err) == 0, "printable metadata passes");
        ok(sbx_ufs_meta_check(bad, 1, &err) == -EINVAL, "a tab in a value does not: %s", err.msg);
    }
    ok(sbx_ufs_check_dir(&me, dir, false, &err) == 0, "a local directory may be watched");
    ok(sbx_ufs_check_dir(&me, at("r"), false, &err) == -ENOTDIR, "a file may not be watched");
}

/* A thread acting as nobody holds still while the main thread reads what nobody may not. */
static pthread_barrier_t bar;

static void *as_nobody(void *arg)
{
    struct sbx_cred_saved saved;
    int *res = arg;

    res[0] = sbx_cred_enter(&nobody, &saved, NULL);
    res[1] = setfsuid((uid_t)-1);
    pthread_barrier_wait(&bar); /* entered */
    pthread_barrier_wait(&bar); /* the main thread looked */
    sbx_cred_leave(&saved);
    res[2] = setfsuid((uid_t)-1);
    return NULL;
}

static void test_other_user(void)
{
    struct sbx_ufs_entry e, *es = NULL;
    struct sbx_fs_writer *w = NULL;
    struct sbx_error err = {0};
    uint64_t size = 0;
    struct stat st;
    size_t n = 0;
    int res[3] = {-1, -1, -1};
    pthread_t t;
    int r;

    mkdir(at("private"), 0700);
    write_file(at("private/secret"), "s");
    ok(sbx_ufs_stat(&nobody, at("private/secret"), &e, &err) == -EACCES,
       "nobody may not stat beneath a 0700 root dir: %s", err.msg);
    ok(sbx_ufs_list(&nobody, at("private"), 1, &es, &n, &err) == -EACCES, "nor list it: %s",
       err.msg);
    ok(sbx_ufs_open_read(&nobody, at("private/secret"), &st, &err) == -EACCES, "nor read in it");
    ok(sbx_ufs_writer_begin(&slash, &nobody, at("private/new"), &w, &err) == -EACCES,
       "nor write in it: %s", err.msg);
    ok(sbx_ufs_mkdir(&slash, &nobody, at("private/d"), &e, &err) == -EACCES,
       "nor make a directory in it");
    r = sbx_ufs_remove(&slash, &nobody, at("private/secret"), &err);
    ok(r == -EACCES && stat(at("private/secret"), &st) == 0, "nor remove what it holds: %d %s", r,
       err.msg);
    ok(sbx_ufs_check_dir(&nobody, at("private"), false, &err) == -EACCES, "nor watch it");
    ok(sbx_ufs_may_list_parent(&nobody, at("private/secret"), &err) == -EACCES &&
           sbx_ufs_may_list_parent(&me, at("private/secret"), &err) == 0 &&
           sbx_ufs_may_list_parent(&nobody, at("private"), &err) == 0,
       "nor list what holds its secret, which root may");
    ok(setfsuid((uid_t)-1) == 0, "the thread is itself again after each call");

    mkdir(at("open"), 0777);
    chmod(at("open"), 0777);
    r = sbx_ufs_writer_begin(&slash, &nobody, at("open/sub/file"), &w, &err);
    if (r == 0)
        r = sbx_fs_writer_write(w, "abc", 3, &err);
    if (r == 0)
        r = sbx_ufs_writer_commit(&nobody, w, &size, &err);
    ok(r == 0 && stat(at("open/sub/file"), &st) == 0 && st.st_uid == nobody.uid && st.st_size == 3,
       "a file written as nobody is nobody's: %s", r ? err.msg : "");
    ok(stat(at("open/sub"), &st) == 0 && st.st_uid == nobody.uid,
       "and so is the parent made for it");
    r = sbx_ufs_stat(&nobody, at("open/sub/file"), &e, &err);
    ok(r == 0 && strcmp(e.owner, "nobody") == 0, "its entry names its owner");
    sbx_ufs_entry_release(&e);

    pthread_barrier_init(&bar, NULL, 2);
    pthread_create(&t, NULL, as_nobody, res);
    pthread_barrier_wait(&bar);
    r = sbx_ufs_stat(&me, at("private/secret"), &e, &err);
    ok(r == 0, "while one thread is nobody, the others keep their credentials");
    if (r == 0)
        sbx_ufs_entry_release(&e);
    pthread_barrier_wait(&bar);
    pthread_join(t, NULL);
    pthread_barrier_destroy(&bar);
    ok(res[0] == 0 && res[1] == (int)nobody.uid && res[2] == 0,
       "that thread was nobody, then itself again");
}

int main(void)
{
    struct sbx_error err = {0};
    char cmd[128];

    test_formats();
    snprintf(dir, sizeof(dir), "/tmp/sbx-userfs-XXXXXX");
    if (!mkdtemp(dir) || chmod(dir, 0755) < 0)
        return 1;
    ok(sbx_root_open(&slash, "/", &err) == 0, "root /");
    ok(sbx_cred_lookup("root", &me, NULL, &err) == 0 && me.uid == 0, "look up root");
    ok(sbx_cred_lookup("no-such-user-sbx", &me, NULL, &err) == -ENOENT, "unknown user: -ENOENT");
    ok(sbx_cred_lookup("root", &me, NULL, &err) == 0, "look up root again");
    test_stat_list();
    test_changes();
    if (geteuid() != 0 || sbx_cred_lookup("nobody", &nobody, NULL, &err) < 0)
        printf("# skipped: another user (needs root and a user nobody)\n");
    else
        test_other_user();
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    (void)!system(cmd);
    sbx_root_release(&slash);
    return done_testing();
}
