/* Constructs whose counts once differed between -O0 and -O1..-Os (issue 31): static helpers,
 * qsort with a comparator, an snprintf loop, recursion, and atoi, which glibc's headers define
 * `extern inline` (inlined from -O1 on, a call into libc at -O0). */
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static unsigned mix(unsigned x) { return x * 2654435761u ^ (x >> 13); }

static long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    int *v = malloc(sizeof(int) * (size_t)n);
    if (!v)
        return 1;
    for (int i = 0; i < n; i++)
        v[i] = (int)mix((unsigned)i);
    qsort(v, (size_t)n, sizeof(int), cmp);
    char buf[64];
    long len = 0;
    for (int i = 0; i < n; i += 7)
        len += snprintf(buf, sizeof buf, "%d,", v[i]);
    printf("%ld %ld %d\n", len, fib(20), v[n / 2]);
    free(v);
    return 0;
}
