// Kernels whose static CFGs `bbv gpu cfg` is tested on (crates/cli/tests/gpu_cfg_cli.rs): loops,
// if/else, predicated code, a non-inlined device function, early exit. The dense switch that
// compiles to BRX is jump_table.ptx (nvcc emits compare trees for C++ switches).
__device__ __noinline__ int weigh(int x) {
  int s = 0;
  for (int i = 0; i < x; i++) s += (i & 1) ? i * x : -i;
  return s;
}

extern "C" __global__ void loops(int *a, int n) {
  int t = threadIdx.x + blockIdx.x * blockDim.x;
  if (t >= n) return;  // early exit
  int s = 0;
  for (int i = 0; i < n; i++) {
    if (a[i] & 1) s += a[i];
    else s -= i;
  }
  a[t] = s + weigh(t & 7);
}

extern "C" __global__ void predicated(int *a, int k) {
  int t = threadIdx.x;
  int v = a[t];
  v = (v > k) ? v - k : v + k;  // a select or predicated moves, no branch
  if (v & 4) a[t + 1] = v;
  a[t] = v * 3;
}

extern "C" __global__ void branches(int *a, int k) {
  int t = threadIdx.x;
  int v = a[t];
  if (v > k) {
    for (int i = 0; i < k; i++) v = v * 7 + i;
  } else if (v < -k) {
    v = weigh(v & 15);
  } else {
    while (v < k) v += 3;
  }
  a[t] = v;
}
