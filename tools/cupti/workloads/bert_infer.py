#!/usr/bin/env python3
"""Hugging Face transformers' BERT-base encoder, inference (attention, GELU, layer norm, cuBLAS
matrix products): batch 8, 128 tokens, random weights from the default configuration (no
download), a few passes."""
import sys
import torch
from transformers import BertConfig, BertModel

passes = int(sys.argv[1]) if len(sys.argv) > 1 else 3
torch.manual_seed(0)
model = BertModel(BertConfig()).cuda().eval()
ids = torch.randint(0, 30000, (8, 128), device="cuda")
with torch.no_grad():
    for _ in range(passes):
        out = model(input_ids=ids).last_hidden_state
torch.cuda.synchronize()
print(f"bert: {passes} passes, checksum {float(out.float().sum()):.3f}")
