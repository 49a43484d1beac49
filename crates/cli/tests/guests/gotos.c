/* A computed-goto interpreter loop and setjmp/longjmp: ./gotos prints what it computed. */
#include <setjmp.h>
#include <stdio.h>

static jmp_buf env;

static long run(const unsigned char *code, long acc) {
    static void *ops[] = {&&op_add, &&op_mul, &&op_dec, &&op_jnz, &&op_halt};
    const unsigned char *pc = code;
    int rounds = 1000;
#define NEXT goto *ops[*pc++]
    NEXT;
op_add:
    acc += *pc++;
    NEXT;
op_mul:
    acc *= *pc++;
    NEXT;
op_dec:
    acc -= 1;
    NEXT;
op_jnz:
    acc %= 1000003;
    if (--rounds > 0) pc = code;
    NEXT;
op_halt:
    return acc;
}

static void fail(int code) { longjmp(env, code); }

int main(void) {
    const unsigned char prog[] = {0, 7, 1, 3, 2, 3, 4};
    long r = run(prog, 1);
    int caught = setjmp(env);
    if (!caught)
        fail(42);
    printf("run %ld caught %d\n", r, caught);
    return 0;
}
