/* A byte ring addressed by absolute offsets: it holds the bytes [start, end) of a stream whose
 * total length is end. It grows up to a largest size, then drops the oldest bytes; a reader
 * behind start learns what it missed. Not thread-safe: callers lock. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "budget.h"

struct sbx_ring {
    uint8_t *buf;
    size_t cap;                /* allocated, taken from budget */
    size_t max;                /* largest cap */
    struct sbx_budget *budget; /* NULL: none */
    uint64_t start, end;
};

/* A ring grows up to max as long as budget (NULL: none) gives it the bytes. */
void sbx_ring_init(struct sbx_ring *r, size_t max, struct sbx_budget *budget);
void sbx_ring_release(struct sbx_ring *r);

/* Appends len bytes, dropping the oldest when full (or when growing fails or the budget has no
 * room). */
void sbx_ring_append(struct sbx_ring *r, const uint8_t *data, size_t len);

/* Copies up to n bytes held from offset on (from start when offset is older) into out; sets
 * *at to the offset of the first byte copied and returns how many. */
size_t sbx_ring_read(const struct sbx_ring *r, uint64_t offset, uint8_t *out, size_t n,
                     uint64_t *at);
