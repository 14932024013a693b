/* Description: every fatbin in the toolkit's libcublas.so.13 and libcublasLt.so.13 parses
 * without error, every kernel gets a cubin layout, and the layouts are consistent (ordinals in
 * order, offsets increasing, sizes within the parameter block, words inside their params).
 * Prints the kernel count and the parse time. Skips if the libraries are absent. */
#include <time.h>

#include "kparam.h"
#include "elf_section.h"
#include "../common/test.h"

static int warnings;
static void on_log(int level, const char *msg) {
  if (level == 0 && warnings++ < 5) fprintf(stderr, "warning: %s\n", msg);
}

int main(int argc, char **argv) {
  kparam_set_log(on_log);
  int parsed = 0;
  for (int f = 1; f < argc; f++) {
    size_t file_size, size;
    const unsigned char *fatbin;
    void *file = map_section(argv[f], ".nv_fatbin", &file_size, &fatbin, &size);
    if (!file) {
      printf("%s: absent\n", argv[f]);
      continue;
    }
    CHECK(fatbin != NULL, "library without .nv_fatbin");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct kparam_image *image;
    int rc = kparam_image_parse(fatbin, size, argv[f], 90, &image);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc != 0) test_fail("%s: parse failed: %d", argv[f], rc);
    size_t entries, cubins, ptx, count = kparam_image_kernel_count(image), exact = 0;
    kparam_image_stats(image, &entries, &cubins, &ptx);
    for (size_t i = 0; i < count; i++) {
      const struct kparam_plan *p = kparam_image_kernel(image, i);
      if (p->source == KPARAM_SOURCE_OPAQUE || p->source == KPARAM_SOURCE_HOST_STUB)
        test_fail("%s: %s has no layout", argv[f], p->name);
      exact += p->source == KPARAM_SOURCE_CUBIN_EXACT;
      uint32_t end = 0;
      for (uint32_t k = 0; k < p->param_count; k++) {
        const struct kparam_param *q = &p->params[k];
        if (q->ordinal != k || q->offset < end || q->size == 0 ||
            q->offset + q->size > p->param_bytes)
          test_fail("%s: %s param %u: offset %u size %u (previous end %u, block %u)", argv[f],
                    p->name, k, q->offset, q->size, end, p->param_bytes);
        end = q->offset + q->size;
      }
      CHECK(p->param_bytes <= 32768, "parameter block within the constant bank");
      for (uint32_t w = 0; w < p->word_count; w++) {
        const struct kparam_word *word = &p->words[w];
        const struct kparam_param *q = &p->params[word->param];
        CHECK(word->offset_in_param + 8 <= q->size, "word inside its param");
        CHECK((q->offset + word->offset_in_param) % 8 == 0, "word aligned");
      }
    }
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    printf("%s: %zu entries (%zu cubins, %zu PTX), %zu kernels (%zu from sm_90 cubins), "
           "parsed in %.0f ms\n", argv[f], entries, cubins, ptx, count, exact, ms);
    CHECK(count > 0, "kernels found");
    kparam_image_free(image);
    munmap(file, file_size);
    parsed++;
  }
  if (parsed == 0) test_skip("none of the corpus libraries exist");
  CHECK(warnings == 0, "no warnings on the corpus");
  printf("ok\n");
  return 0;
}
