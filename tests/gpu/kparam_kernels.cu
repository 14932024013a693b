// Description: the kernels of tests/kparam/kernels.cuh on a real GPU. Default mode: launched
// through <<<>>>, cudaLaunchKernel, cudaLaunchKernelExC and a graph kernel node, results printed
// as checksums; compare.sh runs it natively and under cudaw (CUDAW_VMEM=translate or remap) and
// the outputs must be identical. --layouts: cudaw's parameter layouts (kparam, parsing this
// program's own .nv_fatbin) must agree, parameter by parameter, with the driver's
// cuFuncGetParamInfo for every kernel. Exit 77 without a GPU.
#include <cuda.h>
#include <cuda_runtime.h>
#include <string.h>

#include "elf_section.h"
#include "gpu_common.h"
#include "kernels.cuh"
#include "kparam.h"

enum path { CHEVRON, LAUNCH, LAUNCH_EX, GRAPH, PATH_COUNT };
static const char *const path_names[] = {"<<<>>>", "cudaLaunchKernel", "cudaLaunchKernelExC",
                                          "graph"};

static void launch(enum path p, const void *f, void **args)
{
  if (p == LAUNCH) {
    CUDA_CHECK(cudaLaunchKernel(f, dim3(1), dim3(1), args, 0, 0));
  } else if (p == LAUNCH_EX) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(1);
    config.blockDim = dim3(1);
    CUDA_CHECK(cudaLaunchKernelExC(&config, f, args));
  } else {
    cudaGraph_t g;
    cudaGraphNode_t n;
    cudaGraphExec_t e;
    struct cudaKernelNodeParams kp = {};
    kp.func = (void *)f;
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(1);
    kp.kernelParams = args;
    CUDA_CHECK(cudaGraphCreate(&g, 0));
    CUDA_CHECK(cudaGraphAddKernelNode(&n, g, NULL, 0, &kp));
    CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
    CUDA_CHECK(cudaGraphLaunch(e, 0));
    CUDA_CHECK(cudaGraphExecDestroy(e));
    CUDA_CHECK(cudaGraphDestroy(g));
  }
}

#define RUN(p, chevron, f, ...)                                                                \
  do {                                                                                         \
    if ((p) == CHEVRON) {                                                                      \
      chevron;                                                                                 \
    } else {                                                                                   \
      void *args_[] = {__VA_ARGS__};                                                           \
      launch(p, (const void *)(f), args_);                                                     \
    }                                                                                          \
    CUDA_CHECK(cudaGetLastError());                                                            \
  } while (0)

static void results(void)
{
  const size_t words = 64;
  float host[words];
  for (size_t i = 0; i < words; i++) host[i] = (float)i + 0.5f;
  for (int p = 0; p < PATH_COUNT; p++) {
    float *a, *b, *q;
    double *dq, *dout;
    int *iout;
    CUDA_CHECK(cudaMalloc(&a, words * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&b, words * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&q, words * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dq, words * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&dout, words * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&iout, words * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(b, host, sizeof host, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(q, host, sizeof host, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dq, 0, words * sizeof(double)));
    CUDA_CHECK(cudaMemset(dout, 0, words * sizeof(double)));
    CUDA_CHECK(cudaMemset(iout, 0, words * sizeof(int)));
    enum path path = (enum path)p;
    const int *ci = (const int *)q;
    unsigned char *u = (unsigned char *)b;
    void *v = q;
    RUN(path, (pointers<<<1, 1>>>(a, b, ci, v, u)), pointers, &a, &b, &ci, &v, &u);
    int n = 3;
    char c = 2;
    RUN(path, (mixed<<<1, 1>>>(n, a, c, dq)), mixed, &n, &a, &c, &dq);
    S1 s1 = {1, a, 3, dq};
    S2 s2 = {9, {0, 1, 5}, {b, q}, 100};
    int x = 7;
    RUN(path, (structs<<<1, 1>>>(s1, x, s2)), structs, &s1, &x, &s2);
    static Big big_arg;
    big_arg.b[4999] = 11;
    big_arg.p = q;
    RUN(path, (big<<<1, 1>>>(big_arg, iout)), big, &big_arg, &iout);
    float fv = 7.5f;
    int idx = 9;
    RUN(path, (fill<float><<<1, 1>>>(a, fv, idx)), fill<float>, &a, &fv, &idx);
    double dv = 9.25;
    RUN(path, (fill<double><<<1, 1>>>(dout, dv, idx)), fill<double>, &dout, &dv, &idx);
    char c3 = 5;
    double d3 = 4.0;
    int *iout1 = iout + 1;
    RUN(path, (c_kernel<<<1, 1>>>(iout1, c3, d3)), c_kernel, &iout1, &c3, &d3);
    AddFunctor functor = {b, 2.0f};
    int idx2 = 11;
    RUN(path, (apply<AddFunctor><<<1, 1>>>(functor, a, idx2)), apply<AddFunctor>, &functor, &a,
        &idx2);
    float *a12 = a + 12;
    RUN(path, (ns::nested<<<1, 1>>>(a12, s1)), ns::nested, &a12, &s1);
    float *a13 = a + 13;
    const float *r = b + 2, *s = q + 3;
    RUN(path, (subst<<<1, 1>>>(s1, s1, a13, q, r, s)), subst, &s1, &s1, &a13, &q, &r, &s);
    CUDA_CHECK(cudaDeviceSynchronize());
    float ha[words];
    double hd[words];
    int hi[words];
    CUDA_CHECK(cudaMemcpy(ha, a, sizeof ha, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hd, dout, sizeof hd, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(hi, iout, sizeof hi, cudaMemcpyDeviceToHost));
    printf("%-20s a %016llx d %016llx i %016llx\n", path_names[p],
           (unsigned long long)checksum(ha, sizeof ha), (unsigned long long)checksum(hd, sizeof hd),
           (unsigned long long)checksum(hi, sizeof hi));
    void *all[] = {a, b, q, dq, dout, iout};
    for (void *ptr : all) CUDA_CHECK(cudaFree(ptr));
  }
}

typedef CUresult (*param_info_fn)(CUfunction, size_t, size_t *, size_t *);

static int layouts(void)
{
  void *entry = NULL;
  cudaDriverEntryPointQueryResult found;
  CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuFuncGetParamInfo", &entry, 12040,
                                              cudaEnableDefault, &found));
  if (!entry) {
    printf("skipped: the driver has no cuFuncGetParamInfo\n");
    return 77;
  }
  param_info_fn param_info = (param_info_fn)entry;
  size_t file_size, section_size;
  const unsigned char *section;
  void *file = map_section("/proc/self/exe", ".nv_fatbin", &file_size, &section, &section_size);
  if (!file || !section) {
    fprintf(stderr, "FAIL: no .nv_fatbin in /proc/self/exe\n");
    return 1;
  }
  int device = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  struct kparam_image *image;
  if (kparam_image_parse(section, section_size, "self", major * 10 + minor, &image) != 0) {
    fprintf(stderr, "FAIL: kparam cannot parse this program's fatbin\n");
    return 1;
  }
  static struct expected_kernel table[32];
  int count = expected_kernels(table), failures = 0, checked = 0;
  for (int k = 0; k < count; k++) {
    cudaFunction_t function;
    CUDA_CHECK(cudaGetFuncBySymbol(&function, table[k].host_fun));
    const char *name = table[k].name;
    if (!name) CUDA_CHECK(cudaFuncGetName(&name, table[k].host_fun));
    const struct kparam_plan *plan = kparam_image_find(image, name);
    if (!plan) {
      fprintf(stderr, "FAIL: %s: no layout from cudaw\n", name);
      failures++;
      continue;
    }
    uint32_t i = 0;
    for (;; i++) {
      size_t offset = 0, size = 0;
      if (param_info((CUfunction)function, i, &offset, &size) != CUDA_SUCCESS) break;
      if (i >= plan->param_count || plan->params[i].offset != offset ||
          plan->params[i].size != size) {
        fprintf(stderr, "FAIL: %s param %u: driver offset %zu size %zu, cudaw %u/%u\n", name, i,
                offset, size, i < plan->param_count ? plan->params[i].offset : 0,
                i < plan->param_count ? plan->params[i].size : 0);
        failures++;
      }
    }
    if (i != plan->param_count) {
      fprintf(stderr, "FAIL: %s: driver has %u params, cudaw %u\n", name, i, plan->param_count);
      failures++;
    }
    checked++;
    printf("%-40s %u params agree with cuFuncGetParamInfo (%s)\n", name, i,
           kparam_source_name(plan->source));
  }
  kparam_image_free(image);
  munmap(file, file_size);
  printf("layouts: %d kernels checked, %d mismatches\n", checked, failures);
  return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
  require_gpu();
  if (argc > 1 && strcmp(argv[1], "--layouts") == 0) return layouts();
  results();
  return 0;
}
