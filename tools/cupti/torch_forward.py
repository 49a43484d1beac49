#!/usr/bin/env python3
"""A PyTorch model's forward passes on the GPU (convolutions, matrix multiplies, softmax through
cuBLAS and cuDNN kernels): the real workload of scripts/check-gpu. Prints the forward passes'
own time, measured with CUDA events after a warm-up pass."""
import sys
import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
    torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(8), torch.nn.Flatten(),
    torch.nn.Linear(64 * 8 * 8, 512), torch.nn.ReLU(),
    torch.nn.Linear(512, 10), torch.nn.Softmax(dim=1),
).cuda().eval()
x = torch.randn(64, 3, 64, 64, device="cuda")
with torch.no_grad():
    model(x)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        y = model(x)
    end.record()
    torch.cuda.synchronize()
print(f"forward passes: {steps} in {start.elapsed_time(end):.3f} ms; checksum {float(y.sum()):.4f}")
