/* Kernels with known signatures, shared by the layout tests; every one is listed in
 * expected_kernels() with the offsets, sizes and kinds its source signature implies. */
#include <stdint.h>

struct S1 { int a; float *p; char c; double *q; };                  /* 32 bytes, ptrs at 8, 24 */
struct S2 { char tag; int arr[3]; float *ptrs[2]; short s; };       /* 40 bytes, ptrs at 16, 24 */
struct Big { char b[5000]; float *p; };                             /* 5008 bytes: KPARAM_INFO_V2 */
struct AddFunctor {
  float *base;
  float k;
  __device__ float operator()(float x) const { return x + k + base[0]; }
};

__global__ void scalars(char c, short s, int i, long long ll, float f, double d) {
  if (c + s + i + ll + f + d == 0.5) asm volatile("trap;");
}
__global__ void pointers(float *a, const float *b, const int *const c, void *v, unsigned char *u) {
  a[0] = b[0] + c[0] + ((float *)v)[0] + u[0];
}
__global__ void mixed(int n, float *p, char c, double *q) { p[n] = c + q[0]; }
__global__ void structs(S1 s, int x, S2 t) { s.p[x] = t.ptrs[1][t.arr[2]] + *s.q + s.c + t.s; }
__global__ void big(Big b, int *out) { out[0] = b.b[4999] + (int)b.p[0]; }
template <typename T> __global__ void fill(T *out, T v, int n) { out[n] = v; }
template __global__ void fill<float>(float *, float, int);
template __global__ void fill<double>(double *, double, int);
extern "C" __global__ void c_kernel(int *p, char c, double d) { p[0] = c + (int)d; }
template <typename F> __global__ void apply(F f, float *data, int n) { data[n] = f(data[n]); }
template __global__ void apply<AddFunctor>(AddFunctor, float *, int);
__global__ void noparams() {}
namespace ns {
__global__ void nested(float *p, S1 s) { p[0] = s.a; }
}
__global__ void subst(S1 a, S1 b, float *p, float *q, const float *r, const float *s) {
  p[0] = a.a + b.a + q[0] + r[0] + s[0];
}

/* An extended lambda through the templated kernel: its closure type is an aggregate. */
static inline void *lambda_host_fun(size_t *closure_size) {
  float *base = nullptr;
  float k = 2.0f;
  auto lambda = [=] __device__(float x) { return x * k + base[0]; };
  *closure_size = sizeof(lambda);
  if (closure_size == nullptr) apply<<<1, 1>>>(lambda, base, 0); /* instantiates it */
  return (void *)apply<decltype(lambda)>;
}

enum { P = 1, S = 2, A = 3, U = 0 }; /* kparam_kind values */
struct expected_param { uint32_t offset, size; int kind; };
struct expected_kernel {
  const void *host_fun;
  const char *name; /* NULL: not checked (lambda) */
  uint32_t count, param_bytes;
  struct expected_param params[8];
};

static inline int expected_kernels(struct expected_kernel *out) {
  size_t closure = 0;
  const void *lambda = lambda_host_fun(&closure);
  const struct expected_kernel table[] = {
    {(const void *)scalars, "_Z7scalarscsixfd", 6, 32,
     {{0, 1, S}, {2, 2, S}, {4, 4, S}, {8, 8, S}, {16, 4, S}, {24, 8, S}}},
    {(const void *)pointers, "_Z8pointersPfPKfPKiPvPh", 5, 40,
     {{0, 8, P}, {8, 8, P}, {16, 8, P}, {24, 8, P}, {32, 8, P}}},
    {(const void *)mixed, "_Z5mixediPfcPd", 4, 32, {{0, 4, S}, {8, 8, P}, {16, 1, S}, {24, 8, P}}},
    {(const void *)structs, "_Z7structs2S1i2S2", 3, 80, {{0, 32, A}, {32, 4, S}, {40, 40, A}}},
    {(const void *)big, "_Z3big3BigPi", 2, 5016, {{0, 5008, A}, {5008, 8, P}}},
    {(const void *)fill<float>, "_Z4fillIfEvPT_S0_i", 3, 16, {{0, 8, P}, {8, 4, S}, {12, 4, S}}},
    {(const void *)fill<double>, "_Z4fillIdEvPT_S0_i", 3, 20, {{0, 8, P}, {8, 8, S}, {16, 4, S}}},
    {(const void *)c_kernel, "c_kernel", 3, 24, {{0, 8, U}, {8, 1, U}, {16, 8, U}}},
    {(const void *)apply<AddFunctor>, "_Z5applyI10AddFunctorEvT_Pfi", 3, 28,
     {{0, 16, A}, {16, 8, P}, {24, 4, S}}},
    {(const void *)noparams, "_Z8noparamsv", 0, 0, {}},
    {(const void *)ns::nested, "_ZN2ns6nestedEPf2S1", 2, 40, {{0, 8, P}, {8, 32, A}}},
    {(const void *)subst, "_Z5subst2S1S_PfS0_PKfS2_", 6, 96,
     {{0, 32, A}, {32, 32, A}, {64, 8, P}, {72, 8, P}, {80, 8, P}, {88, 8, P}}},
    {lambda, NULL, 3, 0,
     {{0, (uint32_t)closure, A}, {(uint32_t)((closure + 7) & ~7ul), 8, P},
      {(uint32_t)((closure + 7) & ~7ul) + 8, 4, S}}},
  };
  memcpy(out, table, sizeof table);
  return (int)(sizeof table / sizeof table[0]);
}
