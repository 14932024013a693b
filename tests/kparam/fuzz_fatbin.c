/* libFuzzer target over kparam's image parser: fatbin containers, entries, zstd/LZ4 payloads,
 * cubin .nv.info records, PTX parameter lists and mangled names. Any crash, overread or leak
 * is a bug: a bad fatbin must only ever produce a warning. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kparam.h"

static void quiet(int level, const char *msg) { (void)level, (void)msg; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kparam_set_log(quiet);
  struct kparam_image *image = NULL;
  if (kparam_image_parse(data, size, "fuzz", 90, &image) != -EINVAL)
    for (size_t i = 0; i < kparam_image_kernel_count(image); i++)
      (void)kparam_image_kernel(image, i)->word_count;
  kparam_image_free(image);
  char *name = malloc(size + 1); /* the same bytes as a mangled name */
  memcpy(name, data, size);
  name[size] = '\0';
  enum kparam_kind kinds[16];
  kparam_demangle_kinds(name, kinds, 16);
  free(name);
  return 0;
}
