#!/usr/bin/env python3
"""CuPy on NVIDIA's libraries: cuFFT transforms of several sizes, cuBLAS matrix products of
several shapes, and CuPy's own element-wise and reduction kernels between them."""
import sys
import cupy as cp

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
rs = cp.random.RandomState(0)
total = 0.0
for r in range(rounds):
    for n in (1 << 12, 1 << 16, 1 << 20):
        x = rs.standard_normal(n, dtype=cp.float32) + 1j * rs.standard_normal(n, dtype=cp.float32)
        total += float(cp.abs(cp.fft.ifft(cp.fft.fft(x))).sum())
    for m, k, n in ((256, 256, 256), (1024, 512, 2048), (4096, 4096, 64)):
        a = rs.standard_normal((m, k), dtype=cp.float32)
        b = rs.standard_normal((k, n), dtype=cp.float32)
        total += float(cp.tanh(a @ b).mean())
cp.cuda.runtime.deviceSynchronize()
print(f"cupy fft+blas: {rounds} rounds, checksum {total:.3f}")
