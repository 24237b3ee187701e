#define _GNU_SOURCE
#include "upstreams.h"

#include <errno.h>
#include <grpc/grpc_security.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct upstream {
    char *host;
    grpc_channel *ch;
    uint64_t used; /* a clock of uses, for the least recently used */
};

struct sbx_upstreams {
    pthread_mutex_t lock;
    struct upstream *v;
    unsigned n, max;
    uint64_t clock, created;
    grpc_channel_credentials *creds;
    grpc_channel_args args;
    grpc_arg arg[3];
};

int sbx_upstreams_new(struct sbx_upstreams **ret, unsigned max, int max_message_bytes,
                      struct sbx_error *err)
{
    struct sbx_upstreams *u = calloc(1, sizeof(*u));

    if (!u || !(u->v = calloc(max ? max : 1, sizeof(*u->v)))) {
        free(u);
        return sbx_error_set(err, ENOMEM, "allocate upstreams");
    }
    pthread_mutex_init(&u->lock, NULL);
    u->max = max ? max : 1;
    u->creds = grpc_insecure_credentials_create();
    u->arg[0] = (grpc_arg){.type = GRPC_ARG_INTEGER,
                           .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                           .value.integer = max_message_bytes};
    u->arg[1] = (grpc_arg){.type = GRPC_ARG_INTEGER,
                           .key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
                           .value.integer = max_message_bytes};
    /* A channel of its own per upstream, not one shared subchannel pool: its connection is
     * ours to count and to close. */
    u->arg[2] = (grpc_arg){
        .type = GRPC_ARG_INTEGER, .key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, .value.integer = 1};
    u->args = (grpc_channel_args){.num_args = 3, .args = u->arg};
    *ret = u;
    return 0;
}

void sbx_upstreams_free(struct sbx_upstreams *u)
{
    if (!u)
        return;
    for (unsigned i = 0; i < u->n; i++) {
        grpc_channel_destroy(u->v[i].ch);
        free(u->v[i].host);
    }
    grpc_channel_credentials_release(u->creds);
    pthread_mutex_destroy(&u->lock);
    free(u->v);
    free(u);
}

grpc_channel *sbx_upstreams_get(struct sbx_upstreams *u, const char *host, struct sbx_error *err)
{
    grpc_channel *ch = NULL;
    unsigned slot = 0;
    char *name = strdup(host);

    if (!name) {
        sbx_error_set(err, ENOMEM, "allocate upstream");
        return NULL;
    }
    pthread_mutex_lock(&u->lock);
    u->clock++;
    for (unsigned i = 0; i < u->n; i++) {
        if (strcmp(u->v[i].host, host) == 0) {
            u->v[i].used = u->clock;
            ch = u->v[i].ch;
            free(name);
            goto out;
        }
    }
    if (u->n < u->max) {
        slot = u->n;
    } else {
        for (unsigned i = 1; i < u->n; i++)
            if (u->v[i].used < u->v[slot].used)
                slot = i;
        /* Calls in flight hold the channel's connection; it closes once they end. */
        grpc_channel_destroy(u->v[slot].ch);
        free(u->v[slot].host);
        u->v[slot] = (struct upstream){0};
    }
    u->v[slot].host = name;
    ch = grpc_channel_create(host, u->creds, &u->args);
    u->v[slot].ch = ch;
    u->v[slot].used = u->clock;
    if (slot == u->n)
        u->n++;
    u->created++;
out:
    pthread_mutex_unlock(&u->lock);
    return ch;
}

void sbx_upstreams_count(struct sbx_upstreams *u, uint64_t *open, uint64_t *created)
{
    pthread_mutex_lock(&u->lock);
    *open = u->n;
    *created = u->created;
    pthread_mutex_unlock(&u->lock);
}
