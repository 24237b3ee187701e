/* E2B's names, without a wire: sandbox IDs (the SDK accepts ^[a-z0-9]+$), the sandbox hosts
 * "<port>-<sandboxid>.<domain>" E2B's proxy routes, and the control-plane routes of its API
 * (the subset the router serves). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define SBX_E2B_ID_LEN 20 /* generated IDs (sbx_random_suffix): 20 of [a-z0-9] */
#define SBX_E2B_ID_MAX 63 /* an ID is a claim's name: one DNS label */

/* True for an ID of at most SBX_E2B_ID_MAX characters of [a-z0-9]. */
bool sbx_e2b_id_valid(const char *s, size_t len);

/* The sandbox and port a host names under domain: 1 when host (without or with ":port") is
 * "<port>-<id>.<domain>" (id and port copied), 0 when it is not under domain (or domain is
 * empty), -EINVAL when it is but names no valid port and ID. */
int sbx_e2b_from_host(const char *host, size_t len, const char *domain, char id[64], char port[8]);

enum sbx_e2b_op {
    SBX_E2B_NONE = 0,    /* not an E2B API path */
    SBX_E2B_CREATE,      /* POST /sandboxes, /v2/sandboxes */
    SBX_E2B_LIST,        /* GET /sandboxes, /v2/sandboxes */
    SBX_E2B_GET,         /* GET /sandboxes/{id} */
    SBX_E2B_DELETE,      /* DELETE /sandboxes/{id} */
    SBX_E2B_TIMEOUT,     /* POST /sandboxes/{id}/timeout */
    SBX_E2B_CONNECT,     /* POST /sandboxes/{id}/connect, /v2/sandboxes/{id}/connect */
    SBX_E2B_UNSUPPORTED, /* another route under /sandboxes (pause, resume, snapshots...) */
    SBX_E2B_BAD_METHOD,  /* a known path, another method */
};

struct sbx_e2b_req {
    enum sbx_e2b_op op;
    char id[SBX_E2B_ID_MAX + 1]; /* the path's sandbox ID ("" for none) */
    bool bad_id;                 /* the path's ID is not one */
    const char *query;           /* after "?" (not NUL-terminated), or NULL */
    size_t query_len;
};

/* Reads a request's method and target into r: op SBX_E2B_NONE when the path is not under
 * /sandboxes or /v2/sandboxes. */
void sbx_e2b_parse(const char *method, size_t method_len, const char *target, size_t len,
                   struct sbx_e2b_req *r);

/* The value of query parameter name (percent-decoded, '+' as space) into out; false when absent
 * or longer than size - 1. Repeated parameters: the first. */
bool sbx_e2b_query(const char *q, size_t len, const char *name, char *out, size_t size);

/* A Kubernetes quantity ("2", "500m", "1.5Gi", "512M", "1e3") in its base unit into *ret: 0, or
 * -EINVAL for anything else (negative, not finite, an unknown suffix). */
int sbx_e2b_quantity(const char *s, double *ret);
