/* An OpenMP program with phases: a parallel arithmetic loop, a serial stretch on the main
   thread, and a parallel loop with irregular memory accesses in interleaved chunks,
   repeated ROUNDS times (argv[1]). For bbv run --regions looppoint. */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <omp.h>
#define N 200000
static double a[N], b[N];
int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 6;
  double s = 0;
  for (int r = 0; r < rounds; r++) {
    /* phase 1: arithmetic */
    #pragma omp parallel for reduction(+:s)
    for (int i = 0; i < N; i++) { a[i] = sqrt((double)i + r); s += a[i]; }
    /* phase 2: a serial stretch on the main thread */
    for (int i = 1; i < N; i++) b[i] = b[i-1] * 0.5 + a[i];
    /* phase 3: irregular memory */
    #pragma omp parallel for reduction(+:s) schedule(static, 1000)
    for (int i = 0; i < N; i++) { unsigned k = (unsigned)i * 2654435761u % N; s += a[k] * b[i]; }
  }
  printf("%f\n", s);
  return 0;
}
