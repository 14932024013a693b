/* Description: registration is lazy: registering the fatbin of a large real library
 * (argv[2], e.g. libcublas.so.13) through cudaw's __cudaRegisterFatBinary, plus 1,000 kernels,
 * costs microseconds, because cudaw only records pointers; parsing waits for a launch. Prints the
 * figures; fails above 50 ms. Runs against the emulated device (argv[1]: cudaw). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "elf_section.h"
#include "test.h"

static double now_us(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
  CHECK(argc == 3);
  void *cudaw = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  CHECK(cudaw, "%s", dlerror());
  void **(*register_fatbin)(void *) = (void **(*)(void *))dlsym(cudaw, "__cudaRegisterFatBinary");
  void (*register_function)(void **, const char *, char *, const char *, int, void *, void *,
                            void *, void *, int *) =
      (void (*)(void **, const char *, char *, const char *, int, void *, void *, void *, void *,
                int *))dlsym(cudaw, "__cudaRegisterFunction");
  void (*unregister)(void **) = (void (*)(void **))dlsym(cudaw, "__cudaUnregisterFatBinary");
  int (*get_count)(int *) = (int (*)(int *))dlsym(cudaw, "cudaGetDeviceCount");
  CHECK(register_fatbin && register_function && unregister && get_count);
  int devices = 0;
  get_count(&devices); /* initialises cudaw and the emulated device outside the timing */
  size_t file_size, size;
  const unsigned char *section;
  void *file = map_section(argv[2], ".nv_fatbin", &file_size, &section, &size);
  if (!file || !section) test_skip("%s has no .nv_fatbin section", argv[2]);
  struct { uint32_t magic, version; const void *data, *extra; } wrapper = {
    0x466243B1, 1, section, NULL};
  static char names[1000][32];
  double t0 = now_us();
  void **handle = register_fatbin(&wrapper);
  for (int i = 0; i < 1000; i++) {
    snprintf(names[i], sizeof names[i], "_Z6kernelILi%dEEvPf", i);
    register_function(handle, names[i], names[i], names[i], -1, 0, 0, 0, 0, 0);
  }
  double elapsed = now_us() - t0;
  CHECK(handle != NULL);
  printf("registered %.1f MB of fatbins (%s) and 1000 kernels in %.0f us\n", size / 1e6, argv[2],
         elapsed);
  CHECK(elapsed < 50000, "registration took %.0f us: it parses eagerly", elapsed);
  unregister(handle);
  munmap(file, file_size);
  return 0;
}
