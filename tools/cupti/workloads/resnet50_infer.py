#!/usr/bin/env python3
"""torchvision's ResNet-50, inference (cuDNN convolutions, batch norm, pooling, a cuBLAS
classifier): batch 16 at 224x224, random weights (no download), a few passes."""
import sys
import torch
import torchvision

passes = int(sys.argv[1]) if len(sys.argv) > 1 else 3
torch.manual_seed(0)
torch.backends.cudnn.benchmark = False
model = torchvision.models.resnet50(weights=None).cuda().eval()
x = torch.randn(16, 3, 224, 224, device="cuda")
with torch.no_grad():
    for _ in range(passes):
        y = model(x)
torch.cuda.synchronize()
print(f"resnet50: {passes} passes, checksum {float(y.float().sum()):.3f}")
