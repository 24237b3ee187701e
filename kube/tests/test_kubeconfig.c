#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kubeconfig.h"
#include "tap.h"
#include "yaml_json.h"

static const char kubeconfig[] = "apiVersion: v1\n"
                                 "kind: Config\n"
                                 "current-context: test\n"
                                 "clusters:\n"
                                 "- name: other\n"
                                 "  cluster: {server: 'https://10.0.0.1:1'}\n"
                                 "- name: c\n"
                                 "  cluster:\n"
                                 "    server: https://127.0.0.1:6443\n"
                                 "    certificate-authority: ca.crt\n"
                                 "contexts:\n"
                                 "- name: test\n"
                                 "  context: {cluster: c, user: u, namespace: ns1}\n"
                                 "users:\n"
                                 "- name: u\n"
                                 "  user:\n"
                                 "    token: abc\n"
                                 "    client-key-data: aGVsbG8gd29ybGQ=\n";

int main(void)
{
    struct sbx_error err = {0};
    json_t *j = NULL;
    char *out;
    size_t len;

    const char *doc = "a: [1, -2, x, true, null]\nb: {c: '3'}\n";
    ok(sbx_yaml_to_json(doc, strlen(doc), &j, &err) == 0, "yaml parses: %s", err.msg);
    ok(json_integer_value(json_array_get(json_object_get(j, "a"), 1)) == -2, "integers");
    ok(json_is_string(json_array_get(json_object_get(j, "a"), 2)), "strings");
    ok(json_is_true(json_array_get(json_object_get(j, "a"), 3)), "booleans");
    ok(json_is_string(json_object_get(json_object_get(j, "b"), "c")), "quoted stays a string");
    json_decref(j);
    ok(sbx_yaml_to_json("a: &x 1\nb: *x\n", 14, &j, &err) == -EINVAL, "aliases refused: %s",
       err.msg);
    ok(sbx_yaml_to_json("a: [1, 2\n", 9, &j, &err) == -EINVAL, "syntax error: %s", err.msg);
    char deep[400];
    memset(deep, '[', 200);
    memset(deep + 200, ']', 200);
    ok(sbx_yaml_to_json(deep, sizeof(deep), &j, &err) == -EINVAL, "nesting bounded: %s", err.msg);

    ok(sbx_base64_decode("aGVs\nbG8=", &out, &len, &err) == 0 && len == 5 &&
           !memcmp(out, "hello", 5),
       "base64 with a newline");
    free(out);
    ok(sbx_base64_decode("a$b=", &out, &len, &err) == -EINVAL, "bad base64 refused");

    /* In the working directory (CTest's build directory). */
    char dir[] = "kubeconfig-test-XXXXXX", path[64];
    ok(mkdtemp(dir) != NULL, "temp dir");
    snprintf(path, sizeof(path), "%s/config", dir);
    FILE *f = fopen(path, "w");
    fputs(kubeconfig, f);
    fclose(f);
    struct sbx_kube_config c;
    ok(sbx_kube_config_load(path, NULL, &c, &err) == 0, "kubeconfig loads");
    ok(c.server && !strcmp(c.server, "https://127.0.0.1:6443"), "server of the current context");
    char want[96];
    snprintf(want, sizeof(want), "%s/ca.crt", dir);
    ok(c.ca_file && !strcmp(c.ca_file, want), "relative CA path resolved: %s", c.ca_file);
    ok(c.token && !strcmp(c.token, "abc"), "token");
    ok(c.key_pem_len == 11 && !memcmp(c.key_pem, "hello world", 11), "key data decoded");
    ok(c.namespace && !strcmp(c.namespace, "ns1"), "namespace of the context");
    sbx_kube_config_release(&c);
    ok(sbx_kube_config_load(path, "nope", &c, &err) == -EINVAL, "unknown context: %s", err.msg);
    unlink(path);
    ok(sbx_kube_config_load(path, NULL, &c, &err) == -ENOENT, "missing file: %s", err.msg);
    rmdir(dir);

    unsetenv("KUBERNETES_SERVICE_HOST");
    ok(sbx_kube_config_in_cluster("/nonexistent", &c, &err) == -ENOENT, "not in a cluster: %s",
       err.msg);
    return done_testing();
}
