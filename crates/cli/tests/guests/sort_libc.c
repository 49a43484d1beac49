/* A dynamically linked C program for foreign guests: printf, qsort, malloc and free from libc. */
#include <stdio.h>
#include <stdlib.h>
static int cmp(const void *a, const void *b) { long x = *(const long *)a, y = *(const long *)b; return (x > y) - (x < y); }
int main(void) {
  long n = 200000, sum = 0;
  for (int round = 0; round < 6; round++) {
    long *v = malloc(n * sizeof *v);
    for (long i = 0; i < n; i++) v[i] = (i * 7919 + round) % 100003;
    qsort(v, n, sizeof *v, cmp);
    for (long i = 0; i < n; i += 97) sum += v[i];
    free(v);
  }
  printf("%ld\n", sum);
  return 0;
}
