#include "kubeconfig.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "yaml_json.h"

#define MAX_KUBECONFIG (4u << 20)
#define MAX_SA_FILE    (1u << 20)

int sbx_read_file(const char *path, size_t max, char **ret, size_t *ret_len, struct sbx_error *err)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    _cleanup_free_ char *buf = NULL;
    size_t len = 0;

    if (fd < 0)
        return sbx_error_set(err, errno, "open '%s'", path);
    buf = malloc(max + 1);
    if (!buf)
        return sbx_error_set(err, ENOMEM, "read '%s'", path);
    for (;;) {
        ssize_t n = read(fd, buf + len, max + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sbx_error_set(err, errno, "read '%s'", path);
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > max)
            return sbx_error_set(err, EFBIG, "'%s' is larger than %zu bytes", path, max);
    }
    buf[len] = '\0';
    if (ret_len)
        *ret_len = len;
    *ret = TAKE_PTR(buf);
    return 0;
}

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int sbx_base64_decode(const char *in, char **ret, size_t *ret_len, struct sbx_error *err)
{
    _cleanup_free_ char *out = malloc(strlen(in) / 4 * 3 + 4);
    unsigned acc = 0;
    int bits = 0, pad = 0;
    size_t len = 0, chars = 0;

    if (!out)
        return sbx_error_set(err, ENOMEM, "base64");
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        if (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
            continue;
        if (*p == '=') {
            pad++;
            continue;
        }
        int v = b64_value(*p);
        if (v < 0 || pad)
            return sbx_error_set(err, EINVAL, "invalid base64");
        chars++;
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[len++] = (char)((acc >> bits) & 0xff);
        }
    }
    /* A lone character holds no byte; padding, when there is some, completes a group of 4. */
    if (pad > 2 || chars % 4 == 1 || (pad && (chars + (size_t)pad) % 4 != 0))
        return sbx_error_set(err, EINVAL, "invalid base64 length or padding");
    out[len] = '\0';
    *ret_len = len;
    *ret = TAKE_PTR(out);
    return 0;
}

/* The entry of list (an array of {name, <field>: {...}}) named name, or NULL. */
static json_t *named(json_t *list, const char *name, const char *field)
{
    size_t i;
    json_t *e;

    json_array_foreach(list, i, e)
    {
        if (json_is_string(json_object_get(e, "name")) &&
            !strcmp(json_string_value(json_object_get(e, "name")), name))
            return json_object_get(e, field);
    }
    return NULL;
}

/* Copies the string field key of obj into *dst, resolving a relative path against dir. */
static int take_path(json_t *obj, const char *key, const char *dir, char **dst,
                     struct sbx_error *err)
{
    const char *v = json_string_value(json_object_get(obj, key));

    if (!v || !*v)
        return 0;
    if (v[0] == '/' || !dir) {
        *dst = strdup(v);
    } else if (asprintf(dst, "%s/%s", dir, v) < 0) {
        *dst = NULL;
    }
    return *dst ? 0 : sbx_error_set(err, ENOMEM, "kubeconfig");
}

static int take_data(json_t *obj, const char *key, char **dst, size_t *dst_len,
                     struct sbx_error *err)
{
    const char *v = json_string_value(json_object_get(obj, key));

    if (!v || !*v)
        return 0;
    if (sbx_base64_decode(v, dst, dst_len, err) < 0)
        return sbx_error_wrap(err, "%s", key);
    return 0;
}

static int fill_from(json_t *cluster, json_t *user, const char *dir, struct sbx_kube_config *c,
                     struct sbx_error *err)
{
    const char *server = json_string_value(json_object_get(cluster, "server"));
    const char *token = json_string_value(json_object_get(user, "token"));

    if (!server || !*server)
        return sbx_error_set(err, EINVAL, "cluster has no server");
    c->server = strdup(server);
    if (!c->server)
        return sbx_error_set(err, ENOMEM, "kubeconfig");
    c->insecure = json_is_true(json_object_get(cluster, "insecure-skip-tls-verify"));
    if (take_path(cluster, "certificate-authority", dir, &c->ca_file, err) < 0 ||
        take_data(cluster, "certificate-authority-data", &c->ca_pem, &c->ca_pem_len, err) < 0 ||
        take_path(user, "client-certificate", dir, &c->cert_file, err) < 0 ||
        take_path(user, "client-key", dir, &c->key_file, err) < 0 ||
        take_data(user, "client-certificate-data", &c->cert_pem, &c->cert_pem_len, err) < 0 ||
        take_data(user, "client-key-data", &c->key_pem, &c->key_pem_len, err) < 0 ||
        take_path(user, "tokenFile", dir, &c->token_file, err) < 0)
        return -err->code;
    if (token && *token && !(c->token = strdup(token)))
        return sbx_error_set(err, ENOMEM, "kubeconfig");
    return 0;
}

int sbx_kube_config_parse(const char *buf, size_t len, const char *dir, const char *context,
                          struct sbx_kube_config *ret, struct sbx_error *err)
{
    json_auto_t *doc = NULL;
    struct sbx_kube_config c = {0};
    const char *name;
    json_t *ctx;
    int r;

    if ((r = sbx_yaml_to_json(buf, len, &doc, err)) < 0)
        return r;
    name = context ? context : json_string_value(json_object_get(doc, "current-context"));
    if (!name)
        return sbx_error_set(err, EINVAL, "no current-context");
    ctx = named(json_object_get(doc, "contexts"), name, "context");
    if (!ctx)
        return sbx_error_set(err, EINVAL, "no context \"%.100s\"", name);
    const char *cl = json_string_value(json_object_get(ctx, "cluster"));
    const char *us = json_string_value(json_object_get(ctx, "user"));
    json_t *cluster = cl ? named(json_object_get(doc, "clusters"), cl, "cluster") : NULL;
    json_t *user = us ? named(json_object_get(doc, "users"), us, "user") : NULL;
    if (!cluster)
        return sbx_error_set(err, EINVAL, "context \"%.100s\" has no cluster", name);
    r = fill_from(cluster, user ? user : json_object_get(doc, "no-user"), dir, &c, err);
    if (r < 0) {
        sbx_kube_config_release(&c);
        return r;
    }
    const char *ns = json_string_value(json_object_get(ctx, "namespace"));
    if (ns && *ns && !(c.namespace = strdup(ns))) {
        sbx_kube_config_release(&c);
        return sbx_error_set(err, ENOMEM, "kubeconfig");
    }
    *ret = c;
    return 0;
}

int sbx_kube_config_load(const char *path, const char *context, struct sbx_kube_config *ret,
                         struct sbx_error *err)
{
    _cleanup_free_ char *buf = NULL, *dir = NULL;
    const char *slash;
    size_t len;
    int r;

    if ((r = sbx_read_file(path, MAX_KUBECONFIG, &buf, &len, err)) < 0)
        return r;
    slash = strrchr(path, '/');
    if (slash && !(dir = strndup(path, (size_t)(slash - path) + (slash == path))))
        return sbx_error_set(err, ENOMEM, "kubeconfig");
    if ((r = sbx_kube_config_parse(buf, len, dir, context, ret, err)) < 0)
        return sbx_error_wrap(err, "kubeconfig '%s'", path);
    return 0;
}

int sbx_kube_config_in_cluster(const char *sa_dir, struct sbx_kube_config *ret,
                               struct sbx_error *err)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    struct sbx_kube_config c = {0};
    _cleanup_free_ char *ns = NULL;
    int r;

    if (!host || !*host || !port || !*port)
        return sbx_error_set(err, ENOENT,
                             "not in a cluster: KUBERNETES_SERVICE_HOST or _PORT unset");
    if (asprintf(&c.server, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host, port) <
            0 ||
        asprintf(&c.token_file, "%s/token", sa_dir) < 0 ||
        asprintf(&c.ca_file, "%s/ca.crt", sa_dir) < 0) {
        sbx_kube_config_release(&c);
        return sbx_error_set(err, ENOMEM, "in-cluster config");
    }
    if (access(c.token_file, R_OK) != 0) {
        r = sbx_error_set(err, errno, "service account token '%s'", c.token_file);
        sbx_kube_config_release(&c);
        return r;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/namespace", sa_dir);
    if (sbx_read_file(path, MAX_SA_FILE, &ns, NULL, NULL) == 0) {
        ns[strcspn(ns, " \r\n")] = '\0';
        c.namespace = TAKE_PTR(ns);
    }
    *ret = c;
    return 0;
}

void sbx_kube_config_release(struct sbx_kube_config *c)
{
    free(c->server);
    free(c->ca_file);
    free(c->ca_pem);
    free(c->cert_file);
    free(c->key_file);
    free(c->cert_pem);
    free(c->key_pem);
    free(c->token);
    free(c->token_file);
    free(c->namespace);
    *c = (struct sbx_kube_config){0};
}
