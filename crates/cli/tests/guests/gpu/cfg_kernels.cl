// OpenCL C kernels whose AMDGPU CFGs `bbv gpu cfg` is tested on (gpu_cfg_cli.rs): loops,
// if/else, a dense switch, a non-inlined function, predicated code, early exit.
__attribute__((noinline)) int weigh(int x) {
  int s = 0;
  for (int i = 0; i < x; i++) s += (i & 1) ? i * x : -i;
  return s;
}

__kernel void loops(__global int *a, int n) {
  int t = __builtin_amdgcn_workitem_id_x();
  if (t >= n) return;
  int s = 0;
  for (int i = 0; i < n; i++) {
    if (a[i] & 1) s += a[i];
    else s -= i;
  }
  a[t] = s + weigh(t & 7);
}

__kernel void dense_switch(__global int *a, int k) {
  int t = __builtin_amdgcn_workitem_id_x();
  int v;
  switch ((a[t] + k) & 7) {
    case 0: v = a[1] * 3; break;
    case 1: v = a[2] + 7; break;
    case 2: v = a[3] ^ 5; break;
    case 3: v = a[4] - 1; break;
    case 4: v = a[5] << 2; break;
    case 5: v = a[6] >> 1; break;
    case 6: v = a[7] | 9; break;
    default: v = a[8] & 3;
  }
  a[t] = (v > k) ? v - k : v + k;
}
