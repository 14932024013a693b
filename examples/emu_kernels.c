/* Host implementations of the examples' kernels, for running the demo on the emulated device
 * when the machine has no GPU (examples/demo.sh preloads this library only then). */
#include <stdint.h>

#include "cudaw_emu.h"

/* vector_add(const float *a, const float *b, float *c, int n) */
CUDAW_EMU_KERNEL(_Z10vector_addPKfS0_Pfi)
{
  const float *a = CUDAW_EMU_ARG(args, 0, const float *);
  const float *b = CUDAW_EMU_ARG(args, 1, const float *);
  float *c = CUDAW_EMU_ARG(args, 2, float *);
  int n = CUDAW_EMU_ARG(args, 3, int);
  CUDAW_EMU_FOR_EACH_THREAD(launch, block, thread)
  {
    int i = (int)(block.x * launch->block.x + thread.x);
    if (i < n) c[i] = a[i] + b[i];
  }
}
