#!/usr/bin/env python3
"""A JAX (XLA) job to pause and resume under cudaw: a jitted fixed-point iteration with a matrix
product, plus a ballast array holding a known pattern.

usage: loop.py [steps=3000] [ballast MiB=1024] [report every=100]
Prints "allocated N bytes", a progress line every few steps and, at the end, a checksum of every
array it holds: a paused and resumed run must print the same checksum as an uninterrupted one
(tests/gpu/ckpt_pause.sh compares them). Run with XLA_PYTHON_CLIENT_PREALLOCATE=false to make XLA
allocate as it goes instead of taking 75% of the GPU up front.
XLA's autotuning is turned off (--xla_gpu_autotune_level=0): it may pick another GEMM algorithm
in each process, and then two uninterrupted runs already end with different checksums (seen on
the H100: 93a33ad7... and 1e9a5f61... natively).
"""
import hashlib
import os
import sys

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0").strip()

import jax
import jax.numpy as jnp
import numpy as np

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
ballast_mib = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
every = int(sys.argv[3]) if len(sys.argv) > 3 else 100

n = 1024
rng = np.random.default_rng(11)
w = jax.device_put((rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32))
x = jax.device_put(rng.standard_normal((n, n)).astype(np.float32))
ballast = jnp.arange((ballast_mib << 20) // 4, dtype=jnp.uint32) * jnp.uint32(2654435761)


@jax.jit
def step(w, x):
    return jnp.tanh(jnp.dot(w, x, precision=jax.lax.Precision.HIGHEST)) * jnp.float32(0.999)


x = step(w, x).block_until_ready()
held = w.nbytes + x.nbytes + ballast.nbytes
print("jax loop: allocated %d bytes" % held, flush=True)
for s in range(1, steps + 1):
    x = step(w, x)
    if s % every == 0 or s == steps:
        print("jax loop: step %d/%d probe %.6f" % (s, steps, float(x[7, 7])), flush=True)

h = hashlib.sha256()
for a in (w, x, ballast):
    h.update(np.asarray(a).tobytes())
print("jax loop: done steps=%d checksum=%s" % (steps, h.hexdigest()[:16]), flush=True)
