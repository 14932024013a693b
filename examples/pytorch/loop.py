#!/usr/bin/env python3
"""A PyTorch job to pause and resume under cudaw: a fixed-point iteration with matrix products
(cuBLAS) and elementwise kernels, plus a ballast tensor of a known pattern, as big as asked (a
job of tens of GiB is what people pause and swap).

usage: loop.py [steps=3000] [ballast MiB=1024] [report every=100]
Prints "allocated N bytes", a progress line every few steps and, at the end, a checksum of every
tensor it holds: a paused and resumed run must print the same checksum as an uninterrupted one
(tests/gpu/ckpt_pause.sh compares them). The ballast's checksum is taken on the GPU, piece by
piece, each piece weighted by its index, so that a large ballast costs no host copy and a piece
restored in the wrong place changes it. Deterministic: fixed data, no atomics.
"""
import hashlib
import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
ballast_mib = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
every = int(sys.argv[3]) if len(sys.argv) > 3 else 100

dev = torch.device("cuda")
n = 1024
g = torch.Generator().manual_seed(11)
w = (torch.randn(n, n, generator=g) / n ** 0.5).to(dev)
x = torch.randn(n, n, generator=g).to(dev)
elements = (ballast_mib << 20) // 8
ballast = torch.arange(elements, dtype=torch.int64, device=dev)
ballast.mul_(0x9E3779B97F4A7C15 - (1 << 64))  # wraps: a pattern that differs in every byte
torch.cuda.synchronize()
held = w.numel() * 4 + x.numel() * 4 + ballast.numel() * 8
print("pytorch loop: allocated %d bytes" % held, flush=True)

for s in range(1, steps + 1):
    x = torch.tanh(w @ x) * 0.999
    if s % every == 0 or s == steps:
        print("pytorch loop: step %d/%d probe %.6f" % (s, steps, float(x[7, 7])), flush=True)

h = hashlib.sha256()
for t in (w, x):
    h.update(t.cpu().numpy().tobytes())
piece = 1 << 26
sums = torch.stack([(ballast[i:i + piece] * (i // piece + 1)).sum()
                    for i in range(0, elements, piece)]) if elements else torch.zeros(1, dtype=torch.int64)
h.update(sums.cpu().numpy().tobytes())
print("pytorch loop: done steps=%d checksum=%s" % (steps, h.hexdigest()[:16]), flush=True)
