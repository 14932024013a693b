/* Shared by the vmem shim tests: they link against cudaw's libcudart, which forwards to the
 * emulated device named by CUDAW_REAL_CUDART; CUDAW_VMEM picks the policy per test. */
#ifndef CUDAW_VMEMSHIM_H
#define CUDAW_VMEMSHIM_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "test.h"

#define CUDA_OK(call)                                                                        \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) test_fail("%s: %s", #call, cudaGetErrorName(e_));                 \
  } while (0)

/* The call must fail with exactly this error, and cudaGetLastError must report it once. */
#define CUDA_FAILS(call, expected)                                                           \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != (expected))                                                                    \
      test_fail("%s: %s, expected %s", #call, cudaGetErrorName(e_), cudaGetErrorName(expected)); \
    cudaError_t l_ = cudaGetLastError();                                                     \
    if (l_ != (expected))                                                                    \
      test_fail("%s: cudaGetLastError %s, expected %s", #call, cudaGetErrorName(l_),         \
                cudaGetErrorName(expected));                                                 \
    CHECK_EQ(cudaGetLastError(), cudaSuccess);                                               \
  } while (0)

/* The emulated device library (the same instance cudaw loaded), for its test hooks. */
static inline void *emu_library(void)
{
  const char *path = getenv("CUDAW_REAL_CUDART");
  if (!path) test_skip("CUDAW_REAL_CUDART is not set (run through ctest)");
  void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!lib) lib = dlopen(path, RTLD_NOW);
  if (!lib) test_fail("dlopen %s: %s", path, dlerror());
  return lib;
}

static inline void *emu_symbol(const char *name)
{
  void *sym = dlsym(emu_library(), name);
  if (!sym) test_fail("the emulated device lacks %s", name);
  return sym;
}

/* Whether cudaw virtualises allocations in this run (CUDAW_VMEM is not off). */
static inline int vmem_expected(void)
{
  const char *policy = getenv("CUDAW_VMEM");
  return !policy || strcmp(policy, "off") != 0;
}

static inline int translate_policy(void)
{
  const char *policy = getenv("CUDAW_VMEM");
  return policy && strcmp(policy, "translate") == 0;
}

/* Under translate, allocations sit at their real address (CUDAW_VMEM_IDENTITY, default on, off
 * with CUDAW_CHECK=1). */
static inline int identity_expected(void)
{
  const char *identity = getenv("CUDAW_VMEM_IDENTITY"), *check = getenv("CUDAW_CHECK");
  return translate_policy() && !(identity && strcmp(identity, "0") == 0) &&
         !(check && strcmp(check, "1") == 0);
}

static inline void fill(void *buffer, size_t size, unsigned seed)
{
  unsigned char *p = (unsigned char *)buffer;
  for (size_t i = 0; i < size; i++) p[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 8));
}

#endif
