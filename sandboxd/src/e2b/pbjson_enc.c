/* pbjson's writer: a protobuf-c message as protojson writes it. The text is made here rather than
 * through a jansson tree: jansson prints a double with 17 digits where protojson prints the
 * shortest that reads back, and 64-bit integers go out as strings anyway. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "pbjson.h"
#include "pbjson_int.h"
#include "utf8.h"

struct out {
    char *p;
    size_t len, cap;
    bool oom;
};

static void put(struct out *o, const char *s, size_t n)
{
    if (o->oom)
        return;
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->len + n + 1)
            cap *= 2;
        char *p = realloc(o->p, cap);
        if (!p) {
            o->oom = true;
            return;
        }
        o->p = p;
        o->cap = cap;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
    o->p[o->len] = '\0';
}

static void puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static void putf(struct out *o, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    put(o, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* A JSON string as protojson escapes it: '"', '\\' and the control characters only. */
static int put_string(struct out *o, const char *s, struct sbx_error *err)
{
    const char *run = s;

    if (!sbx_utf8_valid(s))
        return sbx_error_set(err, EILSEQ, "a string is not utf-8");
    put(o, "\"", 1);
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        static const char short_esc[] = {['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r',
                                         ['\t'] = 't', ['"'] = '"',  ['\\'] = '\\'};
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        put(o, run, (size_t)(p - run));
        run = p + 1;
        if (c < sizeof(short_esc) && short_esc[c])
            putf(o, "\\%c", short_esc[c]);
        else
            putf(o, "\\u%04x", c);
    }
    put(o, run, strlen(run));
    put(o, "\"", 1);
    return 0;
}

/* v in C's %e with the fewest digits that read back as v (as a float when bits is 32). */
static void shortest(double v, int bits, char e[40])
{
    for (int p = 1; p <= 17; p++) {
        snprintf(e, 40, "%.*e", p - 1, v);
        if (bits == 64 && strtod(e, NULL) == v)
            return;
        /* a float read straight (as protojson reads it) and through a double (as we do, the
         * number being jansson's): a text near a midpoint could round twice to another */
        if (bits == 32 && strtof(e, NULL) == (float)v && (float)strtod(e, NULL) == (float)v)
            return;
    }
}

/* The digits of e (a %e text) with the point placed by its exponent, as Go's 'f' format writes
 * them with the shortest precision; the caller keeps the exponent within -5..19. */
static void put_plain(struct out *o, bool neg, const char *e)
{
    char f[64], digs[24];
    int x, nd = 0;
    size_t n = 0;

    for (const char *c = e; *c && *c != 'e'; c++)
        if (*c >= '0' && *c <= '9')
            digs[nd++] = *c;
    x = atoi(strchr(e, 'e') + 1) + 1; /* digits before the point */
    if (neg)
        f[n++] = '-';
    if (x <= 0) {
        f[n++] = '0';
        f[n++] = '.';
        for (int i = x; i < 0; i++)
            f[n++] = '0';
        memcpy(f + n, digs, (size_t)nd);
        n += (size_t)nd;
    } else if (x >= nd) {
        memcpy(f + n, digs, (size_t)nd);
        n += (size_t)nd;
        for (int i = nd; i < x; i++)
            f[n++] = '0';
    } else {
        memcpy(f + n, digs, (size_t)x);
        n += (size_t)x;
        f[n++] = '.';
        memcpy(f + n, digs + x, (size_t)(nd - x));
        n += (size_t)(nd - x);
    }
    put(o, f, n);
}

/* The shortest decimal that reads back as v, in protojson's layout: plain digits, the exponent
 * form below 1e-6 and from 1e21 on (here from 2^63 on: protojson writes [2^63, 1e21) as
 * integers, which our reader, jansson, refuses as too big; the exponent form says the same). */
static void put_float(struct out *o, double v, int bits)
{
    double a = fabs(v);
    char e[40];

    if (isnan(v)) {
        puts_(o, "\"NaN\"");
        return;
    }
    if (isinf(v)) {
        puts_(o, v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
        return;
    }
    if (v == 0 && signbit(v)) { /* protojson's -0 is the integer 0 to jansson: Python's form */
        puts_(o, "-0.0");
        return;
    }
    shortest(v, bits, e);
    if (a == 0 || (a >= 1e-6 && a < 9223372036854775808.0)) {
        put_plain(o, signbit(v), e);
        return;
    }
    /* C's %e is Go's 'e' but for a negative exponent's leading zero */
    char *ex = strchr(e, 'e');
    if (ex[1] == '-' && ex[2] == '0' && ex[3] && !ex[4])
        memmove(ex + 2, ex + 3, 2);
    puts_(o, e);
}

struct enc {
    struct out o;
    struct sbx_error *err;
};

static int enc_message(struct enc *e, const ProtobufCMessage *m, int depth);

/* One value of f's type at p (a member or an array element). */
static int enc_value(struct enc *e, const ProtobufCFieldDescriptor *f, const void *p, int depth)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        putf(&e->o, "%d", *(const int32_t *)p);
        return 0;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        putf(&e->o, "%u", *(const uint32_t *)p);
        return 0;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        putf(&e->o, "\"%lld\"", (long long)*(const int64_t *)p);
        return 0;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        putf(&e->o, "\"%llu\"", (unsigned long long)*(const uint64_t *)p);
        return 0;
    case PROTOBUF_C_TYPE_FLOAT:
        put_float(&e->o, *(const float *)p, 32);
        return 0;
    case PROTOBUF_C_TYPE_DOUBLE:
        put_float(&e->o, *(const double *)p, 64);
        return 0;
    case PROTOBUF_C_TYPE_BOOL:
        puts_(&e->o, *(const protobuf_c_boolean *)p ? "true" : "false");
        return 0;
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumValue *v =
            protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *)p);
        if (v)
            putf(&e->o, "\"%s\"", v->name); /* an identifier: nothing to escape */
        else
            putf(&e->o, "%d", *(const int *)p);
        return 0;
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(const char *const *)p;
        return put_string(&e->o, s ? s : "", e->err);
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = p;
        _cleanup_free_ char *t = malloc(b->len / 3 * 4 + 5);
        if (!t)
            return sbx_error_set(e->err, ENOMEM, "out of memory");
        put(&e->o, "\"", 1);
        put(&e->o, t, sbx_pbjson_b64_encode(b->data, b->len, t));
        put(&e->o, "\"", 1);
        return 0;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)p;
        if (!sub) { /* an unset message in a list or a map is an empty one */
            puts_(&e->o, "{}");
            return 0;
        }
        return enc_message(e, sub, depth + 1);
    }
    }
    return sbx_error_set(e->err, EINVAL, "a field of unknown type %d", (int)f->type);
}

/* The map's entries sorted by key (equal keys by position), so the text is deterministic and,
 * the last of equal keys being kept, says what the binary form says. */
struct map_sort {
    const ProtobufCMessage *const *entries;
    const ProtobufCFieldDescriptor *key;
};

static int map_cmp(const void *pa, const void *pb, void *arg)
{
    const struct map_sort *s = arg;
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    int c = sbx_pbjson_key_cmp(s->key, s->entries[a], s->entries[b]);
    return c ? c : (a > b) - (a < b);
}

static int enc_map_key(struct enc *e, const ProtobufCFieldDescriptor *kf,
                       const ProtobufCMessage *entry)
{
    const void *p = (const char *)entry + kf->offset;

    if (kf->type == PROTOBUF_C_TYPE_STRING)
        return enc_value(e, kf, p, 0);
    if (kf->type == PROTOBUF_C_TYPE_BOOL) {
        puts_(&e->o, *(const protobuf_c_boolean *)p ? "\"true\"" : "\"false\"");
        return 0;
    }
    bool quoted = kf->type != PROTOBUF_C_TYPE_INT64 && kf->type != PROTOBUF_C_TYPE_SINT64 &&
                  kf->type != PROTOBUF_C_TYPE_SFIXED64 && kf->type != PROTOBUF_C_TYPE_UINT64 &&
                  kf->type != PROTOBUF_C_TYPE_FIXED64;
    if (quoted) /* 64-bit values come quoted already */
        put(&e->o, "\"", 1);
    int r = enc_value(e, kf, p, 0);
    if (quoted)
        put(&e->o, "\"", 1);
    return r;
}

static int enc_map(struct enc *e, const ProtobufCMessageDescriptor *ed,
                   const ProtobufCMessage *const *entries, size_t n, int depth)
{
    _cleanup_free_ size_t *idx = NULL;
    struct map_sort s = {entries, &ed->fields[0]};
    size_t k = 0;
    bool first = true;

    if (!(idx = malloc(n * sizeof(*idx))))
        return sbx_error_set(e->err, ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        if (entries[i])
            idx[k++] = i;
    qsort_r(idx, k, sizeof(*idx), map_cmp, &s);
    put(&e->o, "{", 1);
    for (size_t i = 0; i < k; i++) {
        const ProtobufCMessage *en = entries[idx[i]];
        int r;
        if (i + 1 < k && sbx_pbjson_key_cmp(s.key, en, entries[idx[i + 1]]) == 0)
            continue; /* a later entry of the same key wins */
        if (!first)
            put(&e->o, ",", 1);
        first = false;
        if ((r = enc_map_key(e, s.key, en)) < 0)
            return r;
        put(&e->o, ":", 1);
        if ((r = enc_value(e, &ed->fields[1], (const char *)en + ed->fields[1].offset, depth)) < 0)
            return r;
    }
    put(&e->o, "}", 1);
    return 0;
}

static int enc_repeated(struct enc *e, const ProtobufCFieldDescriptor *f, const void *arr, size_t n,
                        int depth)
{
    size_t sz = sbx_pbjson_elt_size(f->type);

    put(&e->o, "[", 1);
    for (size_t i = 0; i < n; i++) {
        int r;
        if (i)
            put(&e->o, ",", 1);
        if ((r = enc_value(e, f, (const char *)arr + i * sz, depth)) < 0)
            return r;
    }
    put(&e->o, "]", 1);
    return 0;
}

/* Whether a proto3 field without presence holds its default (-0.0 does not, as in protojson). */
static bool is_default(const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (sbx_pbjson_elt_size(f->type)) {
    case 4:
        if (f->type == PROTOBUF_C_TYPE_FLOAT)
            return !signbit(*(const float *)p) && *(const float *)p == 0;
        return *(const uint32_t *)p == 0;
    default:
        break;
    }
    switch (f->type) {
    case PROTOBUF_C_TYPE_DOUBLE:
        return !signbit(*(const double *)p) && *(const double *)p == 0;
    case PROTOBUF_C_TYPE_STRING:
        return !*(const char *const *)p || !**(const char *const *)p;
    case PROTOBUF_C_TYPE_BYTES:
        return ((const ProtobufCBinaryData *)p)->len == 0;
    case PROTOBUF_C_TYPE_MESSAGE:
        return !*(const void *const *)p;
    default:
        return *(const uint64_t *)p == 0;
    }
}

/* Whether a singular field is written: a oneof member when it is the one set, a proto2 optional
 * one as protobuf-c packs it, a proto3 one when not its default. */
static bool is_set(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
    const void *p = (const char *)m + f->offset;
    bool ptr = f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE;

    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        return SBX_PBJSON_AT_C(uint32_t, m, f->quantifier_offset) == f->id &&
               (!ptr || *(const void *const *)p);
    if (f->label == PROTOBUF_C_LABEL_REQUIRED)
        return !ptr || *(const void *const *)p;
    if (f->label == PROTOBUF_C_LABEL_OPTIONAL)
        return ptr ? *(const void *const *)p && *(const void *const *)p != f->default_value
                   : SBX_PBJSON_AT_C(protobuf_c_boolean, m, f->quantifier_offset);
    return !is_default(f, p);
}

static int enc_field(struct enc *e, const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
                     int depth)
{
    const void *p = (const char *)m + f->offset;
    const ProtobufCMessageDescriptor *ed;
    size_t n;

    if (f->label != PROTOBUF_C_LABEL_REPEATED)
        return enc_value(e, f, p, depth);
    n = SBX_PBJSON_AT_C(size_t, m, f->quantifier_offset);
    if ((ed = sbx_pbjson_map_entry(m->descriptor, f)))
        return enc_map(e, ed, *(const ProtobufCMessage *const *const *)p, n, depth);
    return enc_repeated(e, f, *(const void *const *)p, n, depth);
}

static int enc_fields(struct enc *e, const ProtobufCMessage *m, int depth)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    bool first = true;

    put(&e->o, "{", 1);
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        char name[256];
        int r;
        if (f->label == PROTOBUF_C_LABEL_REPEATED
                ? SBX_PBJSON_AT_C(size_t, m, f->quantifier_offset) == 0
                : !is_set(m, f))
            continue;
        if (strlen(f->name) >= sizeof(name))
            return sbx_error_set(e->err, EINVAL, "field name '%.32s...' too long", f->name);
        put(&e->o, first ? "\"" : ",\"", first ? 1 : 2);
        first = false;
        put(&e->o, name, sbx_pbjson_json_name(f->name, name));
        put(&e->o, "\":", 2);
        /* the path to the field, but for the depths no message reaches in practice */
        if ((r = enc_field(e, m, f, depth)) < 0)
            return e->err && depth < 4 ? sbx_error_wrap(e->err, "'%s'", f->name) : r;
    }
    put(&e->o, "}", 1);
    return 0;
}

static int enc_timestamp(struct enc *e, const ProtobufCMessage *m)
{
    const ProtobufCFieldDescriptor *fs = protobuf_c_message_descriptor_get_field(m->descriptor, 1);
    const ProtobufCFieldDescriptor *fn = protobuf_c_message_descriptor_get_field(m->descriptor, 2);
    char t[SBX_PBJSON_TS_LEN];

    if (!fs || !fn || fs->type != PROTOBUF_C_TYPE_INT64 || fn->type != PROTOBUF_C_TYPE_INT32)
        return sbx_error_set(e->err, EINVAL, "'%s' is not the well-known timestamp",
                             m->descriptor->name);
    int64_t secs = SBX_PBJSON_AT_C(int64_t, m, fs->offset);
    int32_t nanos = SBX_PBJSON_AT_C(int32_t, m, fn->offset);
    if (sbx_pbjson_ts_format(secs, nanos, t) < 0)
        return sbx_error_set(e->err, EINVAL, "timestamp %lld.%09d out of range", (long long)secs,
                             (int)nanos);
    put(&e->o, "\"", 1);
    puts_(&e->o, t);
    put(&e->o, "\"", 1);
    return 0;
}

static int enc_message(struct enc *e, const ProtobufCMessage *m, int depth)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;

    if (depth > SBX_PBJSON_MAX_DEPTH)
        return sbx_error_set(e->err, EINVAL, "messages nested deeper than %d",
                             SBX_PBJSON_MAX_DEPTH);
    switch (sbx_pbjson_wkt(d)) {
    case SBX_PBJSON_TIMESTAMP:
        return enc_timestamp(e, m);
    case SBX_PBJSON_WRAPPER:
        return enc_value(e, &d->fields[0], (const char *)m + d->fields[0].offset, depth);
    case SBX_PBJSON_UNSUPPORTED:
        return sbx_error_set(e->err, EOPNOTSUPP, "no json mapping for '%s'", d->name);
    case SBX_PBJSON_PLAIN:
        break;
    }
    return enc_fields(e, m, depth);
}

int sbx_pbjson_encode(const ProtobufCMessage *m, char **ret, size_t *ret_len, struct sbx_error *err)
{
    struct enc e = {.err = err};
    int r;

    if ((r = enc_message(&e, m, 0)) < 0) {
        free(e.o.p);
        return r;
    }
    if (e.o.oom) {
        free(e.o.p);
        return sbx_error_set(err, ENOMEM, "out of memory");
    }
    *ret = e.o.p;
    *ret_len = e.o.len;
    return 0;
}
