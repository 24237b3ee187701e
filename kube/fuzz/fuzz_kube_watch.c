/* libFuzzer target for what a watch or a list answer brings an informer: the byte stream cut
 * into lines (sbx_lines_feed / sbx_lines_finish, as the transport hands over chunks), each line
 * read as a watch event (sbx_watch_event_parse), and each line that is a list page read as one
 * (sbx_list_page_parse).
 *
 * Input: byte 0 seeds the chunk sizes, the rest is the stream.
 *
 * Checked: the stream gives the same lines and events fed whole, in chunks of sizes the input
 * chooses, and byte by byte; the lines are those of a plain split on '\n' (empty ones skipped,
 * a line past the limit refused where it starts to overflow) and the stream stops at the first
 * line the informer stops at; an event that is accepted has an object with a valid key, its
 * resourceVersion only when usable, escaped into a query value without a reserved character; a
 * 410 is -ESTALE exactly when the server said 410; every error carries -errno and a message; a
 * list page keeps only keyed objects without managedFields and a usable continue token. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "fuzz_check.h"
#include "kube.h"
#include "watch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_LINE 2048

/* What one run saw, line by line, as text: compared across runs. */
struct seen {
    char *text;
    size_t len;
    FILE *f;
};

static bool key_valid(const char *k)
{
    const char *slash = strchr(k, '/');

    if (!slash || strchr(slash + 1, '/') || !slash[1])
        return false;
    for (const char *p = k; *p; p++)
        if (p != slash &&
            !strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", *p))
            return false;
    return true;
}

static void check_rv(json_t *obj, const char *rv)
{
    const char *v =
        json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
    char esc[3 * SBX_RV_MAX];

    if (!*rv) {
        CHECK(!sbx_rv_valid(v), "usable resourceVersion '%s' dropped", v);
        return;
    }
    CHECK(sbx_rv_valid(rv) && v && !strcmp(v, rv), "resourceVersion '%s' of '%s'", rv,
          v ? v : "(none)");
    CHECK(sbx_kube_escape(rv, esc, sizeof(esc)), "resourceVersion '%s' does not fit escaped", rv);
    for (const char *p = esc; *p; p++)
        CHECK(!strchr("&=?#/ +;", *p), "'%s' escaped to '%s'", rv, esc);
}

/* 410 as the server says it: a Status with code 410, or an ERROR event whose object has it. */
static bool says_gone(const char *line, size_t len)
{
    json_auto_t *j = json_loadb(line, len, 0, NULL);
    const char *type = json_string_value(json_object_get(j, "type"));
    json_t *st = !json_is_object(j)       ? NULL
                 : !type                  ? j
                 : !strcmp(type, "ERROR") ? json_object_get(j, "object")
                                          : NULL;
    json_t *code = json_object_get(st, "code");

    return json_is_integer(code) && json_integer_value(code) == 410;
}

static void check_page(const char *line, size_t len, FILE *f)
{
    json_auto_t *body = json_loadb(line, len, 0, NULL);
    json_auto_t *map = json_object();
    char cont[SBX_CONTINUE_MAX] = "x", rv[SBX_RV_MAX] = "before";
    struct sbx_error err = {0};
    const char *key;
    json_t *obj;

    if (!json_is_object(body) || !json_object_get(body, "items"))
        return;
    int n = sbx_list_page_parse(body, map, cont, rv, &err);
    if (n < 0) {
        CHECK(n == -EPROTO && err.code == EPROTO && err.msg[0], "page: %d '%s'", n, err.msg);
        fprintf(f, "page error %s\n", err.msg);
        return;
    }
    CHECK(json_is_array(json_object_get(body, "items")), "a page without items accepted");
    CHECK(json_object_size(map) <= (size_t)n, "%zu kept, %d counted", json_object_size(map), n);
    json_object_foreach(map, key, obj)
    {
        char k[SBX_KEY_MAX];
        CHECK(sbx_object_key(obj, k, sizeof(k)) && !strcmp(k, key) && key_valid(key),
              "kept under '%s'", key);
        CHECK(!json_object_get(json_object_get(obj, "metadata"), "managedFields"),
              "managedFields kept");
    }
    for (const char *p = cont; *p; p++)
        CHECK(*p > ' ' && *p <= '~', "continue token '%s'", cont);
    CHECK(!strcmp(rv, "before") || sbx_rv_valid(rv), "list resourceVersion '%s'", rv);
    fprintf(f, "page %d %s %s\n", n, cont, rv);
}

static int on_line(const char *line, size_t len, void *arg)
{
    struct seen *s = arg;
    struct sbx_watch_event ev;
    struct sbx_error err = {0};
    int r;

    CHECK(len > 0 && len <= MAX_LINE && !memchr(line, '\n', len), "line of %zu bytes", len);
    fprintf(s->f, "line %zu\n", len);
    check_page(line, len, s->f);
    r = sbx_watch_event_parse(line, len, &ev, &err);
    if (r < 0) {
        CHECK((r == -ESTALE || r == -EPROTO) && err.code == -r && err.msg[0], "%d '%s'", r,
              err.msg);
        CHECK((r == -ESTALE) == says_gone(line, len), "410 seen as %d", r);
        fprintf(s->f, "error %d %s\n", r, err.msg);
        return r; /* the informer ends the watch here */
    }
    CHECK(!says_gone(line, len), "a 410 read as an event");
    if (ev.type == SBX_WATCH_ADDED || ev.type == SBX_WATCH_MODIFIED ||
        ev.type == SBX_WATCH_DELETED) {
        char k[SBX_KEY_MAX];
        CHECK(json_is_object(ev.object) && sbx_object_key(ev.object, k, sizeof(k)) &&
                  !strcmp(k, ev.key) && key_valid(ev.key),
              "event keyed '%s'", ev.key);
        check_rv(ev.object, ev.rv);
        _cleanup_free_ char *dump = json_dumps(ev.object, JSON_SORT_KEYS | JSON_COMPACT);
        fprintf(s->f, "event %d %s %s %s\n", (int)ev.type, ev.key, ev.rv, dump ? dump : "?");
    } else {
        CHECK(!ev.object && !ev.key[0], "type %d with an object", (int)ev.type);
        CHECK(ev.type == SBX_WATCH_BOOKMARK || !ev.rv[0], "ignored event with a version");
        if (ev.type == SBX_WATCH_BOOKMARK && ev.rv[0])
            CHECK(sbx_rv_valid(ev.rv), "bookmark '%s'", ev.rv);
        fprintf(s->f, "event %d %s\n", (int)ev.type, ev.rv);
    }
    sbx_watch_event_release(&ev);
    return 0;
}

/* Feeds the stream in chunks (sizes from seed; 0: whole; 1: byte by byte); returns the record. */
static char *run(const char *p, size_t n, unsigned seed, int *ret)
{
    struct sbx_lines l = {.max = MAX_LINE};
    struct seen s = {0};
    int r = 0;

    s.f = open_memstream(&s.text, &s.len);
    CHECK(s.f, "open_memstream");
    for (size_t off = 0; off < n && r == 0;) {
        size_t chunk = seed == 0   ? n
                       : seed == 1 ? 1
                                   : 1 + (seed = seed * 1103515245u + 12345u) % 97;
        if (chunk > n - off)
            chunk = n - off;
        r = sbx_lines_feed(&l, p + off, chunk, on_line, &s);
        off += chunk;
    }
    if (r == 0)
        r = sbx_lines_finish(&l, on_line, &s);
    sbx_lines_release(&l);
    fprintf(s.f, "end %d\n", r);
    fclose(s.f);
    *ret = r;
    return s.text;
}

/* The lines by a plain split: their count until the stream stops, -EMSGSIZE included. */
static void check_split(const char *p, size_t n, int r)
{
    size_t start = 0;

    for (size_t i = 0; i <= n; i++) {
        if (i < n && p[i] != '\n')
            continue;
        if (i - start > MAX_LINE) {
            CHECK(r == -EMSGSIZE, "a line of %zu bytes passed (%d)", i - start, r);
            return;
        }
        start = i + 1;
    }
    CHECK(r != -EMSGSIZE, "no line too long, yet -EMSGSIZE");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data + 1;
    size_t n = size ? size - 1 : 0;
    int r0, r1, r2;

    if (size < 1 || size > 64 * 1024)
        return 0;
    _cleanup_free_ char *whole = run(p, n, 0, &r0);
    _cleanup_free_ char *chunked = run(p, n, 2u + data[0], &r1);
    CHECK(r0 == r1 && !strcmp(whole, chunked), "whole and in chunks differ:\n%s\n--\n%s", whole,
          chunked);
    if (n <= 4096) {
        _cleanup_free_ char *bytes = run(p, n, 1, &r2);
        CHECK(r0 == r2 && !strcmp(whole, bytes), "whole and byte by byte differ:\n%s\n--\n%s",
              whole, bytes);
    }
    if (r0 == 0 || r0 == -EMSGSIZE)
        check_split(p, n, r0);
    return 0;
}
