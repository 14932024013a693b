/* Description: nvcc-built kernels of known signatures (every scalar size, pointers, structs with
 * pointers, arrays in structs, a >4 KB parameter block, templates, extern "C", a functor and an
 * extended lambda) have exactly the layouts and kinds kparam finds: through the registry fed
 * from this program's own __cudaRegisterFatBinary/__cudaRegisterFunction calls (interposed here,
 * as the shim will), through the .nvFatBinSegment wrappers found via dl_iterate_phdr, and
 * through the .nv_fatbin section of the executable file; PTX layouts agree with cubin layouts.
 * Built three times: default, --compress-mode=size (zstd) and --compress-mode=speed (LZ4). */
#include <cuda_runtime.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kparam.h"
#include "kernels.cuh"
#include "../common/test.h"

#ifndef EXPECT_COMPRESSION
#define EXPECT_COMPRESSION 0 /* flag bit expected on cubin entries: 0x8000 zstd, 0x2000 LZ4 */
#endif

/* ---- What the shim sees: registration calls, captured before main runs. ---- */
static const void *captured_wrapper;
static kparam_module_key captured_key;
static int registered_functions;

extern "C" void **__cudaRegisterFatBinary(void *fatCubin) {
  if (!captured_wrapper) captured_wrapper = fatCubin;
  captured_key = kparam_register_fatbin(fatCubin);
  return (void **)captured_key;
}
extern "C" void __cudaRegisterFatBinaryEnd(void **) {}
extern "C" void __cudaUnregisterFatBinary(void **) {}
extern "C" void __cudaRegisterFunction(void **handle, const char *hostFun, char *, const char *name,
                                       int, uint3 *, uint3 *, dim3 *, dim3 *, int *) {
  if (kparam_register_function((kparam_module_key)handle, hostFun, name) == 0)
    registered_functions++;
}

static void check_plan(const struct kparam_plan *plan, const struct expected_kernel *e,
                       const char *how) {
  if (!plan) test_fail("%s: no plan for %s", how, e->name ? e->name : "lambda");
  const char *name = e->name ? e->name : plan->name;
  if (plan->source == KPARAM_SOURCE_OPAQUE) test_fail("%s: %s is opaque", how, name);
  if (e->name && strcmp(plan->name, e->name) != 0)
    test_fail("%s: name %s, expected %s", how, plan->name, e->name);
  if (plan->param_count != e->count)
    test_fail("%s: %s has %u params, expected %u", how, name, plan->param_count, e->count);
  if (e->name && plan->param_bytes != e->param_bytes)
    test_fail("%s: %s has %u param bytes, expected %u", how, name, plan->param_bytes,
              e->param_bytes);
  for (uint32_t i = 0; i < e->count; i++) {
    const struct kparam_param *p = &plan->params[i];
    const struct expected_param *x = &e->params[i];
    if (p->ordinal != i || p->offset != x->offset || p->size != x->size || (int)p->kind != x->kind)
      test_fail("%s: %s param %u: offset %u size %u kind %s; expected %u %u %s", how, name, i,
                p->offset, p->size, kparam_kind_name(p->kind), x->offset, x->size,
                kparam_kind_name((enum kparam_kind)x->kind));
  }
}

/* The .nvFatBinSegment of the main program in memory, located through its section header and
 * the load bias dl_iterate_phdr reports. */
struct segment { const void *start; size_t size; };
static int find_bias(struct dl_phdr_info *info, size_t, void *data) {
  *(uintptr_t *)data = info->dlpi_addr;
  return 1; /* the first object is the main program */
}

static void *map_self(size_t *size) {
  int fd = open("/proc/self/exe", O_RDONLY);
  struct stat st;
  CHECK(fd >= 0 && fstat(fd, &st) == 0, "open /proc/self/exe");
  void *bytes = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  CHECK(bytes != MAP_FAILED, "mmap self");
  *size = (size_t)st.st_size;
  return bytes;
}

static bool find_section(void *file, size_t size, const char *wanted, GElf_Shdr *out) {
  elf_version(EV_CURRENT);
  Elf *elf = elf_memory((char *)file, size);
  size_t shstrndx;
  bool found = false;
  CHECK(elf && elf_getshdrstrndx(elf, &shstrndx) == 0, "libelf on self");
  for (Elf_Scn *scn = NULL; !found && (scn = elf_nextscn(elf, scn)) != NULL;) {
    const char *name;
    if (gelf_getshdr(scn, out) && (name = elf_strptr(elf, shstrndx, out->sh_name)) &&
        strcmp(name, wanted) == 0)
      found = true;
  }
  elf_end(elf);
  return found;
}

static int warnings;
static void count_warning(int level, const char *msg) {
  if (level == 0) {
    warnings++;
    fprintf(stderr, "warning: %s\n", msg);
  }
}

int main(int argc, char **argv) {
  kparam_set_log(count_warning);
  kparam_set_device_arch(90);
  struct expected_kernel expected[32];
  int count = expected_kernels(expected);
  CHECK(captured_wrapper != NULL, "no __cudaRegisterFatBinary call was seen");
  CHECK(registered_functions >= count, "not every kernel was registered");

  /* 1. The registry, exactly as the shim will use it. */
  for (int i = 0; i < count; i++) {
    const struct kparam_plan *plan = kparam_plan_for_host_fun(expected[i].host_fun);
    check_plan(plan, &expected[i], "registry");
    if (plan->source != KPARAM_SOURCE_CUBIN_EXACT || plan->sm_arch != 90)
      test_fail("registry: %s came from %s", plan->name, kparam_source_name(plan->source));
    CHECK(kparam_plan_for_host_fun(expected[i].host_fun) == plan, "plan is cached");
    /* __cudaGetKernel's handle maps to the same plan. */
    const void *handle = (const char *)expected[i].host_fun + 1;
    CHECK(kparam_register_kernel_handle(handle, expected[i].host_fun) == 0, "handle");
    CHECK(kparam_plan_for_kernel(handle) == plan, "plan by kernel handle");
  }

  /* 2. The wrapper lies in .nvFatBinSegment, found through the section and dl_iterate_phdr. */
  size_t file_size;
  void *file = map_self(&file_size);
  GElf_Shdr sh;
  CHECK(find_section(file, file_size, ".nvFatBinSegment", &sh), "no .nvFatBinSegment");
  uintptr_t bias = 0;
  dl_iterate_phdr(find_bias, &bias);
  const char *segment = (const char *)(bias + sh.sh_addr);
  bool seen = false;
  for (size_t at = 0; at + 24 <= sh.sh_size; at += 24) {
    CHECK(*(const uint32_t *)(segment + at) == 0x466243B1u, "wrapper magic");
    seen |= segment + at == captured_wrapper;
  }
  CHECK(seen, "the registered wrapper is one of .nvFatBinSegment's");
  kparam_module_key again = kparam_register_fatbin(segment);
  for (int i = 0; i < count; i++) {
    const void *fake_host_fun = (const char *)expected[i].host_fun + 2;
    const char *name = expected[i].name ? expected[i].name
                                        : kparam_plan_for_host_fun(expected[i].host_fun)->name;
    CHECK(kparam_register_function(again, fake_host_fun, name) == 0, "register again");
    check_plan(kparam_plan_for_host_fun(fake_host_fun), &expected[i], "wrapper from section");
  }
  kparam_unregister_fatbin(again);
  CHECK(kparam_plan_for_host_fun((const char *)expected[0].host_fun + 2) == NULL, "unregistered");

  /* 3. The executable file's .nv_fatbin through the image API; check compression flags. */
  CHECK(find_section(file, file_size, ".nv_fatbin", &sh), "no .nv_fatbin");
  const uint8_t *fatbin = (const uint8_t *)file + sh.sh_offset;
  uint64_t first_cubin_flags = 0;
  for (size_t at = 16; at + 64 <= sh.sh_size;) { /* the first container's entries */
    uint16_t kind = *(const uint16_t *)(fatbin + at);
    uint32_t header = *(const uint32_t *)(fatbin + at + 4);
    if (kind == 2) {
      first_cubin_flags = *(const uint64_t *)(fatbin + at + 40);
      break;
    }
    at += header + *(const uint64_t *)(fatbin + at + 8);
  }
  if ((first_cubin_flags & 0xa000) != EXPECT_COMPRESSION)
    test_fail("cubin flags 0x%llx, expected compression bits 0x%x",
              (unsigned long long)first_cubin_flags, EXPECT_COMPRESSION);
  struct kparam_image *image;
  CHECK(kparam_image_parse(fatbin, sh.sh_size, "self", 90, &image) == 0, "parse own fatbin");
  for (int i = 0; i < count; i++) {
    const char *name = expected[i].name ? expected[i].name
                                        : kparam_plan_for_host_fun(expected[i].host_fun)->name;
    check_plan(kparam_image_find(image, name), &expected[i], "image");
  }
  size_t ptx = 0;
  kparam_image_stats(image, NULL, NULL, &ptx);
  CHECK(ptx >= 1, "the fatbin has PTX");
  kparam_image_free(image);

  /* 4. PTX (argv[1], from nvcc -ptx of the same kernels) gives the same layouts. */
  if (argc > 1) {
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    CHECK(fd >= 0 && fstat(fd, &st) == 0, "open the PTX file");
    char *text = (char *)malloc((size_t)st.st_size);
    CHECK(read(fd, text, (size_t)st.st_size) == st.st_size, "read PTX");
    close(fd);
    CHECK(kparam_image_parse(text, (size_t)st.st_size, argv[1], 90, &image) == 0, "parse PTX");
    free(text); /* the image owns copies */
    for (int i = 0; i < count; i++) {
      if (!expected[i].name) continue; /* the lambda is not instantiated in that compilation */
      const struct kparam_plan *plan = kparam_image_find(image, expected[i].name);
      CHECK(plan && plan->source == KPARAM_SOURCE_PTX, "PTX source");
      check_plan(plan, &expected[i], "ptx");
    }
    kparam_image_free(image);
  }

  /* 5. Host stub analysis agrees with the metadata wherever it gives an answer. */
  int stub_ok = 0;
  for (int i = 0; i < count; i++) {
    uint32_t sizes[16];
    int n = kparam_stub_arg_sizes(expected[i].host_fun, sizes, 16);
    if (n < 0) continue;
    if ((uint32_t)n != expected[i].count)
      test_fail("stub of %s: %d slots, expected %u", expected[i].name, n, expected[i].count);
    for (int k = 0; k < n; k++)
      if (sizes[k] != expected[i].params[k].size)
        test_fail("stub of %s: slot %d size %u, expected %u", expected[i].name, k, sizes[k],
                  expected[i].params[k].size);
    stub_ok++;
  }
  printf("host stubs analysed: %d of %d\n", stub_ok, count);
  CHECK(warnings == 0, "no warnings for a valid program");
  munmap(file, file_size);
  printf("ok: %d kernels checked\n", count);
  return 0;
}
