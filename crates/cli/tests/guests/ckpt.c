/* A guest for `bbv checkpoint`: phases that read a file (argv[1]) and stdin in pieces, write
 * stdout, keep state in thread-local storage and on the heap, compute in floating point, pass
 * a byte through a pipe of their own and take signals in a handler of their own, so that a
 * checkpoint taken anywhere must restore all of these to reach its region's end with the same
 * instructions. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static __thread unsigned long tls_sum = 7;
static volatile sig_atomic_t caught;
static double *table;
static int self_pipe[2];

static void on_usr1(int sig) { caught += sig; }

/* One round: a block of the file, a line of stdin, heap and floating-point work. */
static unsigned long round_of(FILE *in, int round) {
    unsigned char buf[4096];
    size_t n = fread(buf, 1, sizeof buf, in);
    if (n == 0) {
        rewind(in);
        n = fread(buf, 1, sizeof buf, in);
    }
    unsigned long h = tls_sum;
    for (size_t i = 0; i < n; i++)
        h = h * 31 + buf[i];
    char line[256];
    if (fgets(line, sizeof line, stdin))
        h ^= strlen(line) * 1000003u;
    size_t len = 512 + (h % 512);
    unsigned long *scratch = malloc(len * sizeof *scratch);
    for (size_t i = 0; i < len; i++)
        scratch[i] = h + i * (unsigned long)round;
    for (size_t i = 1; i < len; i++)
        scratch[i] += scratch[i - 1] >> 3;
    double acc = 0;
    for (int i = 0; i < 2000; i++) {
        table[i % 1024] = sqrt(table[i % 1024] + (double)(scratch[i % len] & 0xffff));
        acc += table[i % 1024] * 0.5;
    }
    h += scratch[len - 1] + (unsigned long)acc;
    free(scratch);
    if (round % 16 == 0)
        raise(SIGUSR1);
    unsigned char token = (unsigned char)h;
    if (write(self_pipe[1], &token, 1) != 1 || read(self_pipe[0], &token, 1) != 1)
        abort();
    h += token;
    tls_sum = h;
    return h;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ckpt FILE ROUNDS < LINES\n");
        return 2;
    }
    /* fd:N reads descriptor N, passed down by whatever started the guest. */
    FILE *in = strncmp(argv[1], "fd:", 3) == 0 ? fdopen(atoi(argv[1] + 3), "rb")
                                               : fopen(argv[1], "rb");
    if (!in) {
        perror(argv[1]);
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, 0);
    table = calloc(1024, sizeof *table);
    if (pipe(self_pipe) != 0) {
        perror("pipe");
        return 2;
    }
    int rounds = atoi(argv[2]);
    unsigned long h = 0;
    for (int r = 0; r < rounds; r++) {
        h ^= round_of(in, r);
        if (r % 64 == 63)
            printf("round %d: %lx caught %d\n", r, h, (int)caught);
    }
    printf("done %lx caught %d\n", h, (int)caught);
    return 0;
}
