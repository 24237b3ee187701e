#include "watch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"

#define MAX_NAME 253

static int grow(struct sbx_lines *l, size_t need)
{
    size_t cap;
    char *b;

    if (need <= l->cap)
        return 0;
    cap = l->cap ? l->cap : 4096;
    while (cap < need)
        cap *= 2;
    if (!(b = realloc(l->buf, cap)))
        return -ENOMEM;
    l->buf = b;
    l->cap = cap;
    return 0;
}

int sbx_lines_feed(struct sbx_lines *l, const char *p, size_t n, sbx_line_fn fn, void *arg)
{
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t take = nl ? (size_t)(nl - p) : n;
        int r;

        if (take > l->max || l->len > l->max - take)
            return -EMSGSIZE;
        if (take > 0) {
            if (grow(l, l->len + take) < 0)
                return -ENOMEM;
            memcpy(l->buf + l->len, p, take);
            l->len += take;
        }
        if (!nl)
            return 0;
        p += take + 1;
        n -= take + 1;
        if (l->len > 0) {
            size_t len = l->len;
            l->len = 0;
            if ((r = fn(l->buf, len, arg)) < 0)
                return r;
        }
    }
    return 0;
}

int sbx_lines_finish(struct sbx_lines *l, sbx_line_fn fn, void *arg)
{
    size_t len = l->len;

    l->len = 0;
    return len > 0 ? fn(l->buf, len, arg) : 0;
}

void sbx_lines_release(struct sbx_lines *l)
{
    free(l->buf);
    l->buf = NULL;
    l->len = l->cap = 0;
}

static bool name_valid(const char *s)
{
    size_t n = 0;

    for (; s[n]; n++) {
        char c = s[n];
        if (n >= MAX_NAME || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                               (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_'))
            return false;
    }
    return n > 0;
}

char *sbx_object_key(json_t *obj, char *buf, size_t size)
{
    json_t *md = json_object_get(obj, "metadata");
    const char *ns = json_string_value(json_object_get(md, "namespace"));
    const char *name = json_string_value(json_object_get(md, "name"));
    int n;

    if (!name || !name_valid(name) || (ns && *ns && !name_valid(ns)))
        return NULL;
    n = snprintf(buf, size, "%s/%s", ns ? ns : "", name);
    return n > 0 && (size_t)n < size ? buf : NULL;
}

bool sbx_rv_valid(const char *rv)
{
    size_t n = 0;

    if (!rv)
        return false;
    for (; rv[n]; n++)
        if (n >= SBX_RV_MAX - 1 || rv[n] <= ' ' || rv[n] > '~')
            return false;
    return n > 0;
}

static void take_rv(json_t *obj, char rv[SBX_RV_MAX])
{
    const char *v =
        json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));

    if (sbx_rv_valid(v))
        snprintf(rv, SBX_RV_MAX, "%s", v);
    else
        rv[0] = '\0';
}

void sbx_object_trim(json_t *obj)
{
    json_object_del(json_object_get(obj, "metadata"), "managedFields");
}

int sbx_list_page_parse(json_t *body, json_t *map, char cont[SBX_CONTINUE_MAX], char rv[SBX_RV_MAX],
                        struct sbx_error *err)
{
    json_t *items = json_object_get(body, "items"), *md = json_object_get(body, "metadata"), *obj;
    json_t *c = json_object_get(md, "continue");
    const char *cv = json_string_value(c);
    int taken = 0;
    size_t i;

    if (!json_is_array(items))
        return sbx_error_set(err, EPROTO, "list: no items");
    if (c && !json_is_null(c) && !(cv && (!*cv || strlen(cv) < SBX_CONTINUE_MAX)))
        return sbx_error_set(err, EPROTO, "list: unusable continue token");
    for (const char *p = cv; p && *p; p++)
        if (*p <= ' ' || *p > '~')
            return sbx_error_set(err, EPROTO, "list: unusable continue token");
    json_array_foreach(items, i, obj)
    {
        char k[SBX_KEY_MAX];
        if (!json_is_object(obj) || !sbx_object_key(obj, k, sizeof(k)))
            continue;
        sbx_object_trim(obj);
        if (json_object_set(map, k, obj) < 0)
            return sbx_error_set(err, ENOMEM, "list");
        taken++;
    }
    snprintf(cont, SBX_CONTINUE_MAX, "%s", cv ? cv : "");
    const char *lrv = json_string_value(json_object_get(md, "resourceVersion"));
    if (sbx_rv_valid(lrv))
        snprintf(rv, SBX_RV_MAX, "%s", lrv);
    return taken;
}

/* A Status object (a refused watch, or an ERROR event's object). */
static int status_error(json_t *st, const char *what, struct sbx_error *err)
{
    json_t *code = json_object_get(st, "code");
    const char *msg = json_string_value(json_object_get(st, "message"));

    if (json_is_integer(code) && json_integer_value(code) == 410)
        return sbx_error_set(err, ESTALE, "%s: resource version gone (410)", what);
    return sbx_error_set(err, EPROTO, "%s: %.200s", what, msg ? msg : "no message");
}

int sbx_watch_event_parse(const char *line, size_t len, struct sbx_watch_event *ret,
                          struct sbx_error *err)
{
    json_auto_t *ev = json_loadb(line, len, 0, NULL);
    const char *type = json_string_value(json_object_get(ev, "type"));
    json_t *obj = json_object_get(ev, "object");
    struct sbx_watch_event e = {.type = SBX_WATCH_IGNORED};

    if (!json_is_object(ev))
        return sbx_error_set(err, EPROTO, "watch: a line that is not a JSON object");
    if (!type)
        return status_error(ev, "watch refused", err);
    if (!strcmp(type, "ERROR"))
        return status_error(obj, "watch error", err);
    if (!strcmp(type, "BOOKMARK")) {
        e.type = SBX_WATCH_BOOKMARK;
        take_rv(obj, e.rv);
    } else if (json_is_object(obj) && sbx_object_key(obj, e.key, sizeof(e.key))) {
        e.type = !strcmp(type, "ADDED")      ? SBX_WATCH_ADDED
                 : !strcmp(type, "MODIFIED") ? SBX_WATCH_MODIFIED
                 : !strcmp(type, "DELETED")  ? SBX_WATCH_DELETED
                                             : SBX_WATCH_IGNORED;
        if (e.type != SBX_WATCH_IGNORED) {
            take_rv(obj, e.rv);
            e.object = json_incref(obj);
        } else {
            e.key[0] = '\0';
        }
    }
    *ret = e;
    return 0;
}

void sbx_watch_event_release(struct sbx_watch_event *ev)
{
    json_decref(ev->object);
    ev->object = NULL;
}
