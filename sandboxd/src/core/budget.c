#include "budget.h"

void sbx_budget_init(struct sbx_budget *b, size_t max)
{
    b->max = max;
    b->used = 0;
    b->refused = 0;
}

static size_t take_upto(struct sbx_budget *b, size_t want, size_t least)
{
    size_t used, n;

    if (!b || !b->max) {
        if (b)
            __atomic_add_fetch(&b->used, want, __ATOMIC_RELAXED);
        return want;
    }
    used = __atomic_load_n(&b->used, __ATOMIC_RELAXED);
    do {
        n = used >= b->max ? 0 : b->max - used;
        if (n > want)
            n = want;
        if (n < least)
            n = 0;
        if (n == 0)
            break;
    } while (!__atomic_compare_exchange_n(&b->used, &used, used + n, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    if (n < want)
        __atomic_add_fetch(&b->refused, want - n, __ATOMIC_RELAXED);
    return n;
}

bool sbx_budget_take(struct sbx_budget *b, size_t n)
{
    return take_upto(b, n, n) == n;
}

size_t sbx_budget_take_some(struct sbx_budget *b, size_t want)
{
    return take_upto(b, want, want < 4096 ? want : 4096);
}

void sbx_budget_give(struct sbx_budget *b, size_t n)
{
    if (b)
        __atomic_sub_fetch(&b->used, n, __ATOMIC_RELAXED);
}

size_t sbx_budget_used(const struct sbx_budget *b)
{
    return __atomic_load_n(&b->used, __ATOMIC_RELAXED);
}

uint64_t sbx_budget_refused(const struct sbx_budget *b)
{
    return __atomic_load_n(&b->refused, __ATOMIC_RELAXED);
}
