#!/usr/bin/env python3
"""torchvision's ResNet-18, training steps (forward, backward, SGD with momentum: the backward
convolutions and the optimizer's element-wise kernels): batch 32 at 112x112, random data."""
import sys
import torch
import torchvision

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
torch.manual_seed(0)
torch.backends.cudnn.benchmark = False
model = torchvision.models.resnet18(weights=None, num_classes=100).cuda().train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(32, 3, 112, 112, device="cuda")
labels = torch.randint(0, 100, (32,), device="cuda")
for _ in range(steps):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), labels)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
print(f"resnet18 training: {steps} steps, loss {float(loss):.4f}")
