// Test kernels for `bbv gpu run` (scripts/check-gpu): each exercises one kind of control flow whose
// warp-level instruction count the check derives from the kernel's static CFG and the launch's data.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#define CHECK(x)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));         \
      exit(1);                                                                                    \
    }                                                                                             \
  } while (0)

// A loop whose trip count is each thread's datum: a warp runs the body max(trips) times.
__global__ void trip_loop(const int *trips, int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int t = trips[i];
  unsigned acc = 1;
#pragma unroll 1
  for (int k = 0; k < t; k++) acc = acc * 2654435761u + k;
  out[i] = acc;
}

// The same loop with one trip count per warp: no lane waits for another, so the warp-level
// count is analytic too.
__global__ void uniform_loop(const int *trips, int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int t = trips[i >> 5];
  unsigned acc = 1;
#pragma unroll 1
  for (int k = 0; k < t; k++) acc = acc * 2654435761u + k;
  out[i] = acc;
}

// Divergent branches: lanes take one side or the other by their datum's parity.
__global__ void diverge(const int *v, int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int x = v[i];
  if (x & 1) {
    out[i] = x * 7 + 3;
  } else {
    out[i] = (x >> 1) ^ 0x5a5a;
  }
}

// A call to a function the compiler keeps out of line.
__device__ __noinline__ int mix(int x, int y) {
  int r = x;
#pragma unroll 1
  for (int k = 0; k < (y & 3); k++) r = r * 31 + k;
  return r;
}

__global__ void caller(const int *v, int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = mix(v[i], i);
}

int main(int argc, char **argv) {
  const int n = 1 << 16;
  int *h = (int *)malloc(n * sizeof(int));
  int *dv, *dout;
  CHECK(cudaMalloc(&dv, n * sizeof(int)));
  CHECK(cudaMalloc(&dout, n * sizeof(int)));
  unsigned seed = argc > 1 ? (unsigned)atoi(argv[1]) : 12345u;
  for (int i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    h[i] = 1 + (int)((seed >> 16) % 17);
  }
  CHECK(cudaMemcpy(dv, h, n * sizeof(int), cudaMemcpyHostToDevice));
  // Several launches of each kernel with different sizes (and a partial last block).
  const int sizes[] = {32, 1000, 4096, n};
  for (int s : sizes) {
    trip_loop<<<(s + 127) / 128, 128>>>(dv, dout, s);
    CHECK(cudaGetLastError());
    uniform_loop<<<(s + 127) / 128, 128>>>(dv, dout, s);
    CHECK(cudaGetLastError());
    diverge<<<(s + 255) / 256, 256>>>(dv, dout, s);
    CHECK(cudaGetLastError());
    caller<<<(s + 63) / 64, 64>>>(dv, dout, s);
    CHECK(cudaGetLastError());
  }
  CHECK(cudaDeviceSynchronize());
  // The data, so that the check can derive every launch's expected counts.
  FILE *f = fopen(getenv("KERNELS_DATA") ? getenv("KERNELS_DATA") : "kernels.data", "w");
  if (!f) return 1;
  for (int i = 0; i < n; i++) fprintf(f, "%d\n", h[i]);
  fclose(f);
  printf("kernels: 16 launches done\n");
  return 0;
}
