/* A budget handler that returns: the run goes on without a budget. */
#include <stdio.h>
#include "bbv.h"

static void on_budget(uint64_t count, const char *function, const char *file, unsigned line) {
    printf("over budget at %llu in %s (%s:%u)\n", (unsigned long long)count, function, file, line);
}

static unsigned long spin(unsigned n) {
    unsigned long s = 0;
    for (unsigned i = 0; i < n; i++)
        s += i % 7;
    return s;
}

int main(void) {
    bbv_on_budget(on_budget);
    bbv_set_budget(1000);
    unsigned long s = spin(5000);
    printf("finished %lu\n", s);
    return 0;
}
