#!/usr/bin/env python3
"""CuPy under cudaw: array arithmetic, a custom RawKernel and cuBLAS (matmul) on fixed data.

Prints one line per part with a SHA-256 of the result's bytes, so that a run under cudaw can be
compared with a native one (the lines must be identical). Exits 1 if a result is wrong against
NumPy on the host.
"""
import hashlib
import sys

import cupy as cp
import numpy as np


def digest(a):
    return hashlib.sha256(cp.asnumpy(a).tobytes()).hexdigest()[:16]


def main():
    rng = np.random.default_rng(7)
    ok = True
    a_h = rng.standard_normal((1024, 1024)).astype(np.float32)
    b_h = rng.standard_normal((1024, 1024)).astype(np.float32)
    a, b = cp.asarray(a_h), cp.asarray(b_h)

    c = (a * 2.0 + b).sum(axis=1)
    good = np.allclose(cp.asnumpy(c), (a_h.astype(np.float64) * 2.0 + b_h).sum(axis=1),
                       rtol=1e-4, atol=1e-3)
    ok &= good
    print("arith", digest(c), "" if good else "WRONG")

    kernel = cp.RawKernel(r'''
    extern "C" __global__ void saxpy(float a, const float *x, float *y, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) y[i] = a * x[i] + y[i];
    }''', "saxpy")
    n = a.size
    y = b.ravel().copy()
    kernel(((n + 255) // 256,), (256,), (np.float32(3.0), a.ravel(), y, np.int32(n)))
    # The GPU fuses a * x + y (one rounding); compare in float64 with float32 tolerance.
    ref_y = 3.0 * a_h.ravel().astype(np.float64) + b_h.ravel()
    good = np.allclose(cp.asnumpy(y), ref_y, rtol=1e-6, atol=1e-6)
    ok &= good
    print("rawkernel", digest(y), "" if good else "WRONG")

    with cp.cuda.Device(0):
        m = a @ b  # cuBLAS SGEMM
    ref = a_h.astype(np.float64) @ b_h.astype(np.float64)
    err = np.linalg.norm(cp.asnumpy(m) - ref) / np.linalg.norm(ref)
    ok &= err < 1e-3
    print("cublas", digest(m), "relerr %.1e" % err, "" if err < 1e-3 else "WRONG")

    free, total = cp.cuda.runtime.memGetInfo()
    print("memGetInfo ok" if 0 < free <= total else "memGetInfo WRONG %d %d" % (free, total))
    ok &= 0 < free <= total
    print("cupy: ok" if ok else "cupy: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
