// Kernels that tests/checkpoint/e2e_driver.c loads as a cubin through cuModuleLoadData, as CuPy
// and Triton load theirs: one C++ kernel (pointer kinds from its mangled name) and one extern "C"
// kernel taking a struct that holds a pointer (found by the conservative scan). The emulated
// device runs the test's host implementations of them; the cubin gives cudaw their layouts.
struct span {
  float *data;
  int n;
};

__global__ void axpy(float a, const float *x, float *y, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void scale_span(span s, float k)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < s.n) s.data[i] *= k;
}
