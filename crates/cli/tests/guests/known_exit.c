/* Known path: exit() four calls deep; the blocks on the stack count in full. */
#include <stdlib.h>

volatile int sink;

__attribute__((noinline)) void deep_exit(int depth) {
    if (depth == 0)
        exit(3);
    deep_exit(depth - 1);
    sink = depth;
}

int main(void) {
    deep_exit(3);
    return 1;
}
