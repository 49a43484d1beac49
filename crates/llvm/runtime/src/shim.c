/* Part of the bbv-llvm runtime that must be C. */
#include <stdint.h>

/* The calling thread's [instructions counted since start or the last bbv_reset, limit]. The
 * instrumented code adds each block's count to [0] when the block is entered and calls
 * bbv_budget_hit when [0] passes [1]. New threads start from this image. */
__attribute__((tls_model("initial-exec"))) __thread uint64_t __bbv_tls[2] = {0, UINT64_MAX};

/* One record per module built in `blocks` mode, placed in section bbv_modules by the pass. */
struct bbv_module {
    uint64_t *counts;
    const void *sites;
    uint64_t n;
};
extern const struct bbv_module __start_bbv_modules[] __attribute__((weak));
extern const struct bbv_module __stop_bbv_modules[] __attribute__((weak));

uint64_t *bbv_rt_tls(void) { return __bbv_tls; }

const struct bbv_module *bbv_rt_modules(const struct bbv_module **end) {
    *end = __stop_bbv_modules;
    return __start_bbv_modules;
}

/* Defined (weakly) by modules built with `bbv cc --mode count`, whose code never compares with the
 * limit: budgets would go unnoticed there. */
extern const char __bbv_unchecked __attribute__((weak));

int bbv_rt_unchecked(void) { return &__bbv_unchecked != 0; }

/* Programs built with --mode count refer to nothing but the counter, which is defined here: this
 * reference brings in the rest of the runtime (its start-up, exit and thread accounting). */
extern void bbv_budget_hit(const void *site);
__attribute__((used)) void (*const bbv_rt_keep)(const void *) = bbv_budget_hit;
