/* Forks a child that keeps running guest code (no exec) and exits with 7; the parent waits,
 * works on and prints the child's status. Both touch memory throughout. With any argument the
 * child exits at once. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned buf[1 << 16];
static volatile unsigned sink;

static void work(unsigned n) {
    for (unsigned i = 0; i < n; i++)
        buf[(i * 2654435761u) >> 16] += i;
    sink = buf[7];
}

int main(int argc, char **argv) {
    (void)argv;
    work(1000000);
    pid_t p = fork();
    if (p == 0) {
        if (argc == 1)
            work(3000000);
        _exit(7);
    }
    int st = 0;
    waitpid(p, &st, 0);
    work(1000000);
    printf("child exited with %d\n", WEXITSTATUS(st));
    return 0;
}
