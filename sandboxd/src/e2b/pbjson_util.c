/* pbjson's shared pieces: protoc's names, map entries, the well-known types, Timestamp text,
 * base64 and JSON number text. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pbjson_int.h"

static const char *const wrappers[] = {
    "google.protobuf.DoubleValue", "google.protobuf.FloatValue",  "google.protobuf.Int64Value",
    "google.protobuf.UInt64Value", "google.protobuf.Int32Value",  "google.protobuf.UInt32Value",
    "google.protobuf.BoolValue",   "google.protobuf.StringValue", "google.protobuf.BytesValue",
};
static const char *const unsupported[] = {
    "google.protobuf.Any",   "google.protobuf.Duration",  "google.protobuf.Struct",
    "google.protobuf.Value", "google.protobuf.ListValue", "google.protobuf.FieldMask",
};

static bool name_in(const char *name, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0)
            return true;
    return false;
}

enum sbx_pbjson_wkt sbx_pbjson_wkt(const ProtobufCMessageDescriptor *d)
{
    if (strncmp(d->name, "google.protobuf.", 16) != 0)
        return SBX_PBJSON_PLAIN;
    if (strcmp(d->name, "google.protobuf.Timestamp") == 0)
        return SBX_PBJSON_TIMESTAMP;
    /* a wrapper's one field is its value; a foreign message of that name is taken as plain */
    if (name_in(d->name, wrappers, sizeof(wrappers) / sizeof(*wrappers)) && d->n_fields == 1 &&
        d->fields[0].id == 1 && d->fields[0].label != PROTOBUF_C_LABEL_REPEATED)
        return SBX_PBJSON_WRAPPER;
    if (name_in(d->name, unsupported, sizeof(unsupported) / sizeof(*unsupported)))
        return SBX_PBJSON_UNSUPPORTED;
    return SBX_PBJSON_PLAIN;
}

static char ascii_upper(char c)
{
    return c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c;
}

size_t sbx_pbjson_json_name(const char *proto_name, char *out)
{
    size_t n = 0;
    bool up = false;

    for (const char *p = proto_name; *p; p++) {
        if (*p == '_') {
            up = true;
            continue;
        }
        out[n++] = up ? ascii_upper(*p) : *p;
        up = false;
    }
    out[n] = '\0';
    return n;
}

bool sbx_pbjson_json_name_is(const char *proto_name, const char *key)
{
    bool up = false;

    for (const char *p = proto_name; *p; p++) {
        if (*p == '_') {
            up = true;
            continue;
        }
        if (*key++ != (up ? ascii_upper(*p) : *p))
            return false;
        up = false;
    }
    return *key == '\0';
}

/* Whether name is protoc's MapEntryName of field: each '_' dropped, the first letter and each
 * one after a '_' upper-cased, "Entry" after. */
static bool is_entry_name(const char *field, const char *name)
{
    bool up = true;

    for (const char *p = field; *p; p++) {
        if (*p == '_') {
            up = true;
            continue;
        }
        if (*name++ != (up ? ascii_upper(*p) : *p))
            return false;
        up = false;
    }
    return strcmp(name, "Entry") == 0;
}

const ProtobufCMessageDescriptor *sbx_pbjson_map_entry(const ProtobufCMessageDescriptor *d,
                                                       const ProtobufCFieldDescriptor *f)
{
    const ProtobufCMessageDescriptor *e = f->descriptor;
    size_t dn;

    if (f->label != PROTOBUF_C_LABEL_REPEATED || f->type != PROTOBUF_C_TYPE_MESSAGE || !e)
        return NULL;
    if (e->n_fields != 2 || e->fields[0].id != 1 || e->fields[1].id != 2 ||
        strcmp(e->fields[0].name, "key") != 0 || strcmp(e->fields[1].name, "value") != 0 ||
        !is_entry_name(f->name, e->short_name))
        return NULL;
    /* nested in d: its full name is d's, a dot and its own */
    dn = strlen(d->name);
    if (strncmp(e->name, d->name, dn) != 0 || e->name[dn] != '.' ||
        strcmp(e->name + dn + 1, e->short_name) != 0)
        return NULL;
    return e;
}

size_t sbx_pbjson_elt_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        return 8;
    case PROTOBUF_C_TYPE_FLOAT:
        return sizeof(float);
    case PROTOBUF_C_TYPE_DOUBLE:
        return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_ENUM:
        return sizeof(int);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    }
    return 0;
}

int sbx_pbjson_key_cmp(const ProtobufCFieldDescriptor *kf, const ProtobufCMessage *a,
                       const ProtobufCMessage *b)
{
#define CMP3(T)                                                                                    \
    do {                                                                                           \
        T x = SBX_PBJSON_AT_C(T, a, kf->offset), y = SBX_PBJSON_AT_C(T, b, kf->offset);            \
        return (x > y) - (x < y);                                                                  \
    } while (0)
    switch (kf->type) {
    case PROTOBUF_C_TYPE_STRING: {
        const char *x = SBX_PBJSON_AT_C(char *, a, kf->offset);
        const char *y = SBX_PBJSON_AT_C(char *, b, kf->offset);
        return strcmp(x ? x : "", y ? y : "");
    }
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        CMP3(int64_t);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        CMP3(uint64_t);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        CMP3(uint32_t);
    case PROTOBUF_C_TYPE_BOOL:
        CMP3(protobuf_c_boolean);
    default:
        CMP3(int32_t);
    }
#undef CMP3
}

ProtobufCMessage *sbx_pbjson_message_new(const ProtobufCMessageDescriptor *d)
{
    ProtobufCMessage *m = malloc(d->sizeof_message);

    if (m)
        protobuf_c_message_init(d, m);
    return m;
}

/* ---- Timestamp: days since 1970-01-01 from a civil date and back (proleptic Gregorian) ---- */

static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static void civil_from_days(int64_t z, int *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int)((int64_t)yoe + era * 400 + (*m <= 2));
}

int sbx_pbjson_ts_format(int64_t secs, int32_t nanos, char out[SBX_PBJSON_TS_LEN])
{
    int64_t days, rem;
    unsigned mo, d;
    int y, n;

    if (secs < SBX_PBJSON_TS_MIN || secs > SBX_PBJSON_TS_MAX || nanos < 0 || nanos > 999999999)
        return -EINVAL;
    days = secs / 86400;
    rem = secs % 86400;
    if (rem < 0) {
        rem += 86400;
        days--;
    }
    civil_from_days(days, &y, &mo, &d);
    n = snprintf(out, SBX_PBJSON_TS_LEN, "%04d-%02u-%02uT%02d:%02d:%02d", y, mo, d,
                 (int)(rem / 3600), (int)(rem / 60 % 60), (int)(rem % 60));
    /* as protojson: 0, 3, 6 or 9 digits, as few as hold the nanoseconds */
    if (nanos % 1000000 == 0 && nanos)
        n += snprintf(out + n, (size_t)(SBX_PBJSON_TS_LEN - n), ".%03d", nanos / 1000000);
    else if (nanos % 1000 == 0 && nanos)
        n += snprintf(out + n, (size_t)(SBX_PBJSON_TS_LEN - n), ".%06d", nanos / 1000);
    else if (nanos)
        n += snprintf(out + n, (size_t)(SBX_PBJSON_TS_LEN - n), ".%09d", nanos);
    snprintf(out + n, (size_t)(SBX_PBJSON_TS_LEN - n), "Z");
    return 0;
}

/* Reads exactly n digits at *p into *v. */
static bool digits(const char **p, int n, int *v)
{
    *v = 0;
    for (int i = 0; i < n; i++, (*p)++) {
        if (**p < '0' || **p > '9')
            return false;
        *v = *v * 10 + (**p - '0');
    }
    return true;
}

static bool leap(int y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int ts_offset(const char *p, int *off)
{
    int sign, oh, om;

    if (*p == 'Z') {
        *off = 0;
        return p[1] ? -EINVAL : 0;
    }
    if (*p != '+' && *p != '-')
        return -EINVAL;
    sign = *p++ == '-' ? -1 : 1;
    if (!digits(&p, 2, &oh) || *p++ != ':' || !digits(&p, 2, &om) || *p || oh > 23 || om > 59)
        return -EINVAL;
    *off = sign * (oh * 3600 + om * 60);
    return 0;
}

int sbx_pbjson_ts_parse(const char *s, int64_t *secs, int32_t *nanos)
{
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const char *p = s;
    int y, mo, d, h, mi, se, off, ns = 0;
    int64_t t;

    if (!digits(&p, 4, &y) || *p++ != '-' || !digits(&p, 2, &mo) || *p++ != '-' ||
        !digits(&p, 2, &d) || *p++ != 'T' || !digits(&p, 2, &h) || *p++ != ':' ||
        !digits(&p, 2, &mi) || *p++ != ':' || !digits(&p, 2, &se))
        return -EINVAL;
    if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] + (mo == 2 && leap(y)) || h > 23 ||
        mi > 59 || se > 59)
        return -EINVAL;
    if (*p == '.') {
        int n = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, n++) {
            if (n == 9)
                return -EINVAL; /* protojson allows nanoseconds, no finer */
            ns = ns * 10 + (*p - '0');
        }
        if (n == 0)
            return -EINVAL;
        for (; n < 9; n++)
            ns *= 10;
    }
    if (ts_offset(p, &off) < 0)
        return -EINVAL;
    t = days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 + se - off;
    if (t < SBX_PBJSON_TS_MIN || t > SBX_PBJSON_TS_MAX)
        return -EINVAL;
    *secs = t;
    *nanos = ns;
    return 0;
}

/* ---- base64 ---- */

static const char b64_std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t sbx_pbjson_b64_encode(const uint8_t *in, size_t n, char *out)
{
    size_t o = 0, i = 0;

    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = b64_std[v >> 18];
        out[o++] = b64_std[v >> 12 & 63];
        out[o++] = b64_std[v >> 6 & 63];
        out[o++] = b64_std[v & 63];
    }
    if (n - i == 1) {
        out[o++] = b64_std[in[i] >> 2];
        out[o++] = b64_std[(in[i] & 3) << 4];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 8 | in[i + 1];
        out[o++] = b64_std[v >> 10];
        out[o++] = b64_std[v >> 4 & 63];
        out[o++] = b64_std[(v & 15) << 2];
        out[o++] = '=';
    }
    out[o] = '\0';
    return o;
}

static int b64_value(char c, bool url)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == (url ? '-' : '+'))
        return 62;
    if (c == (url ? '_' : '/'))
        return 63;
    return -1;
}

int sbx_pbjson_b64_decode(const char *s, size_t len, uint8_t **ret, size_t *ret_len)
{
    bool url = memchr(s, '-', len) || memchr(s, '_', len), padded = len % 4 == 0;
    uint8_t *out = NULL;
    uint32_t acc = 0;
    size_t o = 0, pad = 0, nq = 0;

    if (len && !(out = malloc(len / 4 * 3 + 3)))
        return -ENOMEM;
    for (size_t i = 0; i < len; i++) {
        int v;
        if (s[i] == '\r' || s[i] == '\n')
            continue;
        if (s[i] == '=' && padded && nq >= 2) {
            pad++;
            nq++;
        } else if (pad || (v = b64_value(s[i], url)) < 0) {
            goto bad; /* a character past the padding, or none of the alphabet */
        } else {
            acc = acc << 6 | (uint32_t)v;
            nq++;
        }
        if (nq == 4) {
            if (pad > 2)
                goto bad;
            out[o++] = (uint8_t)(acc >> (16 - 6 * pad));
            if (pad < 2)
                out[o++] = (uint8_t)(acc >> (8 - 6 * pad));
            if (pad < 1)
                out[o++] = (uint8_t)acc;
            acc = 0;
            nq = 0;
            if (pad)
                pad = 3; /* the input must end here */
        }
    }
    /* padded input ends on a quantum; unpadded may end with 2 or 3 characters of one */
    if (nq == 1 || (nq && padded))
        goto bad;
    if (nq == 2) {
        out[o++] = (uint8_t)(acc >> 4);
    } else if (nq == 3) {
        out[o++] = (uint8_t)(acc >> 10);
        out[o++] = (uint8_t)(acc >> 2);
    }
    if (o == 0) {
        free(out);
        out = NULL;
    }
    *ret = out;
    *ret_len = o;
    return 0;
bad:
    free(out);
    return -EINVAL;
}

/* ---- JSON number text ---- */

/* The parts of a JSON number: its digits (integer then fraction), how many are fraction, the
 * exponent clamped to +-100000 (which decides every range question); false when not a number. */
struct numtext {
    bool neg;
    const char *int_start, *frac_start;
    size_t int_len, frac_len;
    long exp;
};

static size_t skip_digits(const char **p)
{
    const char *s = *p;
    while (**p >= '0' && **p <= '9')
        (*p)++;
    return (size_t)(*p - s);
}

static bool numtext_parse(const char *p, struct numtext *n)
{
    memset(n, 0, sizeof(*n));
    n->neg = *p == '-';
    p += n->neg;
    n->int_start = p;
    if (*p == '0')
        n->int_len = 1, p++;
    else if (!(n->int_len = skip_digits(&p)))
        return false;
    if (*p == '.') {
        p++;
        n->frac_start = p;
        if (!(n->frac_len = skip_digits(&p)))
            return false;
    }
    if (*p == 'e' || *p == 'E') {
        bool eneg = false;
        p++;
        if (*p == '+' || *p == '-')
            eneg = *p++ == '-';
        if (*p < '0' || *p > '9')
            return false;
        for (; *p >= '0' && *p <= '9'; p++)
            if (n->exp < 100000)
                n->exp = n->exp * 10 + (*p - '0');
        if (eneg)
            n->exp = -n->exp;
    }
    return *p == '\0';
}

bool sbx_pbjson_number_text(const char *s)
{
    struct numtext n;
    return numtext_parse(s, &n);
}

/* The i-th digit of the number's digits (integer part, then fraction). */
static int numtext_digit(const struct numtext *n, size_t i)
{
    return i < n->int_len ? n->int_start[i] - '0' : n->frac_start[i - n->int_len] - '0';
}

int sbx_pbjson_integer_text(const char *s, bool *neg, uint64_t *mag)
{
    struct numtext n;
    size_t nd, first = 0, keep;
    long e10;
    uint64_t v = 0;

    if (!numtext_parse(s, &n))
        return -EINVAL;
    nd = n.int_len + n.frac_len;
    while (first < nd && numtext_digit(&n, first) == 0)
        first++;
    *neg = n.neg;
    if (first == nd) {
        *mag = 0;
        return 0;
    }
    /* value = digits[first..nd) * 10^e10 */
    e10 = n.exp - (long)n.frac_len;
    keep = nd;
    if (e10 < 0) {
        size_t drop = (size_t)-e10;
        if (drop > nd - first)
            return -EINVAL; /* a fraction whatever the digits */
        for (size_t i = nd - drop; i < nd; i++)
            if (numtext_digit(&n, i) != 0)
                return -EINVAL;
        keep = nd - drop;
        e10 = 0;
    }
    if ((long)(keep - first) + e10 > 20)
        return -ERANGE;
    for (size_t i = first; i < keep + (size_t)e10; i++) {
        int dg = i < keep ? numtext_digit(&n, i) : 0;
        if (v > (UINT64_MAX - (uint64_t)dg) / 10)
            return -ERANGE;
        v = v * 10 + (uint64_t)dg;
    }
    *mag = v;
    return 0;
}
