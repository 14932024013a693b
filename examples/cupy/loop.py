#!/usr/bin/env python3
"""A CuPy job to pause and resume under cudaw: a fixed-point iteration with cuBLAS matrix products,
a RawKernel and elementwise kernels, plus a ballast array holding a known pattern.

usage: loop.py [steps=3000] [ballast MiB=1024] [report every=100]
Prints "allocated N bytes", a progress line every few steps and, at the end, a checksum of every
array it holds: a paused and resumed run must print the same checksum as an uninterrupted one
(tests/gpu/ckpt_pause.sh compares them). Deterministic: fixed data, no atomics.
"""
import hashlib
import sys

import cupy as cp
import numpy as np

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
ballast_mib = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
every = int(sys.argv[3]) if len(sys.argv) > 3 else 100

n = 1024
rng = np.random.default_rng(11)
w = cp.asarray((rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32))
x = cp.asarray(rng.standard_normal((n, n)).astype(np.float32))
ballast = cp.arange((ballast_mib << 20) // 8, dtype=cp.uint64) * cp.uint64(0x9E3779B97F4A7C15)
damp = cp.RawKernel(r'''
extern "C" __global__ void damp(float *x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __fmul_rn(x[i], s);
}''', "damp")
cp.cuda.Device().synchronize()
held = w.nbytes + x.nbytes + ballast.nbytes
print("cupy loop: allocated %d bytes" % held, flush=True)

for s in range(1, steps + 1):
    x = cp.tanh(w @ x)
    damp(((x.size + 255) // 256,), (256,), (x, np.float32(0.999), np.int32(x.size)))
    if s % every == 0 or s == steps:
        print("cupy loop: step %d/%d probe %.6f" % (s, steps, float(x[7, 7])), flush=True)

h = hashlib.sha256()
for a in (w, x, ballast):
    h.update(cp.asnumpy(a).tobytes())
print("cupy loop: done steps=%d checksum=%s" % (steps, h.hexdigest()[:16]), flush=True)
