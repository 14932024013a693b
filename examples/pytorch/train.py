#!/usr/bin/env python3
"""Deterministic PyTorch training run for cudaw: a small convnet on synthetic data.

Prints one line per step with the loss as an exact hexadecimal float, so that a run under cudaw
can be compared bit for bit with a native run (--record FILE, then --check FILE).

Modes: eager (default), --graph (the step captured once with torch.cuda.CUDAGraph and replayed),
--compile (torch.compile: Triton kernels launched through the driver). The allocator backend is
PyTorch's choice; PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync selects the stream-ordered one.
--pause-file FILE: after each step, wait while FILE exists (lets a driver script pause the job at
a known step without changing its results); --step-delay S sleeps S seconds after each step.
"""
import argparse
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 8 * 8, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def make_data(steps, batch, device):
    g = torch.Generator().manual_seed(1234)
    xs = torch.randn(steps, batch, 3, 32, 32, generator=g)
    ys = torch.randint(0, 10, (steps, batch), generator=g)
    return xs.to(device), ys.to(device)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--graph", action="store_true", help="capture one step in a CUDA graph, replay it")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (Triton)")
    ap.add_argument("--record", metavar="FILE", help="write the loss sequence to FILE")
    ap.add_argument("--check", metavar="FILE", help="compare the loss sequence with FILE")
    ap.add_argument("--pause-file", metavar="FILE", help="after each step, wait while FILE exists")
    ap.add_argument("--step-delay", type=float, default=0.0)
    ap.add_argument("--time", action="store_true", help="print the median step time")
    ap.add_argument("--ballast-gib", type=float, default=0.0,
                    help="also hold this many GiB of random data on the GPU, checked at the end")
    a = ap.parse_args()

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    model = Net().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    xs, ys = make_data(a.steps, a.batch, dev)
    ballast = None
    if a.ballast_gib:
        ballast = torch.empty(int(a.ballast_gib * 2**30) // 4, device=dev).uniform_()
        ballast_sum = ballast.sum(dtype=torch.float64).item()
    fwd = torch.compile(model) if a.compile else model

    def step(x, y):
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()
        return loss

    losses, times = [], []
    if a.graph:
        static_x, static_y = xs[0].clone(), ys[0].clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up on a side stream, as PyTorch requires
            for _ in range(3):
                step(static_x, static_y)
        torch.cuda.current_stream().wait_stream(s)
        # Reset to a known state so that the replayed sequence is deterministic.
        torch.manual_seed(0)
        fresh = Net().to(dev)
        with torch.no_grad():
            for p, q in zip(model.parameters(), fresh.parameters()):
                p.copy_(q)
        for st in opt.state.values():
            st["momentum_buffer"].zero_()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_loss = step(static_x, static_y)

        def run(i):
            static_x.copy_(xs[i])
            static_y.copy_(ys[i])
            graph.replay()
            return static_loss
    else:
        def run(i):
            return step(xs[i], ys[i])

    for i in range(a.steps):
        t0 = time.perf_counter()
        loss = run(i)
        value = loss.item()  # synchronises
        times.append(time.perf_counter() - t0)
        losses.append(value.hex())
        print("step %d loss %s (%.6f)" % (i, value.hex(), value), flush=True)
        if a.step_delay:
            time.sleep(a.step_delay)
        while a.pause_file and os.path.exists(a.pause_file):
            time.sleep(0.05)

    if ballast is not None:
        same = ballast.sum(dtype=torch.float64).item() == ballast_sum
        print("ballast: %s (%.1f GiB)" % ("ok" if same else "FAILED: changed", a.ballast_gib))
        if not same:
            return 1
    if a.time:
        ts = sorted(times[len(times) // 5:]) or sorted(times)
        print("median step time %.3f ms" % (1e3 * ts[len(ts) // 2]))
    if a.record:
        with open(a.record, "w") as f:
            f.write("\n".join(losses) + "\n")
    if a.check:
        with open(a.check) as f:
            ref = f.read().split()
        if ref != losses:
            bad = next((i for i, (r, l) in enumerate(zip(ref, losses)) if r != l), min(len(ref), len(losses)))
            print("check: FAILED: losses differ from %s at step %d" % (a.check, bad))
            return 1
        print("check: ok: %d losses identical to %s" % (len(losses), a.check))
    return 0


if __name__ == "__main__":
    sys.exit(main())
