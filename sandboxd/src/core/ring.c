#include "ring.h"

#include <stdlib.h>
#include <string.h>

void sbx_ring_init(struct sbx_ring *r, size_t max, struct sbx_budget *budget)
{
    memset(r, 0, sizeof(*r));
    r->max = max;
    r->budget = budget;
}

void sbx_ring_release(struct sbx_ring *r)
{
    sbx_budget_give(r->budget, r->cap);
    free(r->buf);
    r->buf = NULL;
    r->cap = 0;
}

/* Copies n bytes from the ring at absolute offset off (held) into out. */
static void copy_out(const struct sbx_ring *r, uint64_t off, uint8_t *out, size_t n)
{
    size_t pos = (size_t)(off % r->cap), first = r->cap - pos;

    if (first > n)
        first = n;
    memcpy(out, r->buf + pos, first);
    memcpy(out + first, r->buf, n - first);
}

/* Makes room for need bytes in all, up to max; keeps what is held. */
static void grow(struct sbx_ring *r, size_t need)
{
    size_t cap = r->cap ? r->cap : 4096, held = (size_t)(r->end - r->start);
    struct sbx_ring n;

    while (cap < need && cap < r->max)
        cap = cap > r->max / 2 ? r->max : cap * 2;
    if (cap > r->max)
        cap = r->max;
    if (cap <= r->cap)
        return;
    cap = r->cap + sbx_budget_take_some(r->budget, cap - r->cap);
    if (cap == r->cap)
        return;
    n = *r;
    n.buf = malloc(cap);
    if (!n.buf) {
        sbx_budget_give(r->budget, cap - r->cap);
        return;
    }
    n.cap = cap;
    if (held) {
        uint8_t *tmp = malloc(held);
        if (!tmp) {
            sbx_budget_give(r->budget, cap - r->cap);
            free(n.buf);
            return;
        }
        copy_out(r, r->start, tmp, held);
        for (size_t i = 0; i < held;) {
            size_t pos = (size_t)((r->start + i) % cap), chunk = cap - pos;
            if (chunk > held - i)
                chunk = held - i;
            memcpy(n.buf + pos, tmp + i, chunk);
            i += chunk;
        }
        free(tmp);
    }
    free(r->buf);
    *r = n;
}

void sbx_ring_append(struct sbx_ring *r, const uint8_t *data, size_t len)
{
    size_t held = (size_t)(r->end - r->start);

    if (len == 0 || r->max == 0) {
        r->end += len;
        r->start = r->max == 0 ? r->end : r->start;
        return;
    }
    if (held + len > r->cap)
        grow(r, held + len);
    if (r->cap == 0) {
        r->end += len;
        r->start = r->end;
        return;
    }
    if (len > r->cap) {
        /* Only the last cap bytes can be held. */
        r->end += len - r->cap;
        data += len - r->cap;
        len = r->cap;
        r->start = r->end;
    }
    for (size_t i = 0; i < len;) {
        size_t pos = (size_t)((r->end + i) % r->cap), chunk = r->cap - pos;
        if (chunk > len - i)
            chunk = len - i;
        memcpy(r->buf + pos, data + i, chunk);
        i += chunk;
    }
    r->end += len;
    if (r->end - r->start > r->cap)
        r->start = r->end - r->cap;
}

size_t sbx_ring_read(const struct sbx_ring *r, uint64_t offset, uint8_t *out, size_t n,
                     uint64_t *at)
{
    uint64_t from = offset < r->start ? r->start : offset;

    *at = from;
    if (from >= r->end || n == 0)
        return 0;
    if (n > r->end - from)
        n = (size_t)(r->end - from);
    copy_out(r, from, out, n);
    return n;
}
