/* One image lookup's HTTP session with a registry (registry.c's): GETs on one curl handle, so
 * its connection is reused, answering the registry's challenges with the credentials given. */
#pragma once

#include <curl/curl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "registry_auth.h"

struct sbx_reg_session {
    CURL *h;
    char base[300];   /* "https://host[:port]" */
    const char *host; /* for messages */
    const char *repo; /* for the token's default scope */
    const struct sbx_registry_creds *creds;
    size_t ncreds, next; /* the credential the next challenge is answered with */
    char *bearer;        /* "Authorization: Bearer ..." once a token is had */
    bool basic;          /* answering with the credentials' Basic auth */
    long timeout_ms;
    const char *ca_file, *user_agent;
    const atomic_bool *cancel;
    unsigned tokens; /* token requests made */
};

struct sbx_reg_response {
    long status;
    char *body; /* NUL-terminated */
    size_t len;
    char content_type[128];
};

/* GETs base + path (accept may be NULL), at most max bytes of body, answering 401 challenges.
 * 0 with *resp (free with sbx_reg_response_release) for any final HTTP answer but 401 (which
 * fails with -EACCES); transport failures as sbx_registry_resolve says. */
int sbx_reg_get(struct sbx_reg_session *s, const char *path, const char *accept, size_t max,
                struct sbx_reg_response *resp, struct sbx_error *err);

void sbx_reg_response_release(struct sbx_reg_response *resp);
void sbx_reg_session_release(struct sbx_reg_session *s);
