/* How fast the image reserve becomes ready (issue 32's target: 45 GiB within 3 s of the
 * allocation): grows a reserve of SIZE GiB with each given thread count and prints GB/s.
 * With a CUDA runtime and a GPU (libcudart.so.13, loaded with dlopen) the pieces are
 * page-locked by the real cudaHostRegister; without (this repository's CI machine) only
 * faulted in, which measures the faulting alone.
 *   bench_reserve [GiB] [threads...]      default: 2 GiB, threads 1 and the default count
 * Rows run in the order given; on a VM the first touch of host memory since boot costs more, so
 * repeat a count (bench_reserve 45 8 1 8) to see both. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

typedef int (*register_fn)(void *, size_t, unsigned);
typedef int (*unregister_fn)(void *);
typedef const char *(*name_fn)(int);
static register_fn real_register;
static unregister_fn real_unregister;
static name_fn real_name;
static __thread int last;
static uint64_t device;

static int host_register(void *ctx, void *p, size_t n) {
  (void)ctx;
  if (!real_register) return 0;
  last = real_register(p, n, 1 /* cudaHostRegisterPortable */);
  return last ? -EIO : 0;
}

static void host_unregister(void *ctx, void *p) {
  (void)ctx;
  if (real_unregister) real_unregister(p);
}

static void last_error(void *ctx, char *buf, size_t len) {
  (void)ctx;
  snprintf(buf, len, "cudaHostRegister returned %s (%d)", real_name ? real_name(last) : "?", last);
}

static int device_bytes(void *ctx, uint64_t *bytes, uint64_t *regions) {
  (void)ctx;
  *bytes = device;
  *regions = 1;
  return 0;
}

int main(int argc, char **argv) {
  double gib = argc > 1 ? atof(argv[1]) : 2;
  if (gib <= 0) {
    fprintf(stderr, "bench_reserve: the size must be a positive number of GiB\n");
    return 1;
  }
  void *cudart = dlopen("libcudart.so.13", RTLD_NOW);
  typedef int (*count_fn)(int *);
  count_fn device_count = cudart ? (count_fn)dlsym(cudart, "cudaGetDeviceCount") : NULL;
  int devices = 0;
  if (device_count && device_count(&devices) == 0 && devices > 0) { /* a runtime and a GPU */
    real_register = (register_fn)dlsym(cudart, "cudaHostRegister");
    real_unregister = (unregister_fn)dlsym(cudart, "cudaHostUnregister");
    real_name = (name_fn)dlsym(cudart, "cudaGetErrorName");
  }
  printf("bench_reserve: %.2f GiB, %s\n", gib,
         real_register ? "page-locked by cudaHostRegister" : "no CUDA runtime: faulting only");
  struct ckpt_host_ops ops = {.host_register = host_register,
                              .host_unregister = host_unregister,
                              .last_error = last_error,
                              .device_bytes = device_bytes};
  struct ckpt_options defaults;
  ckpt_options_from_env(&defaults, NULL, 0);
  int counts[16] = {1, (int)defaults.reserve_threads}, count = 2;
  if (argc > 2)
    for (count = 0; count < 16 && count + 2 < argc; count++) counts[count] = atoi(argv[count + 2]);
  device = (uint64_t)(gib * (1ull << 30));
  for (int i = 0; i < count; i++) {
    struct ckpt_options options = defaults;
    options.reserve_auto = 1;
    options.reserve_budget_pct = 100;
    options.reserve_threads = (uint32_t)(counts[i] > 0 ? counts[i] : 1);
    double t0 = ckpt_now();
    struct reserve *rs = reserve_new(&ops, NULL, &options);
    if (!rs) return 1;
    bool ready = reserve_wait(rs, device, 120);
    double seconds = ckpt_now() - t0;
    printf("  %2u threads: %s in %.3f s, %.2f GB/s\n", options.reserve_threads,
           ready ? "ready" : "NOT ready", seconds, (double)device / seconds / 1e9);
    reserve_free(rs);
    if (!ready) return 1;
  }
  return 0;
}
