// Description: the driver API on a real GPU, reached as PyTorch, NCCL and static runtimes reach
// it (cudaGetDriverEntryPointByVersion: under cudaw, its driver layer's wrappers), on memory from
// cudaMalloc (virtual under CUDAW_VMEM=translate): cuMemcpy2D with device addresses inside its
// structure, cuLaunchKernel with pointer and struct-with-pointer parameters, and a driver graph
// whose kernel node is launched three times. Under translate each of these faults or copies the
// wrong bytes unless cudaw translated the addresses; natively and under remap it must agree.
#include <cuda.h>

#include <cstring>
#include <vector>

#include "gpu_common.h"

__global__ void axpy(float a, const float *x, float *y, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}

struct Pair { const float *from; float *to; int n; };
extern "C" __global__ void copy_pair(Pair p)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) p.to[i] = p.from[i] * 2.0f;
}

#define DRIVER(name) reinterpret_cast<decltype(&name)>(driver_entry(#name, CUDA_VERSION))
#define CU_CHECK(call)                                                                   \
  do {                                                                                   \
    CUresult r_ = (call);                                                                \
    if (r_ != CUDA_SUCCESS) {                                                            \
      fprintf(stderr, "FAIL %s:%d: %s: CUresult %d\n", __FILE__, __LINE__, #call, (int)r_); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

int main()
{
  require_gpu();
  const int n = 1 << 20, width = 1000, height = 300;
  auto memcpy2d = DRIVER(cuMemcpy2D);
  auto launch = DRIVER(cuLaunchKernel);
  auto graph_create = DRIVER(cuGraphCreate);
  auto add_kernel_node = DRIVER(cuGraphAddKernelNode);
  auto instantiate = DRIVER(cuGraphInstantiateWithFlags);
  auto graph_launch = DRIVER(cuGraphLaunch);
  auto stream_sync = DRIVER(cuStreamSynchronize);

  // 1. cuMemcpy2D host -> pitched device -> host.
  std::vector<unsigned char> rect(width * height), back(width * height);
  for (size_t i = 0; i < rect.size(); i++) rect[i] = (unsigned char)(i * 31 + 7);
  void *pitched;
  size_t pitch;
  CUDA_CHECK(cudaMallocPitch(&pitched, &pitch, width, height));
  CUDA_MEMCPY2D up = {};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = rect.data();
  up.srcPitch = width;
  up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  up.dstDevice = (CUdeviceptr)pitched;
  up.dstPitch = pitch;
  up.WidthInBytes = width;
  up.Height = height;
  CU_CHECK(memcpy2d(&up));
  CUDA_MEMCPY2D down = {};
  down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  down.srcDevice = (CUdeviceptr)pitched;
  down.srcPitch = pitch;
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.dstHost = back.data();
  down.dstPitch = width;
  down.WidthInBytes = width;
  down.Height = height;
  CU_CHECK(memcpy2d(&down));
  if (memcmp(rect.data(), back.data(), rect.size()) != 0) {
    fprintf(stderr, "FAIL: cuMemcpy2D round trip changed the bytes\n");
    return 1;
  }

  // 2. cuLaunchKernel: pointers, and a struct holding pointers.
  std::vector<float> hx(n), hy(n);
  for (int i = 0; i < n; i++) hx[i] = (float)(i % 1000) * 0.5f, hy[i] = (float)(i % 7);
  float *x, *y, *z;
  CUDA_CHECK(cudaMalloc(&x, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&y, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&z, n * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(y, hy.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  cudaFunction_t f_axpy, f_pair;
  CUDA_CHECK(cudaGetFuncBySymbol(&f_axpy, (const void *)axpy));
  CUDA_CHECK(cudaGetFuncBySymbol(&f_pair, (const void *)copy_pair));
  float a = 3.0f;
  int count = n;
  void *axpy_args[] = {&a, &x, &y, &count};
  unsigned blocks = (n + 255) / 256;
  CU_CHECK(launch((CUfunction)f_axpy, blocks, 1, 1, 256, 1, 1, 0, nullptr, axpy_args, nullptr));
  Pair pair = {y, z, n};
  void *pair_args[] = {&pair};
  CU_CHECK(launch((CUfunction)f_pair, blocks, 1, 1, 256, 1, 1, 0, nullptr, pair_args, nullptr));
  CUDA_CHECK(cudaDeviceSynchronize());

  // 3. A driver graph with one axpy node, launched three times.
  CUgraph graph;
  CU_CHECK(graph_create(&graph, 0));
  CUDA_KERNEL_NODE_PARAMS node = {};
  node.func = (CUfunction)f_axpy;
  node.gridDimX = blocks, node.gridDimY = 1, node.gridDimZ = 1;
  node.blockDimX = 256, node.blockDimY = 1, node.blockDimZ = 1;
  node.kernelParams = axpy_args;
  CUgraphNode added;
  CU_CHECK(add_kernel_node(&added, graph, nullptr, 0, &node));
  CUgraphExec exec;
  CU_CHECK(instantiate(&exec, graph, 0));
  for (int i = 0; i < 3; i++) CU_CHECK(graph_launch(exec, nullptr));
  CU_CHECK(stream_sync(nullptr));

  CUDA_CHECK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  std::vector<float> hz(n);
  CUDA_CHECK(cudaMemcpy(hz.data(), z, n * sizeof(float), cudaMemcpyDeviceToHost));
  // Independent of the GPU: y = y0 + 4 a x after one launch and three graph launches.
  for (int i = 0; i < n; i++) {
    float y1 = (float)(i % 7) + a * hx[i];
    float expect_y = y1 + a * hx[i] + a * hx[i] + a * hx[i];
    if (hz[i] != y1 * 2.0f || hy[i] != expect_y) {
      fprintf(stderr, "FAIL: element %d: y %g (expected %g), z %g (expected %g)\n", i, hy[i],
              expect_y, hz[i], y1 * 2.0f);
      return 1;
    }
  }
  printf("driver_api: cuMemcpy2D %dx%d, cuLaunchKernel (pointers, struct), graph x3: "
         "y %016llx z %016llx\n", width, height,
         (unsigned long long)checksum(hy.data(), n * sizeof(float)),
         (unsigned long long)checksum(hz.data(), n * sizeof(float)));
  return 0;
}
