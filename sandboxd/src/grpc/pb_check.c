#include "pb_check.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "utf8.h"

/* Messages nest at most this deep in our protos; deeper ones are refused too. */
#define MAX_DEPTH 32

/* Whether m and the messages within pass: no field 0, and with utf8 every string UTF-8. */
static bool check(const ProtobufCMessage *m, bool utf8, unsigned depth)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;

    if (depth > MAX_DEPTH)
        return false;
    for (unsigned i = 0; !utf8 && i < m->n_unknown_fields; i++)
        if (m->unknown_fields[i].tag == 0)
            return false;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *const *items = (const void *const *)(base + f->offset);
        size_t n = 1;

        if (f->type != PROTOBUF_C_TYPE_MESSAGE && (!utf8 || f->type != PROTOBUF_C_TYPE_STRING))
            continue;
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)(base + f->quantifier_offset) != f->id)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            n = *(const size_t *)(base + f->quantifier_offset);
            items = *(const void *const *const *)(base + f->offset);
        }
        for (size_t k = 0; k < n; k++) {
            if (!items[k])
                continue;
            if (f->type == PROTOBUF_C_TYPE_STRING ? !sbx_utf8_valid(items[k])
                                                  : !check(items[k], utf8, depth + 1))
                return false;
        }
    }
    return true;
}

bool sbx_pb_wellformed(const ProtobufCMessage *m)
{
    return check(m, false, 0);
}

bool sbx_pb_utf8_valid(const ProtobufCMessage *m)
{
    return check(m, true, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* NUL bytes in strings, found on the wire: protobuf-c hands a string over NUL-terminated and
 * keeps no length, so "a\0b" arrives as "a". */

#define MAX_SEGMENT_INDEX 64 /* fields of one message counted for their repeated index */
#define KEY_SHOWN         64 /* bytes of a map key shown in a name */

struct wire {
    const uint8_t *p, *end;
};

static bool wire_varint(struct wire *w, uint64_t *v)
{
    *v = 0;
    for (unsigned shift = 0; shift < 70 && w->p < w->end; shift += 7) {
        uint8_t b = *w->p++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

/* Reads one field: its number, wire type and, for a length-delimited one, its bytes. */
static bool wire_field(struct wire *w, uint32_t *id, unsigned *type, struct wire *bytes)
{
    uint64_t tag, n;

    if (!wire_varint(w, &tag) || tag >> 3 > UINT32_MAX)
        return false;
    *id = (uint32_t)(tag >> 3);
    *type = (unsigned)(tag & 7);
    switch (*type) {
    case 0:
        return wire_varint(w, &n);
    case 1:
        n = 8;
        break;
    case 5:
        n = 4;
        break;
    case 2:
        if (!wire_varint(w, &n))
            return false;
        break;
    default:
        return false; /* groups: protobuf-c refuses them too */
    }
    if (n > (uint64_t)(w->end - w->p))
        return false;
    bytes->p = w->p;
    bytes->end = w->p + n;
    w->p += n;
    return true;
}

/* A map's entry type, as protoc-c writes it: "...Entry" with key = 1 and value = 2. */
static bool is_map_entry(const ProtobufCMessageDescriptor *d)
{
    size_t n = strlen(d->short_name);

    return d->n_fields == 2 && n > 5 && strcmp(d->short_name + n - 5, "Entry") == 0 &&
           d->fields[0].id == 1 && strcmp(d->fields[0].name, "key") == 0 && d->fields[1].id == 2 &&
           strcmp(d->fields[1].name, "value") == 0;
}

/* Appends to the name in buf (of size n, its length *len), cutting what does not fit. */
static void name_add(char *buf, size_t n, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void name_add(char *buf, size_t n, size_t *len, const char *fmt, ...)
{
    va_list ap;
    int k;

    if (*len >= n - 1)
        return;
    va_start(ap, fmt);
    k = vsnprintf(buf + *len, n - *len, fmt, ap);
    va_end(ap);
    if (k > 0)
        *len = *len + (size_t)k < n - 1 ? *len + (size_t)k : n - 1;
}

/* Appends ["key"] for a map entry: printable ASCII as is, other bytes escaped. */
static void name_add_key(char *buf, size_t n, size_t *len, const struct wire *key)
{
    name_add(buf, n, len, "[\"");
    for (const uint8_t *c = key->p; c < key->end; c++) {
        if (c - key->p == KEY_SHOWN) {
            name_add(buf, n, len, "...");
            break;
        }
        if (*c == 0)
            name_add(buf, n, len, "\\0");
        else if (*c == '"' || *c == '\\')
            name_add(buf, n, len, "\\%c", *c);
        else if (*c >= 0x20 && *c < 0x7f)
            name_add(buf, n, len, "%c", *c);
        else
            name_add(buf, n, len, "\\x%02x", *c);
    }
    name_add(buf, n, len, "\"]");
}

/* The key of a map entry's bytes (the last one given), or false when there is none. */
static bool entry_key(struct wire w, struct wire *key)
{
    struct wire bytes;
    uint32_t id;
    unsigned type;
    bool found = false;

    while (w.p < w.end && wire_field(&w, &id, &type, &bytes))
        if (id == 1 && type == 2) {
            *key = bytes;
            found = true;
        }
    return found;
}

static int find_nul(const ProtobufCMessageDescriptor *d, struct wire w, char *name, size_t size,
                    size_t len, unsigned depth);

/* Checks the bytes of one length-delimited field f of a message of type d (its index-th
 * occurrence there); name holds the message's name in its first len bytes. */
static int field_nul(const ProtobufCMessageDescriptor *d, const ProtobufCFieldDescriptor *f,
                     unsigned index, struct wire bytes, char *name, size_t size, size_t len,
                     unsigned depth)
{
    const ProtobufCMessageDescriptor *sub = f->descriptor;
    struct wire key;

    if (f->type == PROTOBUF_C_TYPE_STRING && !memchr(bytes.p, 0, (size_t)(bytes.end - bytes.p)))
        return 0;
    if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
        return 0;
    if (is_map_entry(d)) {
        /* name is the map's: name["key"] for the value, name["key"] key for the key */
        if (f->id == 2 && f->type == PROTOBUF_C_TYPE_MESSAGE)
            return find_nul(sub, bytes, name, size, len, depth + 1);
        if (f->id == 1)
            name_add(name, size, &len, " key");
        return 1;
    }
    name_add(name, size, &len, "%s%s", len ? "." : "", f->name);
    if (f->type == PROTOBUF_C_TYPE_MESSAGE && is_map_entry(sub)) {
        if (entry_key(bytes, &key))
            name_add_key(name, size, &len, &key);
        else
            name_add(name, size, &len, "[%u]", index);
    } else if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        name_add(name, size, &len, "[%u]", index);
    }
    if (f->type == PROTOBUF_C_TYPE_STRING)
        return 1;
    return find_nul(sub, bytes, name, size, len, depth + 1);
}

/* 1 when a string in message bytes w holds a NUL (its name then in name), 0 when none, -1 when
 * w is not a message of type d. The name so far is name's first len bytes. */
static int find_nul(const ProtobufCMessageDescriptor *d, struct wire w, char *name, size_t size,
                    size_t len, unsigned depth)
{
    unsigned count[MAX_SEGMENT_INDEX] = {0};

    if (depth > MAX_DEPTH)
        return -1;
    while (w.p < w.end) {
        const ProtobufCFieldDescriptor *f;
        struct wire bytes;
        uint32_t id;
        unsigned type, index = 0;
        size_t k;
        int r;

        if (!wire_field(&w, &id, &type, &bytes))
            return -1;
        f = protobuf_c_message_descriptor_get_field(d, id);
        if (!f || type != 2)
            continue;
        k = (size_t)(f - d->fields);
        if (k < MAX_SEGMENT_INDEX)
            index = count[k]++;
        r = field_nul(d, f, index, bytes, name, size, len, depth);
        if (r != 0)
            return r;
        name[len] = 0;
    }
    return 0;
}

int sbx_pb_find_nul(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t n, char *name,
                    size_t size)
{
    struct wire w = {buf, buf + n};

    if (size < 2)
        return -1;
    name[0] = 0;
    return find_nul(d, w, name, size, 0, 0);
}
