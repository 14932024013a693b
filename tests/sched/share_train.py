#!/usr/bin/env python3
"""A training job for the GPU-sharing benchmark: an MLP regression plus a ballast tensor.

The ballast makes the job hold a chosen share of the GPU (three jobs of ~55% cannot be resident
together); it is filled with a known pattern and checked at the end, and each step's loss is
printed as an exact hexadecimal float, so that a run under `cudaw run --share` (swapped out and
in by cudawd) can be compared bit for bit with a solo run (--record FILE, then --check FILE).
--calibrate S prints how many steps make about S seconds of GPU work.
"""
import argparse
import math
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch
import torch.nn as nn
import torch.nn.functional as F

BLOCK = 1 << 20


def fill_ballast(ballast):
    blocks = ballast.numel() // BLOCK
    pattern = (torch.arange(blocks, device=ballast.device) % 251).to(torch.uint8)
    ballast.view(blocks, BLOCK).copy_(pattern.unsqueeze(1).expand(blocks, BLOCK))
    return pattern


def ballast_intact(ballast, pattern):
    blocks = ballast.numel() // BLOCK
    sample = ballast.view(blocks, BLOCK)[:, ::4096]
    return bool((sample == pattern.unsqueeze(1)).all().item())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--width", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--ballast-gib", type=float, default=0.0)
    ap.add_argument("--record", metavar="FILE")
    ap.add_argument("--check", metavar="FILE")
    ap.add_argument("--calibrate", type=float, metavar="SECONDS")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    t_start = time.perf_counter()
    ballast = pattern = None
    if a.ballast_gib > 0:
        ballast = torch.empty(int(a.ballast_gib * (1 << 30)) // BLOCK * BLOCK, dtype=torch.uint8,
                              device=dev)
        pattern = fill_ballast(ballast)
    t_ballast = time.perf_counter()
    layers = []
    for _ in range(a.layers):
        layers += [nn.Linear(a.width, a.width), nn.ReLU()]
    model = nn.Sequential(*layers[:-1]).to(dev)
    teacher = torch.randn(a.width, a.width, device=dev) / math.sqrt(a.width)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1000 + a.seed)

    def step():
        x = torch.randn(a.batch, a.width, device=dev, generator=gen)
        opt.zero_grad(set_to_none=False)
        loss = F.mse_loss(model(x), x @ teacher)
        loss.backward()
        opt.step()
        return loss.item()

    if a.calibrate:
        times = []
        for _ in range(12):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        per_step = sorted(times[2:])[len(times[2:]) // 2]
        print("STEPS %d (%.4f s per step)" % (max(1, round(a.calibrate / per_step)), per_step))
        return 0

    losses = []
    t_train = time.perf_counter()
    for i in range(a.steps):
        value = step()
        losses.append(value.hex())
        if i % 50 == 0 or i == a.steps - 1:
            print("step %d loss %s (%.6f)" % (i, value.hex(), value), flush=True)
    t_end = time.perf_counter()
    if ballast is not None:
        ok = ballast_intact(ballast, pattern)
        print("ballast %.1f GiB: %s" % (ballast.numel() / (1 << 30), "intact" if ok else "CORRUPTED"))
        if not ok:
            return 1
    print("times: ballast %.2f s, training %.2f s, total %.2f s; max allocated %.2f GiB"
          % (t_ballast - t_start, t_end - t_train, t_end - t_start,
             torch.cuda.max_memory_allocated() / (1 << 30)))
    if a.record:
        with open(a.record, "w") as f:
            f.write("\n".join(losses) + "\n")
    if a.check:
        with open(a.check) as f:
            ref = f.read().split()
        if ref != losses:
            bad = next((i for i, (r, l) in enumerate(zip(ref, losses)) if r != l),
                       min(len(ref), len(losses)))
            print("check: FAILED: losses differ from %s at step %d" % (a.check, bad))
            return 1
        print("check: ok: %d losses identical to %s" % (len(losses), a.check))
    return 0


if __name__ == "__main__":
    sys.exit(main())
