/* An OpenMP program whose threads share work by a dynamic schedule: which thread takes which
   chunk follows the host's scheduler unless the run fixes the order. Phases: a static compute
   loop, a dynamic loop of uneven iterations, a stream loop and a serial stretch, ROUNDS times
   (argv[1]). For bbv run --regions looppoint --schedule deterministic. */
#include <stdio.h>
#include <stdlib.h>
#define N 120000
static double a[N], b[N];
static double uneven(int i, int r) {
  /* Iteration i costs 1 to 64 steps, in a pattern no static split balances. */
  int steps = 1 + (int)(((unsigned)i * 2654435761u + (unsigned)r) % 64u);
  double x = a[i];
  for (int k = 0; k < steps; k++) x = x * 0.999 + 0.5;
  return x;
}
int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 4;
  double s = 0;
  for (int r = 0; r < rounds; r++) {
    #pragma omp parallel for reduction(+:s) schedule(static)
    for (int i = 0; i < N; i++) { a[i] = (double)((i + r) % 1000) * 0.25; s += a[i]; }
    #pragma omp parallel for reduction(+:s) schedule(dynamic, 64)
    for (int i = 0; i < N; i++) { b[i] = uneven(i, r); s += b[i]; }
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) a[i] = b[i] + 0.5 * a[i];
    for (int i = 1; i < N; i++) b[i] = b[i - 1] * 0.25 + a[i];
    s += b[N - 1];
  }
  printf("%a\n", s);
  return 0;
}
