/* pbjson's reader: JSON text (parsed by jansson) into a protobuf-c message, each piece malloc'ed
 * as protobuf-c's unpack would, so protobuf_c_message_free_unpacked frees it. Every piece is
 * hung on the message before it is filled (arrays counted as their elements are made), so a
 * failure part way frees the whole with that one call. */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "pbjson.h"
#include "pbjson_int.h"

struct dec {
    struct sbx_error *err;
};

static int dec_message(struct dec *x, const ProtobufCMessageDescriptor *d, json_t *v,
                       ProtobufCMessage *m, int depth);

static int bad(struct dec *x, const char *what)
{
    return sbx_error_set(x->err, EINVAL, "%s", what);
}

static int oom(struct dec *x)
{
    return sbx_error_set(x->err, ENOMEM, "out of memory");
}

/* sign and magnitude as an integer of the given signedness and width. */
static int int_range(struct dec *x, bool neg, uint64_t mag, bool is_signed, int bits, uint64_t *ret)
{
    uint64_t max = bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;

    if (is_signed)
        max >>= 1;
    if ((neg && mag && !is_signed) || mag > max + (neg && is_signed))
        return bad(x, "integer out of range");
    *ret = neg ? -mag : mag;
    return 0;
}

/* An integer of the given signedness and width from a JSON number or a string holding one. */
static int dec_integer(struct dec *x, json_t *v, bool is_signed, int bits, uint64_t *ret)
{
    uint64_t mag;
    bool neg;

    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        neg = i < 0;
        mag = neg ? -(uint64_t)i : (uint64_t)i;
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d != trunc(d))
            return bad(x, "not an integer");
        neg = d < 0;
        if (fabs(d) >= 18446744073709551616.0)
            return bad(x, "integer out of range");
        mag = (uint64_t)fabs(d);
    } else if (json_is_string(v)) {
        int r = sbx_pbjson_integer_text(json_string_value(v), &neg, &mag);
        if (r == -ERANGE)
            return bad(x, "integer out of range");
        if (r < 0)
            return bad(x, "not an integer");
    } else {
        return bad(x, "not an integer");
    }
    return int_range(x, neg, mag, is_signed, bits, ret);
}

static int dec_float(struct dec *x, json_t *v, int bits, double *ret)
{
    double d;

    if (json_is_integer(v)) {
        d = (double)json_integer_value(v);
    } else if (json_is_real(v)) {
        d = json_real_value(v);
    } else if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strcmp(s, "NaN") == 0)
            d = NAN;
        else if (strcmp(s, "Infinity") == 0)
            d = INFINITY;
        else if (strcmp(s, "-Infinity") == 0)
            d = -INFINITY;
        else if (!sbx_pbjson_number_text(s))
            return bad(x, "not a number");
        else if (isinf(d = strtod(s, NULL)))
            return bad(x, "number out of range");
    } else {
        return bad(x, "not a number");
    }
    if (bits == 32 && isfinite(d) && isinf((float)d))
        return bad(x, "number out of range");
    *ret = d;
    return 0;
}

/* An enum value by name or number; *skip when the name is unknown (connect-go's reader, which
 * discards unknown fields, leaves such a field unset). */
static int dec_enum(struct dec *x, const ProtobufCFieldDescriptor *f, json_t *v, int *ret,
                    bool *skip)
{
    uint64_t u;

    if (json_is_string(v)) {
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value_by_name(f->descriptor, json_string_value(v));
        if (ev)
            *ret = ev->value;
        else
            *skip = true;
        return 0;
    }
    if (!json_is_number(v))
        return bad(x, "not an enum value");
    if (dec_integer(x, v, true, 32, &u) < 0)
        return -EINVAL;
    *ret = (int)(int32_t)(uint32_t)u;
    return 0;
}

static int dec_bytes(struct dec *x, json_t *v, ProtobufCBinaryData *ret)
{
    int r;

    if (!json_is_string(v))
        return bad(x, "not a base64 string");
    r = sbx_pbjson_b64_decode(json_string_value(v), json_string_length(v), &ret->data, &ret->len);
    if (r == -ENOMEM)
        return oom(x);
    return r < 0 ? bad(x, "not base64") : 0;
}

/* One value that is not a message, of f's type, from v (not null) into p (a member or an array
 * element, which holds its default). *skip: nothing was stored. */
static int dec_scalar(struct dec *x, const ProtobufCFieldDescriptor *f, json_t *v, void *p,
                      bool *skip)
{
    uint64_t u = 0;
    double d = 0;
    int r = 0;

    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32: {
        bool sig = f->type != PROTOBUF_C_TYPE_UINT32 && f->type != PROTOBUF_C_TYPE_FIXED32;
        if ((r = dec_integer(x, v, sig, 32, &u)) == 0)
            *(uint32_t *)p = (uint32_t)u;
        return r;
    }
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: {
        bool sig = f->type != PROTOBUF_C_TYPE_UINT64 && f->type != PROTOBUF_C_TYPE_FIXED64;
        if ((r = dec_integer(x, v, sig, 64, &u)) == 0)
            *(uint64_t *)p = u;
        return r;
    }
    case PROTOBUF_C_TYPE_FLOAT:
        if ((r = dec_float(x, v, 32, &d)) == 0)
            *(float *)p = (float)d;
        return r;
    case PROTOBUF_C_TYPE_DOUBLE:
        if ((r = dec_float(x, v, 64, &d)) == 0)
            *(double *)p = d;
        return r;
    case PROTOBUF_C_TYPE_BOOL:
        if (!json_is_boolean(v))
            return bad(x, "not a boolean");
        *(protobuf_c_boolean *)p = json_is_true(v);
        return 0;
    case PROTOBUF_C_TYPE_ENUM:
        return dec_enum(x, f, v, (int *)p, skip);
    case PROTOBUF_C_TYPE_STRING: {
        char *s;
        if (!json_is_string(v))
            return bad(x, "not a string");
        if (!(s = strdup(json_string_value(v))))
            return oom(x);
        *(char **)p = s;
        return 0;
    }
    case PROTOBUF_C_TYPE_BYTES:
        return dec_bytes(x, v, p);
    case PROTOBUF_C_TYPE_MESSAGE:
        break;
    }
    return sbx_error_set(x->err, EINVAL, "a field of unknown type %d", (int)f->type);
}

/* A message value into *slot: made, hung there, then filled. */
static int dec_sub(struct dec *x, const ProtobufCFieldDescriptor *f, json_t *v,
                   ProtobufCMessage **slot, int depth)
{
    if (!(*slot = sbx_pbjson_message_new(f->descriptor)))
        return oom(x);
    return dec_message(x, f->descriptor, v, *slot, depth + 1);
}

static int dec_repeated(struct dec *x, const ProtobufCFieldDescriptor *f, json_t *v,
                        ProtobufCMessage *m, int depth)
{
    size_t n = json_array_size(v), sz = sbx_pbjson_elt_size(f->type);
    size_t *count = &SBX_PBJSON_AT(size_t, m, f->quantifier_offset);
    char *arr;

    if (!json_is_array(v))
        return bad(x, "not a list");
    if (n == 0)
        return 0;
    if (!(arr = calloc(n, sz)))
        return oom(x);
    SBX_PBJSON_AT(char *, m, f->offset) = arr;
    for (size_t i = 0; i < n; i++) {
        json_t *el = json_array_get(v, i);
        void *p = arr + *count * sz;
        bool skip = false;
        int r;
        if (json_is_null(el))
            return bad(x, "null in a list");
        if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
            (*count)++; /* counted first: freed with m should filling it fail */
            r = dec_sub(x, f, el, p, depth);
        } else if ((r = dec_scalar(x, f, el, p, &skip)) == 0 && !skip) {
            (*count)++;
        }
        if (r < 0)
            return r;
    }
    return 0;
}

/* A map key (JSON object keys are strings) as the key field's type, into the entry. */
static int dec_map_key(struct dec *x, const ProtobufCFieldDescriptor *kf, const char *k,
                       ProtobufCMessage *entry)
{
    void *p = (char *)entry + kf->offset;

    if (kf->type == PROTOBUF_C_TYPE_BOOL) {
        if (strcmp(k, "true") != 0 && strcmp(k, "false") != 0)
            return bad(x, "map key not a boolean");
        *(protobuf_c_boolean *)p = k[0] == 't';
        return 0;
    }
    if (kf->type == PROTOBUF_C_TYPE_STRING) {
        char *s = strdup(k);
        if (!s)
            return oom(x);
        *(char **)p = s;
        return 0;
    }
    /* an integer key as Go's strconv reads it: an optional sign, then decimal digits */
    bool neg = k[0] == '-';
    const char *dg = k + (k[0] == '-' || k[0] == '+');
    uint64_t mag = 0, u;
    if (!*dg || strspn(dg, "0123456789") != strlen(dg))
        return bad(x, "map key not an integer");
    for (; *dg; dg++) {
        if (mag > (UINT64_MAX - (uint64_t)(*dg - '0')) / 10)
            return bad(x, "integer out of range");
        mag = mag * 10 + (uint64_t)(*dg - '0');
    }
    bool sig = kf->type != PROTOBUF_C_TYPE_UINT32 && kf->type != PROTOBUF_C_TYPE_FIXED32 &&
               kf->type != PROTOBUF_C_TYPE_UINT64 && kf->type != PROTOBUF_C_TYPE_FIXED64;
    int bits = (int)sbx_pbjson_elt_size(kf->type) * 8;
    if (int_range(x, neg, mag, sig, bits, &u) < 0)
        return -EINVAL;
    if (bits == 64)
        *(uint64_t *)p = u;
    else
        *(uint32_t *)p = (uint32_t)u;
    return 0;
}

static int entry_cmp(const void *a, const void *b, void *kf)
{
    return sbx_pbjson_key_cmp(kf, *(const ProtobufCMessage *const *)a,
                              *(const ProtobufCMessage *const *)b);
}

/* The entries sorted by key, as the writer orders them, so that a message read and written and
 * read again is the same to the byte. Integer keys may name one key twice ("1", "01", "+1"):
 * refused, as protojson does (JSON's own duplicates jansson refuses). */
static int sort_entries(struct dec *x, const ProtobufCFieldDescriptor *kf, ProtobufCMessage **arr,
                        size_t n)
{
    qsort_r(arr, n, sizeof(*arr), entry_cmp, (void *)kf);
    for (size_t i = 1; i < n; i++)
        if (sbx_pbjson_key_cmp(kf, arr[i - 1], arr[i]) == 0)
            return bad(x, "duplicate map key");
    return 0;
}

static int dec_map(struct dec *x, const ProtobufCFieldDescriptor *f,
                   const ProtobufCMessageDescriptor *ed, json_t *v, ProtobufCMessage *m, int depth)
{
    size_t *count = &SBX_PBJSON_AT(size_t, m, f->quantifier_offset);
    const ProtobufCFieldDescriptor *vf = &ed->fields[1];
    ProtobufCMessage **arr;
    const char *k;
    json_t *val;

    if (!json_is_object(v))
        return bad(x, "not a map");
    if (json_object_size(v) == 0)
        return 0;
    if (!(arr = calloc(json_object_size(v), sizeof(*arr))))
        return oom(x);
    SBX_PBJSON_AT(ProtobufCMessage **, m, f->offset) = arr;
    json_object_foreach(v, k, val)
    {
        ProtobufCMessage *entry = sbx_pbjson_message_new(ed);
        void *p;
        bool skip = false;
        int r;
        if (!entry)
            return oom(x);
        arr[(*count)++] = entry;
        if ((r = dec_map_key(x, &ed->fields[0], k, entry)) < 0)
            return r;
        if (json_is_null(val))
            return bad(x, "null map value");
        p = (char *)entry + vf->offset;
        r = vf->type == PROTOBUF_C_TYPE_MESSAGE ? dec_sub(x, vf, val, p, depth)
                                                : dec_scalar(x, vf, val, p, &skip);
        if (r < 0)
            return r;
        if (skip) /* an unknown enum name: the entry goes, as protojson drops it */
            protobuf_c_message_free_unpacked(arr[--(*count)], NULL);
    }
    return sort_entries(x, &ed->fields[0], arr, *count);
}

/* A singular field (not null): stored, then its presence marked (the oneof case, proto2's has_). */
static int dec_singular(struct dec *x, const ProtobufCFieldDescriptor *f, json_t *v,
                        ProtobufCMessage *m, int depth)
{
    void *p = (char *)m + f->offset;
    bool skip = false;
    int r;

    if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) /* so that m frees the member */
            SBX_PBJSON_AT(uint32_t, m, f->quantifier_offset) = f->id;
        return dec_sub(x, f, v, p, depth);
    }
    if ((r = dec_scalar(x, f, v, p, &skip)) < 0 || skip)
        return r;
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        SBX_PBJSON_AT(uint32_t, m, f->quantifier_offset) = f->id;
    else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_STRING)
        SBX_PBJSON_AT(protobuf_c_boolean, m, f->quantifier_offset) = 1;
    return 0;
}

/* The field a key names: its JSON name first, then its proto name, as protojson looks. */
static const ProtobufCFieldDescriptor *find_field(const ProtobufCMessageDescriptor *d,
                                                  const char *key)
{
    for (unsigned i = 0; i < d->n_fields; i++)
        if (sbx_pbjson_json_name_is(d->fields[i].name, key))
            return &d->fields[i];
    return protobuf_c_message_descriptor_get_field_by_name(d, key);
}

/* Whether another member of f's oneof was given a value already. */
static bool oneof_taken(const ProtobufCMessageDescriptor *d, const ProtobufCFieldDescriptor *f,
                        const uint8_t *given)
{
    for (unsigned i = 0; i < d->n_fields; i++)
        if (given[i] && &d->fields[i] != f && (d->fields[i].flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            d->fields[i].quantifier_offset == f->quantifier_offset)
            return true;
    return false;
}

static int dec_field(struct dec *x, const ProtobufCMessageDescriptor *d,
                     const ProtobufCFieldDescriptor *f, json_t *v, ProtobufCMessage *m, int depth)
{
    const ProtobufCMessageDescriptor *ed = sbx_pbjson_map_entry(d, f);

    if (ed)
        return dec_map(x, f, ed, v, m, depth);
    if (f->label == PROTOBUF_C_LABEL_REPEATED)
        return dec_repeated(x, f, v, m, depth);
    return dec_singular(x, f, v, m, depth);
}

/* seen: each field named at most once (by either name); given: named with a value, not null. */
static int dec_fields(struct dec *x, const ProtobufCMessageDescriptor *d, json_t *v,
                      ProtobufCMessage *m, int depth)
{
    _cleanup_free_ uint8_t *seen = NULL;
    const char *key;
    json_t *val;

    if (!json_is_object(v))
        return sbx_error_set(x->err, EINVAL, "'%s' not an object", d->name);
    if (d->n_fields && !(seen = calloc(d->n_fields, 2)))
        return oom(x);
    json_object_foreach(v, key, val)
    {
        const ProtobufCFieldDescriptor *f = find_field(d, key);
        size_t i;
        int r;
        if (!f)
            continue; /* unknown: discarded, as connect-go does */
        i = (size_t)(f - d->fields);
        if (seen[i])
            return sbx_error_set(x->err, EINVAL, "'%s' given twice", f->name);
        seen[i] = 1;
        if (json_is_null(val))
            continue;
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) && oneof_taken(d, f, seen + d->n_fields))
            return sbx_error_set(x->err, EINVAL, "'%s': another field of its oneof is set",
                                 f->name);
        seen[d->n_fields + i] = 1;
        /* the path to the field, but for the depths no message reaches in practice */
        if ((r = dec_field(x, d, f, val, m, depth)) < 0)
            return x->err && depth < 4 ? sbx_error_wrap(x->err, "'%s'", f->name) : r;
    }
    for (unsigned i = 0; i < d->n_fields; i++)
        if (d->fields[i].label == PROTOBUF_C_LABEL_REQUIRED && !seen[d->n_fields + i])
            return sbx_error_set(x->err, EINVAL, "required '%s' missing", d->fields[i].name);
    return 0;
}

static int dec_timestamp(struct dec *x, const ProtobufCMessageDescriptor *d, json_t *v,
                         ProtobufCMessage *m)
{
    const ProtobufCFieldDescriptor *fs = protobuf_c_message_descriptor_get_field(d, 1);
    const ProtobufCFieldDescriptor *fn = protobuf_c_message_descriptor_get_field(d, 2);
    int64_t secs;
    int32_t nanos;

    if (!fs || !fn || fs->type != PROTOBUF_C_TYPE_INT64 || fn->type != PROTOBUF_C_TYPE_INT32)
        return sbx_error_set(x->err, EINVAL, "'%s' is not the well-known timestamp", d->name);
    if (!json_is_string(v) || sbx_pbjson_ts_parse(json_string_value(v), &secs, &nanos) < 0)
        return bad(x, "not an rfc 3339 timestamp from year 1 to 9999");
    SBX_PBJSON_AT(int64_t, m, fs->offset) = secs;
    SBX_PBJSON_AT(int32_t, m, fn->offset) = nanos;
    return 0;
}

static int dec_message(struct dec *x, const ProtobufCMessageDescriptor *d, json_t *v,
                       ProtobufCMessage *m, int depth)
{
    bool skip = false;

    if (depth > SBX_PBJSON_MAX_DEPTH)
        return sbx_error_set(x->err, EINVAL, "messages nested deeper than %d",
                             SBX_PBJSON_MAX_DEPTH);
    switch (sbx_pbjson_wkt(d)) {
    case SBX_PBJSON_TIMESTAMP:
        return dec_timestamp(x, d, v, m);
    case SBX_PBJSON_WRAPPER:
        return dec_scalar(x, &d->fields[0], v, (char *)m + d->fields[0].offset, &skip);
    case SBX_PBJSON_UNSUPPORTED:
        return sbx_error_set(x->err, EOPNOTSUPP, "no json mapping for '%s'", d->name);
    case SBX_PBJSON_PLAIN:
        break;
    }
    return dec_fields(x, d, v, m, depth);
}

int sbx_pbjson_decode(const ProtobufCMessageDescriptor *d, const char *text, size_t len,
                      ProtobufCMessage **ret, struct sbx_error *err)
{
    struct dec x = {.err = err};
    json_auto_t *root = NULL;
    ProtobufCMessage *m;
    json_error_t jerr;
    int r;

    if (len == 0)
        return sbx_error_set(err, EINVAL, "an empty payload is not a json object");
    /* any value at the top: a Timestamp or a wrapper is a string or a number */
    root = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return sbx_error_set(err, EINVAL, "invalid json at %d:%d: %s", jerr.line, jerr.column,
                             jerr.text);
    if (!(m = sbx_pbjson_message_new(d)))
        return sbx_error_set(err, ENOMEM, "out of memory");
    if ((r = dec_message(&x, d, root, m, 0)) < 0) {
        protobuf_c_message_free_unpacked(m, NULL);
        return r;
    }
    *ret = m;
    return 0;
}
