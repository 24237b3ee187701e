#define _GNU_SOURCE
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "utf8.h"

extern char **environ;

int sbx_launch_config_alloc(struct sbx_launch_config *c, size_t n, struct sbx_error *err)
{
    c->keys = calloc(n + 1, sizeof(char *));
    c->values = calloc(n + 1, sizeof(char *));
    if (!c->keys || !c->values)
        return sbx_error_set(err, ENOMEM, "allocate environment");
    return 0;
}

void sbx_launch_config_release(struct sbx_launch_config *c)
{
    free(c->keys);
    free(c->values);
    c->keys = c->values = NULL;
}

void sbx_launch_release(struct sbx_launch *l)
{
    free(l->argv);
    if (l->envp)
        for (size_t i = l->n_daemon_env; i < l->n_env; i++)
            free(l->envp[i]);
    free(l->envp);
    sbx_closep(&l->cwd_fd);
}

static bool has_key(const struct sbx_launch_config *c, const char *entry, size_t klen)
{
    for (size_t i = 0; i < c->n_env; i++)
        if (strlen(c->keys[i]) == klen && memcmp(c->keys[i], entry, klen) == 0)
            return true;
    return false;
}

/* The daemon's environment with the request's variables added (they win), and PWD set to the
 * working directory unless the request sets it. */
static int build_env(struct sbx_launch *l, const struct sbx_launch_config *c, const char *pwd,
                     struct sbx_error *err)
{
    size_t n = 0, k = 0;

    while (environ && environ[n])
        n++;
    l->envp = calloc(n + c->n_env + 2, sizeof(char *));
    if (!l->envp)
        return sbx_error_set(err, ENOMEM, "allocate environment");
    for (size_t i = 0; i < n; i++) {
        size_t klen = strcspn(environ[i], "=");
        if (!has_key(c, environ[i], klen) && !(klen == 3 && memcmp(environ[i], "PWD", 3) == 0))
            l->envp[k++] = environ[i];
    }
    l->n_daemon_env = l->n_env = k;
    for (size_t i = 0; i < c->n_env; i++) {
        bool later = false;
        /* A map key repeated on the wire: the last one wins. */
        for (size_t j = i + 1; j < c->n_env; j++)
            later |= strcmp(c->keys[j], c->keys[i]) == 0;
        if (later)
            continue;
        if (asprintf(&l->envp[l->n_env], "%s=%s", c->keys[i], c->values[i]) < 0)
            return sbx_error_set(err, ENOMEM, "allocate environment");
        l->n_env++;
    }
    if (!has_key(c, "PWD", 3)) {
        if (asprintf(&l->envp[l->n_env], "PWD=%s", pwd) < 0)
            return sbx_error_set(err, ENOMEM, "allocate environment");
        l->n_env++;
    }
    return 0;
}

static bool config_utf8_valid(const struct sbx_launch_config *c)
{
    for (size_t i = 0; i < c->n_command; i++)
        if (!sbx_utf8_valid(c->command[i]))
            return false;
    for (size_t i = 0; i < c->n_env; i++)
        if (!sbx_utf8_valid(c->keys[i]) || !sbx_utf8_valid(c->values[i]))
            return false;
    return !c->cwd || sbx_utf8_valid(c->cwd);
}

/* The first variable name that is empty or holds '=' (which would make an entry another
 * variable's: "PWD=" and "" give "PWD==" beside our PWD), or NULL. */
static const char *bad_env_key(const struct sbx_launch_config *c)
{
    for (size_t i = 0; i < c->n_env; i++)
        if (!c->keys[i][0] || strchr(c->keys[i], '='))
            return c->keys[i];
    return NULL;
}

int sbx_launch_build(const struct sbx_root *root, const struct sbx_launch_config *c,
                     struct sbx_launch *l, struct sbx_error *err)
{
    _cleanup_free_ char *rel = NULL, *pwd = NULL;
    const char *cwd, *bad;
    int r;

    if (c->n_command == 0)
        return sbx_error_set(err, EINVAL, "command is required");
    if (!config_utf8_valid(c))
        return sbx_error_set(err, EINVAL, "string field contains invalid UTF-8");
    bad = bad_env_key(c);
    if (bad)
        return sbx_error_set(err, EINVAL,
                             "environment variable name \"%.200s\" is empty or holds '='", bad);
    l->argv = calloc(c->n_command + 1, sizeof(char *));
    if (!l->argv)
        return sbx_error_set(err, ENOMEM, "allocate argv");
    memcpy(l->argv, c->command, c->n_command * sizeof(char *));
    cwd = c->cwd && c->cwd[0] ? c->cwd : ".";
    r = sbx_path_open(root, cwd, O_PATH | O_DIRECTORY, err);
    if (r < 0)
        return sbx_error_wrap(err, "cwd");
    l->cwd_fd = r;
    r = sbx_path_clean(root, cwd, &rel, err);
    if (r < 0)
        return r;
    if (strcmp(rel, ".") == 0)
        pwd = strdup(root->path);
    else if (asprintf(&pwd, "%s%s%s", root->path, strcmp(root->path, "/") == 0 ? "" : "/", rel) < 0)
        pwd = NULL;
    if (!pwd)
        return sbx_error_set(err, ENOMEM, "allocate PWD");
    return build_env(l, c, pwd, err);
}
