/* Known path: deep_jump recurses 3 times and longjmps from the 4th call; the blocks that call
 * longjmp and deep_jump are left early and count in full. */
#include <setjmp.h>

static jmp_buf env;
volatile int sink;

__attribute__((noinline)) void deep_jump(int depth) {
    if (depth == 0)
        longjmp(env, 1);
    deep_jump(depth - 1);
    sink = depth;
}

int main(void) {
    if (setjmp(env) == 0)
        deep_jump(3);
    return 0;
}
