/* Where the API server is and how to authenticate: from a kubeconfig file or from the
 * in-cluster service account. No HTTP in here. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

struct sbx_kube_config {
    char *server;  /* "https://host:port" */
    char *ca_file; /* CA bundle path, or */
    char *ca_pem;  /* CA bundle in memory (certificate-authority-data) */
    size_t ca_pem_len;
    char *cert_file, *key_file; /* client certificate paths, or */
    char *cert_pem, *key_pem;   /* in memory */
    size_t cert_pem_len, key_pem_len;
    char *token;      /* a static bearer token, or */
    char *token_file; /* a file re-read as it rotates (service account tokens) */
    bool insecure;    /* insecure-skip-tls-verify */
    char *namespace;  /* the service account's namespace (in-cluster), else NULL */
};

/* Reads a kubeconfig (YAML or JSON) and takes its current context, or `context` when not NULL.
 * Relative paths are resolved against the file's directory. Returns 0, -ENOENT, -EINVAL. */
int sbx_kube_config_load(const char *path, const char *context, struct sbx_kube_config *ret,
                         struct sbx_error *err);

/* The same from the file's bytes; dir is the directory relative paths are resolved against
 * (NULL: left relative). Returns 0 or -EINVAL (-ENOMEM) with a message. */
int sbx_kube_config_parse(const char *buf, size_t len, const char *dir, const char *context,
                          struct sbx_kube_config *ret, struct sbx_error *err);

/* The in-cluster configuration: KUBERNETES_SERVICE_HOST / _PORT, and sa_dir (normally
 * /var/run/secrets/kubernetes.io/serviceaccount) holding token, ca.crt and namespace. */
int sbx_kube_config_in_cluster(const char *sa_dir, struct sbx_kube_config *ret,
                               struct sbx_error *err);

void sbx_kube_config_release(struct sbx_kube_config *c);

/* Decodes standard base64 (whitespace ignored, padding optional) into a new NUL-terminated
 * buffer; -EINVAL for a character outside the alphabet, data after padding, or a length no
 * encoding has. */
int sbx_base64_decode(const char *in, char **ret, size_t *ret_len, struct sbx_error *err);

/* Reads a whole small file (at most max bytes) into a NUL-terminated buffer. */
int sbx_read_file(const char *path, size_t max, char **ret, size_t *ret_len, struct sbx_error *err);
