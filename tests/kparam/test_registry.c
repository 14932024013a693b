/* Description: unregistering a module forgets exactly what was registered against it (its
 * functions, the kernel handles that stand for them, its library, the plans retired by a
 * re-registration) and nothing of the other modules'; a stale key is ignored. Regression: it
 * walked the whole registry once per module and more per function, so a process that exits
 * unregistering PyTorch's 2,789 fatbins spent 150 ms in it; now unregistering thousands of
 * modules must cost about what registering them did. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kparam.h"
#include "../common/test.h"

static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry lib_kernel(.param .u64 p)\n{\nret;\n}\n";

/* Host functions: distinct addresses holding `ret`, so that no launch stub is found in them. */
static unsigned char host[64];
static char handles[64]; /* kernel handles: distinct addresses */
static int warnings;

static void quiet(int level, const char *msg) { (void)msg, warnings += level == 0; }

static const void *fun(int i) { return &host[i]; }
static const void *handle(int i) { return &handles[i]; }

static double now_ms(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void exact_forgetting(void)
{
  char name[32];
  kparam_module_key a = kparam_register_fatbin(ptx), b = kparam_register_fatbin(ptx);
  CHECK(a && b && a != b);
  /* A __cudaGetKernel that comes before its function is registered (pending). */
  CHECK_EQ(kparam_register_kernel_handle(handle(20), fun(20)), 0);
  for (int i = 0; i < 20; i++) {
    snprintf(name, sizeof name, "kernel_%d", i);
    CHECK_EQ(kparam_register_function(i < 10 ? a : b, fun(i), name), 0);
  }
  CHECK_EQ(kparam_register_function(a, fun(20), "kernel_20"), 0);
  CHECK_EQ(kparam_register_kernel_handle(handle(0), fun(0)), 0);
  CHECK_EQ(kparam_register_kernel_handle(handle(10), fun(10)), 0);
  /* fun(5) moves to b: a's function is retired, its plan kept until a goes. */
  const struct kparam_plan *retired_plan = kparam_plan_for_host_fun(fun(5));
  CHECK(retired_plan && strcmp(retired_plan->name, "kernel_5") == 0);
  CHECK_EQ(kparam_register_function(b, fun(5), "kernel_5_again"), 0);
  CHECK(strcmp(kparam_plan_for_host_fun(fun(5))->name, "kernel_5_again") == 0);
  /* A library, with one kernel. */
  int library;
  CHECK_EQ(kparam_register_library(&library, ptx, sizeof ptx), 0);
  CHECK_EQ(kparam_register_library_kernel(handle(30), &library, "lib_kernel"), 0);
  CHECK(kparam_plan_for_kernel(handle(20)) && kparam_plan_for_kernel(handle(0)));

  kparam_unregister_fatbin(a);
  for (int i = 0; i < 10; i++)
    if (i != 5) CHECK(!kparam_plan_for_host_fun(fun(i)), "a's kernel_%d survived", i);
  CHECK(!kparam_plan_for_host_fun(fun(20)) && !kparam_plan_for_kernel(handle(20)), "pending");
  CHECK(!kparam_plan_for_kernel(handle(0)), "a handle of a's survived");
  CHECK(strcmp(kparam_plan_for_host_fun(fun(5))->name, "kernel_5_again") == 0, "b's kernel_5");
  for (int i = 10; i < 20; i++) CHECK(kparam_plan_for_host_fun(fun(i)), "b lost kernel_%d", i);
  CHECK(kparam_plan_for_kernel(handle(10)) == kparam_plan_for_host_fun(fun(10)), "b's handle");
  const struct kparam_plan *library_plan = kparam_plan_for_kernel(handle(30));
  CHECK(library_plan && library_plan->source == KPARAM_SOURCE_PTX, "the library's kernel");
  kparam_unregister_fatbin(a); /* stale key: ignored */

  kparam_unregister_library(&library);
  CHECK(!kparam_plan_for_kernel(handle(30)), "the library's kernel survived its library");
  CHECK(kparam_plan_for_host_fun(fun(12)), "b lost a kernel with the library");
  /* The library's handle is free again. */
  CHECK_EQ(kparam_register_library_kernel(handle(30), &library, "lib_kernel"), -ENOENT);

  kparam_unregister_fatbin(b);
  for (int i = 0; i < 21; i++) CHECK(!kparam_plan_for_host_fun(fun(i)), "kernel_%d survived", i);
  CHECK(!kparam_plan_for_kernel(handle(10)), "b's handle survived");
}

/* Thousands of modules, unregistered in the order registered (the worst order for a list) and
 * in reverse (nvcc's exit handlers). */
static void many_modules(void)
{
  enum { MODULES = 4000, KERNELS = 16 };
  static kparam_module_key keys[MODULES];
  static unsigned char funs[MODULES * KERNELS];
  for (int round = 0; round < 2; round++) {
    double start = now_ms();
    for (int m = 0; m < MODULES; m++) {
      CHECK((keys[m] = kparam_register_fatbin(ptx)));
      for (int k = 0; k < KERNELS; k++)
        CHECK_EQ(kparam_register_function(keys[m], &funs[m * KERNELS + k], "kernel"), 0);
      CHECK_EQ(kparam_register_kernel_handle(&funs[m * KERNELS], &funs[m * KERNELS]), 0);
    }
    double registered = now_ms() - start;
    start = now_ms();
    for (int i = 0; i < MODULES; i++) kparam_unregister_fatbin(keys[round ? MODULES - 1 - i : i]);
    double unregistered = now_ms() - start;
    printf("%d modules x %d kernels: registered in %.1f ms, unregistered (%s) in %.1f ms\n",
           MODULES, KERNELS, registered, round ? "reverse order" : "same order", unregistered);
    CHECK(unregistered < 5 * registered + 5, "unregistering walks the registry");
    CHECK(!kparam_plan_for_host_fun(&funs[0]) && !kparam_plan_for_kernel(&funs[0]));
  }
}

int main(void)
{
  memset(host, 0xc3, sizeof host);
  kparam_set_log(quiet);
  exact_forgetting();
  many_modules();
  printf("ok (%d warnings about kernels without layouts)\n", warnings);
  return 0;
}
