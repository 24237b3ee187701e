/* One bound on the process output the daemon holds in memory at once, whatever the number of
 * processes: the rings of spawned processes and the captures of Execute take bytes from it
 * before they grow and give them back when they go. What does not fit is dropped, as output past
 * a per-process cap is. Thread-safe. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sbx_budget {
    size_t max; /* 0: no bound */
    size_t used;
    uint64_t refused; /* bytes of growth refused, in all */
};

void sbx_budget_init(struct sbx_budget *b, size_t max);

/* Takes n bytes when they fit; false (and counted as refused) otherwise. b NULL: no bound. */
bool sbx_budget_take(struct sbx_budget *b, size_t n);
/* Takes as much of want as is left, if that is at least a page's worth (or all of want when it
 * is smaller); else nothing. Returns what it took; what it did not take counts as refused. For a
 * buffer that grows: near the bound it grows less. */
size_t sbx_budget_take_some(struct sbx_budget *b, size_t want);
void sbx_budget_give(struct sbx_budget *b, size_t n);

size_t sbx_budget_used(const struct sbx_budget *b);
uint64_t sbx_budget_refused(const struct sbx_budget *b);
