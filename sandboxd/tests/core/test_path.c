#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "path.h"
#include "tap.h"

static struct sbx_root root;

static void clean(const char *in, int want_r, const char *want)
{
    _cleanup_free_ char *out = NULL;
    struct sbx_error e = {0};
    int r = sbx_path_clean(&root, in, &out, &e);

    ok(r == want_r && (r < 0 || strcmp(out, want) == 0), "clean \"%s\" -> %d \"%s\" (want \"%s\")",
       in, r, out ? out : e.msg, want ? want : "error");
}

static void opens(const char *in, int want_r)
{
    struct sbx_error e = {0};
    int fd = sbx_path_open(&root, in, O_PATH | O_DIRECTORY, &e);

    ok(want_r == 0 ? fd >= 0 : fd == want_r, "open \"%s\" -> %d (want %d) %s", in, fd, want_r,
       fd < 0 ? e.msg : "");
    if (fd >= 0)
        close(fd);
}

int main(void)
{
    char tmpl[] = "/tmp/sbx-path-XXXXXX";
    char buf[4096];
    struct sbx_error e = {0};
    const char *dir = mkdtemp(tmpl);

    if (!dir)
        return 1;
    snprintf(buf, sizeof(buf), "mkdir -p %s/root/sub/deep", dir);
    (void)!system(buf);
    ok(sbx_root_open(&root, (snprintf(buf, sizeof(buf), "%s/root", dir), buf), &e) == 0,
       "open root %s", e.msg);

    clean("", 0, ".");
    clean(".", 0, ".");
    clean("sub", 0, "sub");
    clean("sub/../sub/./deep/", 0, "sub/deep");
    clean(root.path, 0, ".");
    snprintf(buf, sizeof(buf), "%s/sub", root.path);
    clean(buf, 0, "sub");
    clean("/etc", 0, "etc"); /* like the reference: joined under the root */
    clean("/..", 0, ".");    /* absolute: cleaned as such, like Go's filepath.Clean */
    clean("/../sub", 0, "sub");
    clean("/a/../../b", 0, "b");
    clean("..", -EXDEV, NULL);
    clean("sub/../../x", -EXDEV, NULL);

    /* symlinks */
    snprintf(buf, sizeof(buf), "%s/sub/up", root.path);
    ok(symlink("../..", buf) == 0, "symlink up");
    snprintf(buf, sizeof(buf), "%s/sub/tmp", root.path);
    ok(symlink("/tmp", buf) == 0, "symlink /tmp");
    snprintf(buf, sizeof(buf), "%s/sub/in", root.path);
    {
        char target[4096];
        snprintf(target, sizeof(target), "%s/sub/deep", root.path);
        ok(symlink(target, buf) == 0, "absolute symlink inside");
    }
    snprintf(buf, sizeof(buf), "%s/sub/rel", root.path);
    ok(symlink("deep", buf) == 0, "relative symlink inside");

    opens(".", 0);
    opens("sub/deep", 0);
    opens("sub/rel", 0);
    opens("sub/in", 0);
    opens("sub/up", -EXDEV);
    opens("sub/tmp", -EXDEV);
    opens("sub/missing", -ENOENT);
    opens("../x", -EXDEV);

    sbx_root_release(&root);
    snprintf(buf, sizeof(buf), "rm -rf %s", dir);
    (void)!system(buf);
    return done_testing();
}
