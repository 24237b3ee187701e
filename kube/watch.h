/* What a watch answers, read without the network: the byte stream cut into lines (one JSON
 * object each, in whatever chunks the transport delivers), each line read as an event, and the
 * key an object is cached under. Pure functions of their input. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define SBX_RV_MAX       64   /* a resourceVersion we resume from, NUL included */
#define SBX_KEY_MAX      600  /* "namespace/name", NUL included */
#define SBX_CONTINUE_MAX 2048 /* a list's continue token, NUL included */

/* Called for each line; a negative return stops the feeding and is returned. */
typedef int (*sbx_line_fn)(const char *line, size_t len, void *arg);

/* A line buffer: bytes in, lines out. Zero-initialise with max set. */
struct sbx_lines {
    size_t max; /* longest line */
    char *buf;
    size_t len, cap;
};

/* Feeds n bytes: each complete line that is not empty goes to fn, without its '\n'. Returns 0,
 * -EMSGSIZE when a line grows past max, -ENOMEM, or fn's negative return. */
int sbx_lines_feed(struct sbx_lines *l, const char *p, size_t n, sbx_line_fn fn, void *arg);

/* The end of the stream: what is left without a final '\n' (an error answer is one object,
 * maybe without one) goes to fn. Returns 0 or fn's negative return. */
int sbx_lines_finish(struct sbx_lines *l, sbx_line_fn fn, void *arg);

void sbx_lines_release(struct sbx_lines *l);

enum sbx_watch_type {
    SBX_WATCH_ADDED,
    SBX_WATCH_MODIFIED,
    SBX_WATCH_DELETED,
    SBX_WATCH_BOOKMARK,
    SBX_WATCH_IGNORED, /* an unknown type, or an object that cannot be keyed: skipped */
};

struct sbx_watch_event {
    enum sbx_watch_type type;
    json_t *object;        /* ADDED, MODIFIED, DELETED: a new reference, with a key */
    char key[SBX_KEY_MAX]; /* of object */
    char rv[SBX_RV_MAX];   /* its resourceVersion (or the bookmark's), "" when none or unusable */
};

/* Reads one watch line {"type": ..., "object": {...}}. Returns 0 with *ret filled (release it
 * with sbx_watch_event_release); -ESTALE when the server says the version we watch from is gone
 * (an ERROR event or a Status with code 410: list again); -EPROTO for an ERROR event, a Status
 * instead of an event, or a line that is not a JSON object, with the server's message. */
int sbx_watch_event_parse(const char *line, size_t len, struct sbx_watch_event *ret,
                          struct sbx_error *err);

void sbx_watch_event_release(struct sbx_watch_event *ev);

/* One page of a list answer, {"items": [...], "metadata": {"continue", "resourceVersion"}}:
 * each item that can be keyed goes into map (an object) under its key, without its
 * managedFields; the continue token (1 to SBX_CONTINUE_MAX - 1 visible ASCII characters, "" on
 * the last page) into cont, the list's resourceVersion into rv when it has a usable one (else rv
 * is left alone). Returns the number of items taken, or -EPROTO when the answer is not a list or
 * its continue token is unusable (continuing would lose objects). */
int sbx_list_page_parse(json_t *body, json_t *map, char cont[SBX_CONTINUE_MAX], char rv[SBX_RV_MAX],
                        struct sbx_error *err);

/* Drops what the controller never reads; managedFields alone is often half an object. */
void sbx_object_trim(json_t *obj);

/* A resourceVersion we may send back in a query: 1 to SBX_RV_MAX - 1 visible ASCII characters.
 * (It is opaque; it is escaped in the URL anyway, this only keeps nonsense out.) */
bool sbx_rv_valid(const char *rv);

/* "namespace/name" of obj into buf; returns buf, or NULL when obj has no name, a name or
 * namespace the API server would never give (empty, longer than 253, or other than
 * [A-Za-z0-9._-]: they go into URL paths), or the key does not fit. */
char *sbx_object_key(json_t *obj, char *buf, size_t size);
