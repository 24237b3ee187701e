#include "pb_check.h"

#include <stddef.h>
#include <stdint.h>

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
