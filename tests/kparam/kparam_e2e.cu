// Description: the kernels of kernels.cuh (scalars of every size, pointers, const pointers,
// structs with pointers at several offsets, arrays in structs, a >4 KB parameter block,
// templates, extern "C", a functor) launched through cudaw on the emulated device, through every
// launch path: <<<>>> (__cudaLaunchKernel, or _ptsz when built per-thread), cudaLaunchKernel,
// cudaLaunchKernelExC, cudaLaunchCooperativeKernel, a cudaKernel_t from cudaGetKernel, graph
// kernel nodes (added, set, exec-set; classic and cudaGraphAddNode forms) and cudaLibrary*
// kernels. Every result is checked, and under CUDAW_VMEM=translate with CUDAW_VMEM_IDENTITY=0
// every kernel must have received real pointers, not the virtual ones the program holds (with
// identity placement the program's pointers are the real ones, passed on unchanged).
// Modes: (none) all of the above; --opaque: an unknown kernel is reported once under translate;
// --check: under CUDAW_CHECK=1 a use after free is reported and the launch refused.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cudaw_emu.h"
#include "kernels.cuh"
#include "test.h"

/* ---- host implementations of the kernels: they record the first pointer they received ---- */

static const void *seen;

CUDAW_EMU_KERNEL(_Z7scalarscsixfd)
{
  (void)launch;
  static double out[6];
  out[0] = CUDAW_EMU_ARG(args, 0, char);
  out[1] = CUDAW_EMU_ARG(args, 1, short);
  out[2] = CUDAW_EMU_ARG(args, 2, int);
  out[3] = (double)CUDAW_EMU_ARG(args, 3, long long);
  out[4] = CUDAW_EMU_ARG(args, 4, float);
  out[5] = CUDAW_EMU_ARG(args, 5, double);
  seen = out;
}
CUDAW_EMU_KERNEL(_Z8pointersPfPKfPKiPvPh)
{
  (void)launch;
  float *a = CUDAW_EMU_ARG(args, 0, float *);
  a[0] = CUDAW_EMU_ARG(args, 1, const float *)[0] + CUDAW_EMU_ARG(args, 2, const int *)[0] +
         CUDAW_EMU_ARG(args, 3, float *)[0] + CUDAW_EMU_ARG(args, 4, unsigned char *)[0];
  seen = a;
}
CUDAW_EMU_KERNEL(_Z5mixediPfcPd)
{
  (void)launch;
  int n = CUDAW_EMU_ARG(args, 0, int);
  float *p = CUDAW_EMU_ARG(args, 1, float *);
  p[n] = (float)(CUDAW_EMU_ARG(args, 2, char) + CUDAW_EMU_ARG(args, 3, double *)[0]);
  seen = p;
}
CUDAW_EMU_KERNEL(_Z7structs2S1i2S2)
{
  (void)launch;
  S1 s = CUDAW_EMU_ARG(args, 0, S1);
  int x = CUDAW_EMU_ARG(args, 1, int);
  S2 t = CUDAW_EMU_ARG(args, 2, S2);
  s.p[x] = (float)(t.ptrs[1][t.arr[2]] + *s.q + s.c + t.s);
  seen = s.p;
}
CUDAW_EMU_KERNEL(_Z3big3BigPi)
{
  (void)launch;
  const Big *b = (const Big *)args[0];
  int *out = CUDAW_EMU_ARG(args, 1, int *);
  out[0] = b->b[4999] + (int)b->p[0];
  seen = out;
}
CUDAW_EMU_KERNEL(_Z4fillIfEvPT_S0_i)
{
  (void)launch;
  float *out = CUDAW_EMU_ARG(args, 0, float *);
  out[CUDAW_EMU_ARG(args, 2, int)] = CUDAW_EMU_ARG(args, 1, float);
  seen = out;
}
CUDAW_EMU_KERNEL(_Z4fillIdEvPT_S0_i)
{
  (void)launch;
  double *out = CUDAW_EMU_ARG(args, 0, double *);
  out[CUDAW_EMU_ARG(args, 2, int)] = CUDAW_EMU_ARG(args, 1, double);
  seen = out;
}
CUDAW_EMU_KERNEL(c_kernel)
{
  (void)launch;
  int *p = CUDAW_EMU_ARG(args, 0, int *);
  p[0] = CUDAW_EMU_ARG(args, 1, char) + (int)CUDAW_EMU_ARG(args, 2, double);
  seen = p;
}
CUDAW_EMU_KERNEL(_Z5applyI10AddFunctorEvT_Pfi)
{
  (void)launch;
  AddFunctor f = CUDAW_EMU_ARG(args, 0, AddFunctor);
  float *data = CUDAW_EMU_ARG(args, 1, float *);
  int n = CUDAW_EMU_ARG(args, 2, int);
  data[n] = data[n] + f.k + f.base[0];
  seen = data;
}
CUDAW_EMU_KERNEL(_ZN2ns6nestedEPf2S1)
{
  (void)launch;
  float *p = CUDAW_EMU_ARG(args, 0, float *);
  p[0] = (float)CUDAW_EMU_ARG(args, 1, S1).a + CUDAW_EMU_ARG(args, 1, S1).q[0];
  seen = p;
}
CUDAW_EMU_KERNEL(_Z5subst2S1S_PfS0_PKfS2_)
{
  (void)launch;
  S1 a = CUDAW_EMU_ARG(args, 0, S1), b = CUDAW_EMU_ARG(args, 1, S1);
  float *p = CUDAW_EMU_ARG(args, 2, float *);
  p[0] = a.a + b.a + CUDAW_EMU_ARG(args, 3, float *)[0] +
         CUDAW_EMU_ARG(args, 4, const float *)[0] + CUDAW_EMU_ARG(args, 5, const float *)[0] +
         a.p[0] + b.q[0];
  seen = p;
}

/* ---- launch paths ---- */

enum path {
  CHEVRON, LAUNCH, LAUNCH_EX, COOPERATIVE, KERNEL_HANDLE, GRAPH_ADD, GRAPH_SET, GRAPH_EXEC_SET,
  GRAPH_NODE_ADD, GRAPH_NODE_SET, GRAPH_EXEC_NODE_SET, PATH_COUNT
};
static const char *const path_names[] = {
  "<<<>>>", "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
  "cudaGetKernel+cudaLaunchKernel", "cudaGraphAddKernelNode", "cudaGraphKernelNodeSetParams",
  "cudaGraphExecKernelNodeSetParams", "cudaGraphAddNode", "cudaGraphNodeSetParams",
  "cudaGraphExecNodeSetParams"};

static bool translating;

static void graph_launch(enum path p, const void *f, void **args)
{
  cudaGraph_t g;
  cudaGraphNode_t n;
  cudaGraphExec_t e;
  CHECK_EQ(cudaGraphCreate(&g, 0), cudaSuccess);
  struct cudaKernelNodeParams kp = {};
  kp.func = (void *)f;
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(1);
  kp.kernelParams = args;
  struct cudaGraphNodeParams np = {};
  np.type = cudaGraphNodeTypeKernel;
  np.kernel.func = (void *)f;
  np.kernel.gridDim = dim3(1);
  np.kernel.blockDim = dim3(1);
  np.kernel.kernelParams = args;
  if (p <= GRAPH_EXEC_SET) CHECK_EQ(cudaGraphAddKernelNode(&n, g, NULL, 0, &kp), cudaSuccess);
  else CHECK_EQ(cudaGraphAddNode(&n, g, NULL, NULL, 0, &np), cudaSuccess);
  if (p == GRAPH_SET) CHECK_EQ(cudaGraphKernelNodeSetParams(n, &kp), cudaSuccess);
  if (p == GRAPH_NODE_SET) CHECK_EQ(cudaGraphNodeSetParams(n, &np), cudaSuccess);
  CHECK_EQ(cudaGraphInstantiate(&e, g, 0), cudaSuccess);
  if (p == GRAPH_EXEC_SET) CHECK_EQ(cudaGraphExecKernelNodeSetParams(e, n, &kp), cudaSuccess);
  if (p == GRAPH_EXEC_NODE_SET) CHECK_EQ(cudaGraphExecNodeSetParams(e, n, &np), cudaSuccess);
  CHECK_EQ(cudaGraphLaunch(e, 0), cudaSuccess);
  CHECK_EQ(cudaGraphExecDestroy(e), cudaSuccess);
  CHECK_EQ(cudaGraphDestroy(g), cudaSuccess);
}

static void launch(enum path p, const void *f, void **args)
{
  cudaLaunchConfig_t config = {};
  cudaKernel_t handle;
  switch (p) {
  case CHEVRON: test_fail("<<<>>> is launched by each case");
  case LAUNCH: CHECK_EQ(cudaLaunchKernel(f, dim3(1), dim3(1), args, 0, 0), cudaSuccess); break;
  case LAUNCH_EX:
    config.gridDim = dim3(1);
    config.blockDim = dim3(1);
    CHECK_EQ(cudaLaunchKernelExC(&config, f, args), cudaSuccess);
    break;
  case COOPERATIVE:
    CHECK_EQ(cudaLaunchCooperativeKernel(f, dim3(1), dim3(1), args, 0, 0), cudaSuccess);
    break;
  case KERNEL_HANDLE:
    CHECK_EQ(cudaGetKernel(&handle, f), cudaSuccess);
    CHECK_EQ(cudaLaunchKernel((const void *)handle, dim3(1), dim3(1), args, 0, 0), cudaSuccess);
    break;
  default: graph_launch(p, f, args);
  }
}

/* Device memory initialised from host values. */
template <typename T> static T *device(const T *values, size_t count)
{
  T *d;
  CHECK_EQ(cudaMalloc(&d, count * sizeof(T)), cudaSuccess);
  CHECK_EQ(cudaMemcpy(d, values, count * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}
template <typename T> static T read_back(const T *d, size_t index)
{
  T value;
  CHECK_EQ(cudaMemcpy(&value, d + index, sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return value;
}

/* The kernel received real pointers (translate) or the program's own (remap). */
static void check_seen(const void *virtual_pointer, const char *kernel, enum path p)
{
  CHECK(seen != NULL, "%s via %s: the kernel did not run", kernel, path_names[p]);
  if (translating)
    CHECK(seen != virtual_pointer, "%s via %s: the kernel received the virtual pointer %p",
          kernel, path_names[p], virtual_pointer);
  else
    CHECK(seen == virtual_pointer, "%s via %s: pointer changed without translate", kernel,
          path_names[p]);
  seen = NULL;
}

#define RUN(p, chevron, f, ...)                                                                \
  do {                                                                                         \
    seen = NULL;                                                                               \
    if ((p) == CHEVRON) {                                                                      \
      chevron;                                                                                 \
      CHECK_EQ(cudaGetLastError(), cudaSuccess);                                               \
    } else {                                                                                   \
      void *args_[] = {__VA_ARGS__};                                                           \
      launch(p, (const void *)(f), args_);                                                     \
    }                                                                                          \
  } while (0)

static void run_all(enum path p)
{
  float one = 1.0f, three = 3.0f;
  int four = 4;
  unsigned char five = 5;
  double six = 6.0;

  /* scalars of every size: nothing to translate, values must arrive intact */
  char c = -7;
  short s = -300;
  int i = 70000;
  long long ll = 1LL << 40;
  float f = 0.25f;
  double d = -1.5;
  RUN(p, (scalars<<<1, 1>>>(c, s, i, ll, f, d)), scalars, &c, &s, &i, &ll, &f, &d);
  const double *out = (const double *)seen;
  CHECK(out && out[0] == c && out[1] == s && out[2] == i && out[3] == (double)ll &&
        out[4] == f && out[5] == d, "scalars via %s", path_names[p]);

  float zero = 0;
  float *a = device(&zero, 1), *b = device(&one, 1), *v = device(&three, 1);
  int *ci = device(&four, 1);
  unsigned char *u = device(&five, 1);
  RUN(p, (pointers<<<1, 1>>>(a, b, ci, v, u)), pointers, &a, &b, &ci, &v, &u);
  check_seen(a, "pointers", p);
  CHECK(read_back(a, 0) == 1 + 4 + 3 + 5, "pointers via %s: %g", path_names[p], read_back(a, 0));

  double *q = device(&six, 1);
  int n = 0;
  char c2 = 2;
  RUN(p, (mixed<<<1, 1>>>(n, a, c2, q)), mixed, &n, &a, &c2, &q);
  check_seen(a, "mixed", p);
  CHECK(read_back(a, 0) == 8, "mixed via %s", path_names[p]);

  float table[4] = {10, 20, 30, 40};
  float *dt = device(table, 4);
  float *out4 = device(table, 4);
  S1 s1 = {1, out4, 3, q};
  S2 s2 = {9, {0, 0, 2}, {b, dt}, 100};
  int x = 1;
  RUN(p, (structs<<<1, 1>>>(s1, x, s2)), structs, &s1, &x, &s2);
  check_seen(out4, "structs", p);
  CHECK(read_back(out4, 1) == 30 + 6 + 3 + 100, "structs via %s: %g", path_names[p],
        read_back(out4, 1));

  static Big big_arg;
  big_arg.b[4999] = 11;
  big_arg.p = dt;
  int minus = -1;
  int *iout = device(&minus, 1);
  RUN(p, (big<<<1, 1>>>(big_arg, iout)), big, &big_arg, &iout);
  check_seen(iout, "big", p);
  CHECK(read_back(iout, 0) == 21, "big (5016-byte parameters) via %s", path_names[p]);

  float fv = 7.5f;
  int two_i = 2;
  RUN(p, (fill<float><<<1, 1>>>(out4, fv, two_i)), fill<float>, &out4, &fv, &two_i);
  check_seen(out4, "fill<float>", p);
  CHECK(read_back(out4, 2) == 7.5f, "fill<float> via %s", path_names[p]);
  double dv = 9.25, dzero[4] = {0, 0, 0, 0};
  double *dout = device(dzero, 4);
  RUN(p, (fill<double><<<1, 1>>>(dout, dv, two_i)), fill<double>, &dout, &dv, &two_i);
  check_seen(dout, "fill<double>", p);
  CHECK(read_back(dout, 2) == 9.25, "fill<double> via %s", path_names[p]);

  char c3 = 5;
  double d3 = 4.0;
  RUN(p, (c_kernel<<<1, 1>>>(iout, c3, d3)), c_kernel, &iout, &c3, &d3);
  check_seen(iout, "c_kernel (extern \"C\")", p);
  CHECK(read_back(iout, 0) == 9, "c_kernel via %s", path_names[p]);

  AddFunctor functor = {b, 2.0f};
  RUN(p, (apply<AddFunctor><<<1, 1>>>(functor, dt, two_i)), apply<AddFunctor>, &functor, &dt,
      &two_i);
  check_seen(dt, "apply<AddFunctor>", p);
  CHECK(read_back(dt, 2) == 30 + 2 + 1, "apply<AddFunctor> via %s", path_names[p]);

  RUN(p, (ns::nested<<<1, 1>>>(a, s1)), ns::nested, &a, &s1);
  check_seen(a, "ns::nested", p);
  CHECK(read_back(a, 0) == 1 + 6, "ns::nested via %s", path_names[p]);

  S1 sa = {1, b, 0, q}, sb = {2, b, 0, q};
  RUN(p, (subst<<<1, 1>>>(sa, sb, a, v, b, v)), subst, &sa, &sb, &a, &v, &b, &v);
  check_seen(a, "subst", p);
  CHECK(read_back(a, 0) == 1 + 2 + 3 + 1 + 3 + 1 + 6, "subst via %s: %g", path_names[p],
        read_back(a, 0));


  void *all[] = {a, b, v, ci, u, q, dt, out4, iout, dout};
  for (void *ptr : all) CHECK_EQ(cudaFree(ptr), cudaSuccess);
}

/* cudaLibrary*: the kernels of kernels.ptx, by name, launched through their cudaKernel_t. */
static void run_library(const char *ptx_path, bool from_file)
{
  FILE *file = fopen(ptx_path, "rb");
  CHECK(file, "%s", ptx_path);
  static char text[1 << 20];
  size_t length = fread(text, 1, sizeof text - 1, file);
  fclose(file);
  text[length] = 0;
  cudaLibrary_t lib;
  if (from_file)
    CHECK_EQ(cudaLibraryLoadFromFile(&lib, ptx_path, NULL, NULL, 0, NULL, NULL, 0), cudaSuccess);
  else
    CHECK_EQ(cudaLibraryLoadData(&lib, text, NULL, NULL, 0, NULL, NULL, 0), cudaSuccess);
  memset(text, 0, sizeof text); /* cudaw must not depend on the caller's copy */
  cudaKernel_t k_c, k_ptr;
  CHECK_EQ(cudaLibraryGetKernel(&k_c, lib, "c_kernel"), cudaSuccess);
  CHECK_EQ(cudaLibraryGetKernel(&k_ptr, lib, "_Z8pointersPfPKfPKiPvPh"), cudaSuccess);
  float zero = 0, one = 1;
  int four = 4, minus = -1;
  unsigned char five = 5;
  float *a = device(&zero, 1), *b = device(&one, 1);
  int *ci = device(&four, 1), *iout = device(&minus, 1);
  unsigned char *u = device(&five, 1);
  char c = 3;
  double d = 2.0;
  void *args_c[] = {&iout, &c, &d};
  CHECK_EQ(cudaLaunchKernel((const void *)k_c, dim3(1), dim3(1), args_c, 0, 0), cudaSuccess);
  check_seen(iout, "library c_kernel", LAUNCH);
  CHECK(read_back(iout, 0) == 5, "library c_kernel");
  void *args_p[] = {&a, &b, &ci, &b, &u};
  CHECK_EQ(cudaLaunchKernel((const void *)k_ptr, dim3(1), dim3(1), args_p, 0, 0), cudaSuccess);
  check_seen(a, "library pointers", LAUNCH);
  CHECK(read_back(a, 0) == 1 + 4 + 1 + 5, "library pointers");
  CHECK_EQ(cudaLibraryUnload(lib), cudaSuccess);
  void *all[] = {a, b, ci, iout, u};
  for (void *ptr : all) CHECK_EQ(cudaFree(ptr), cudaSuccess);
}

/* Graph nodes copy their arguments: the emu needs every kernel's parameter sizes. */
static void declare_param_sizes(void)
{
  typedef int (*set_fn)(const char *, unsigned, const size_t *);
  void *emu = dlopen(getenv("CUDAW_REAL_CUDART"), RTLD_NOW | RTLD_NOLOAD);
  set_fn set = emu ? (set_fn)dlsym(emu, "cudaw_emu_set_kernel_param_sizes") : NULL;
  CHECK(set, "the emulated device is not loaded (CUDAW_REAL_CUDART)");
  static struct expected_kernel table[32];
  int count = expected_kernels(table);
  for (int k = 0; k < count; k++) {
    if (!table[k].name) continue;
    size_t sizes[8];
    for (uint32_t i = 0; i < table[k].count; i++) sizes[i] = table[k].params[i].size;
    CHECK_EQ(set(table[k].name, table[k].count, sizes), 0);
  }
}

/* Runs f with standard error going to a file; returns what was written (static buffer). */
static const char *capture_stderr(void (*f)(void))
{
  static char log[1 << 16];
  char path[] = "/tmp/kparam_e2e_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  unlink(path);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  f();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  ssize_t got = pread(fd, log, sizeof log - 1, 0);
  close(fd);
  log[got > 0 ? got : 0] = 0;
  fputs(log, stderr);
  return log;
}

static int count_of(const char *haystack, const char *needle)
{
  int n = 0;
  for (const char *at = haystack; (at = strstr(at, needle)); at++) n++;
  return n;
}

/* A library whose image cudaw cannot read: its kernel has no layout. */
static void launch_opaque_twice(void)
{
  static const char garbage[64] = "this is no fatbin, cubin or PTX";
  cudaLibrary_t lib;
  cudaKernel_t k;
  CHECK_EQ(cudaLibraryLoadData(&lib, garbage, NULL, NULL, 0, NULL, NULL, 0), cudaSuccess);
  CHECK_EQ(cudaLibraryGetKernel(&k, lib, "_Z7scalarscsixfd"), cudaSuccess);
  char c = 1;
  short s = 2;
  int i = 3;
  long long ll = 4;
  float f = 5;
  double d = 6;
  void *args[] = {&c, &s, &i, &ll, &f, &d};
  for (int round = 0; round < 2; round++)
    CHECK_EQ(cudaLaunchKernel((const void *)k, dim3(1), dim3(1), args, 0, 0), cudaSuccess);
  CHECK(seen != NULL, "the opaque kernel still runs");
  CHECK_EQ(cudaLibraryUnload(lib), cudaSuccess);
}

static cudaError_t check_result;

static void launch_after_free(void)
{
  float *a;
  CHECK_EQ(cudaMalloc(&a, 4096), cudaSuccess);
  CHECK_EQ(cudaFree(a), cudaSuccess);

  void *args[] = {&a, &a, &a, &a, &a};
  seen = NULL;
  check_result = cudaLaunchKernel((const void *)pointers, dim3(1), dim3(1), args, 0, 0);
}

int main(int argc, char **argv)
{
  const char *vmem = getenv("CUDAW_VMEM"), *identity = getenv("CUDAW_VMEM_IDENTITY");
  const char *check = getenv("CUDAW_CHECK");
  /* With identity placement (the default under translate, off with CUDAW_CHECK=1) the program's
   * pointers are the real ones: the kernels must receive them unchanged, as under remap. */
  bool identity_on = !(identity && strcmp(identity, "0") == 0) && !(check && strcmp(check, "1") == 0);
  translating = vmem && strcmp(vmem, "translate") == 0 && !identity_on;
  const char *real = getenv("CUDAW_REAL_CUDART");
  void *emu = real ? dlopen(real, RTLD_NOW | RTLD_NOLOAD) : NULL;
  if (!emu || !dlsym(emu, "cudaw_emu_is_emulated")) {
    cudaFree(0); /* loads the real runtime */
    emu = real ? dlopen(real, RTLD_NOW | RTLD_NOLOAD) : NULL;
  }
  CHECK(emu && dlsym(emu, "cudaw_emu_is_emulated"),
        "not running under cudaw on the emulated device (CUDAW_REAL_CUDART)");
  const char *mode = argc > 1 ? argv[1] : "";

  if (strcmp(mode, "--opaque") == 0) {
    CHECK(translating, "--opaque runs under CUDAW_VMEM=translate, CUDAW_VMEM_IDENTITY=0");
    float *warm;
    CHECK_EQ(cudaMalloc(&warm, 16), cudaSuccess); /* starts vmem */
    const char *log = capture_stderr(launch_opaque_twice);
    CHECK_EQ(count_of(log, "passed untranslated"), 1);
    printf("opaque kernel reported once: ok\n");
    return 0;
  }
  if (strcmp(mode, "--check") == 0) {
    const char *log = capture_stderr(launch_after_free);
    CHECK_EQ(check_result, cudaErrorInvalidValue);
    CHECK_EQ(cudaGetLastError(), cudaErrorInvalidValue);
    CHECK(seen == NULL, "the kernel ran with a freed pointer");
    CHECK(strstr(log, "use after free") && strstr(log, "4096 bytes") && strstr(log, "_Z8pointers"),
          "no use-after-free report naming the kernel and the allocation");
    printf("use after free reported, launch refused: ok\n");
    return 0;
  }

  declare_param_sizes();
  for (int p = 0; p < PATH_COUNT; p++) {
    run_all((enum path)p);
    printf("%-34s all kernels ok\n", path_names[p]);
  }
  if (argc > 1) {
    run_library(argv[1], false);
    run_library(argv[1], true);
    printf("cudaLibraryLoadData/LoadFromFile + cudaLibraryGetKernel: ok\n");
  }
  printf("kparam end to end (%s): ok\n", translating ? "translate" : "remap");
  return 0;
}
