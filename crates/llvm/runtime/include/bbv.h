/* bbv.h: deterministic instruction counting for programs built with `bbv cc` / `bbv c++`.
 *
 * Counts are LLVM IR instructions of the program's own code (not of precompiled libraries),
 * added when each basic block is entered; they are the same on every run, optimisation level,
 * -march and machine for the same source and flags. Counters are per thread. */
#ifndef BBV_H
#define BBV_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* Instructions counted on the calling thread since it started or last called bbv_reset(). */
uint64_t bbv_count(void);

/* Restarts the calling thread's count at 0 (its total for BBV_OUT keeps what was counted). */
void bbv_reset(void);

/* Stops the calling thread once bbv_count() exceeds n (0 = no budget). The check runs at every
 * function entry and loop head, so the stop is at the same place and count on every run. A
 * program built with `bbv cc --mode count` has no checks: there, n > 0 exits with status 2. */
void bbv_set_budget(uint64_t n);

/* Called when the budget runs out, with the count and where it ran out (bbv cc always compiles
 * line tables). If it returns, the budget is removed and the thread continues. The default
 * prints the function and line on stderr and exits with status 152 (128 + SIGXCPU). */
typedef void (*bbv_budget_handler)(uint64_t count, const char *function, const char *file, unsigned line);
void bbv_on_budget(bbv_budget_handler handler);

#ifdef __cplusplus
}
#endif
#endif
