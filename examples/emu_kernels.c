/* Host implementations of the examples' kernels, so that the examples really compute on the
 * emulated device when the machine has no GPU. The emulated device finds a kernel by the
 * exported symbol cudaw_emu_kernel_<mangled name> (tests/emu/cudaw_emu.h); examples/demo.sh
 * preloads this library for that. Each computes what its CUDA kernel computes, cell for cell,
 * over the cells the launch covers, and checks its arguments against the device's memory. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "cudaw_emu.h"

/* cudaw_emu_access, from the emulated runtime cudaw loaded (CUDAW_REAL_CUDART, opened with
 * RTLD_LOCAL, so not linkable from here): 0, or -EFAULT where a GPU would fault. */
static int (*emu_access)(const struct cudaw_emu_launch *, const void *, size_t);
static pthread_once_t emu_access_once = PTHREAD_ONCE_INIT;

static void find_emu_access(void)
{
  const char *real = getenv("CUDAW_REAL_CUDART");
  void *emu = real ? dlopen(real, RTLD_NOW | RTLD_NOLOAD) : NULL;
  void *fn = emu ? dlsym(emu, "cudaw_emu_access") : NULL;
  *(void **)&emu_access = fn; /* object to function pointer, as dlsym intends */
}

static int access_ok(const struct cudaw_emu_launch *launch, const void *p, size_t size)
{
  pthread_once(&emu_access_once, find_emu_access);
  return emu_access ? emu_access(launch, p, size) : 0;
}
#define cudaw_emu_access access_ok

/* vector_add(const float *a, const float *b, float *c, int n) */
CUDAW_EMU_KERNEL(_Z10vector_addPKfS0_Pfi)
{
  const float *a = CUDAW_EMU_ARG(args, 0, const float *);
  const float *b = CUDAW_EMU_ARG(args, 1, const float *);
  float *c = CUDAW_EMU_ARG(args, 2, float *);
  int n = CUDAW_EMU_ARG(args, 3, int);
  if (n > 0 && (cudaw_emu_access(launch, a, (size_t)n * sizeof *a) ||
                cudaw_emu_access(launch, b, (size_t)n * sizeof *b) ||
                cudaw_emu_access(launch, c, (size_t)n * sizeof *c)))
    return;
  CUDAW_EMU_FOR_EACH_THREAD(launch, block, thread)
  {
    int i = (int)(block.x * launch->block.x + thread.x);
    if (i < n) c[i] = a[i] + b[i];
  }
}

/* heat.cu: step(const float *in, float *out, int n), one Jacobi step of the 5-point stencil.
 * Looping over rows and columns rather than blocks and threads gives the same cells (each cell
 * depends only on `in`) at a speed that lets the demo run in seconds. */
CUDAW_EMU_KERNEL(_Z4stepPKfPfi)
{
  const float *in = CUDAW_EMU_ARG(args, 0, const float *);
  float *out = CUDAW_EMU_ARG(args, 1, float *);
  int n = CUDAW_EMU_ARG(args, 2, int);
  if (n <= 0) return;
  size_t bytes = (size_t)n * (size_t)n * sizeof *in;
  if (cudaw_emu_access(launch, in, bytes) || cudaw_emu_access(launch, out, bytes)) return;
  size_t width = (size_t)launch->grid.x * launch->block.x;
  size_t height = (size_t)launch->grid.y * launch->block.y;
  size_t columns = width < (size_t)n ? width : (size_t)n;
  size_t rows = height < (size_t)n ? height : (size_t)n;
  for (size_t y = 0; y < rows; y++)
    for (size_t x = 0; x < columns; x++) {
      size_t i = y * (size_t)n + x;
      if (x == 0 || y == 0 || x == (size_t)n - 1 || y == (size_t)n - 1) {
        out[i] = in[i]; /* fixed boundary */
        continue;
      }
      float lap = in[i - 1] + in[i + 1] + in[i - (size_t)n] + in[i + (size_t)n] - 4.0f * in[i];
      out[i] = in[i] + 0.2f * lap; /* checksums are compared between runs on one device */
    }
}

/* heat.cu: fill_ballast(uint64_t *p, size_t words), a grid-stride loop over every word. */
CUDAW_EMU_KERNEL(_Z12fill_ballastPmm)
{
  uint64_t *p = CUDAW_EMU_ARG(args, 0, uint64_t *);
  size_t words = CUDAW_EMU_ARG(args, 1, size_t);
  if (words && cudaw_emu_access(launch, p, words * sizeof *p)) return;
  for (size_t i = 0; i < words; i++) p[i] = i * 0x9E3779B97F4A7C15ull;
}
