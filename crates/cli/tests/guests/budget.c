/* A bot game: each turn's work is capped with bbv_reset/bbv_set_budget. The verdict (which turn
 * runs out, where, at which count) is the same on every run, -O level and machine. */
#include <stdio.h>
#include "bbv.h"

static unsigned long think(unsigned depth) {
    unsigned long score = 0;
    for (unsigned i = 0; i < depth; i++)
        score += (i * 2654435761u) % 97;
    return score;
}

int main(void) {
    unsigned long total = 0;
    for (unsigned turn = 1; turn <= 10; turn++) {
        bbv_reset();
        bbv_set_budget(20000);
        total += think(turn * 400);
        printf("turn %u: %llu instructions\n", turn, (unsigned long long)bbv_count());
        fflush(stdout);
    }
    printf("total %lu\n", total);
    return 0;
}
