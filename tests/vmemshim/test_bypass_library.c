/* Description: regression for issue 10's silent wrong result: under CUDAW_VMEM=translate a
 * library that launches its kernels without libcudart (cuSPARSE in NVIDIA's conjugateGradientUM
 * sample, which gets a cudaMalloc'd buffer) received a virtual pointer; its kernel faulted, and
 * the program, which checks no status, printed a different result. Here the library is a
 * stand-in (fake_bypassing_library.c) that writes through the emulated runtime directly.
 * "linked": the library is loaded at start; cudaw must not virtualise (the write lands and reads
 * back). "late": it is dlopen'd after a virtual allocation; the next allocation must be refused
 * (cudaErrorNotSupported) with a message naming it. */
#include "vmemshim.h"

typedef int (*fill_fn)(void *, size_t, int);

#ifdef BYPASS_LINKED
int fake_library_fill(void *device, size_t bytes, int value);
#else
static int fake_library_fill(void *device, size_t bytes, int value)
{
  (void)device, (void)bytes, (void)value;
  test_fail("built without the library: run the linked variant");
}
#endif

static void linked(void)
{
  unsigned char *p, back[4096];
  CUDA_OK(cudaMalloc((void **)&p, sizeof back));
  CUDA_OK(cudaMemset(p, 0, sizeof back));
  int status = fake_library_fill(p, sizeof back, 7); /* a program like the sample ignores it */
  CUDA_OK(cudaMemcpy(back, p, sizeof back, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < sizeof back; i++)
    if (back[i] != 7)
      test_fail("byte %zu is %u after the library wrote 7 (its status %d): a wrong result", i,
                back[i], status);
  CUDA_OK(cudaFree(p));
  printf("linked: the library's write landed; ok\n");
}

static void late(const char *library)
{
  void *first;
  CUDA_OK(cudaMalloc(&first, 4096));
  void *lib = dlopen(library, RTLD_NOW);
  if (!lib) test_fail("dlopen %s: %s", library, dlerror());
  void *second = NULL;
  cudaError_t e = cudaMalloc(&second, 4096);
  if (translate_policy()) {
    CHECK(e == cudaErrorNotSupported, "allocation after a late bypassing library: %s",
          cudaGetErrorName(e));
    (void)cudaGetLastError();
  } else {
    CHECK(e == cudaSuccess, "%s", cudaGetErrorName(e));
    CUDA_OK(cudaFree(second));
  }
  CUDA_OK(cudaFree(first));
  printf("late: ok\n");
}

int main(int argc, char **argv)
{
  if (argc > 2 && strcmp(argv[1], "late") == 0) late(argv[2]);
  else linked();
  return 0;
}
