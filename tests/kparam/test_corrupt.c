/* Description: truncated and bit-flipped fatbin containers and cubins never crash the parser;
 * truncations that cut a header are reported as errors, and the warning names the image and
 * the byte offset. argv[1], when given, is an nvcc-built executable whose first raw cubin is
 * corrupted too. */
#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "kparam.h"
#include "elf_section.h"
#include "../common/test.h"

static char last_warning[512];
static int warnings;
static void on_log(int level, const char *msg) {
  if (level == 0) {
    warnings++;
    snprintf(last_warning, sizeof last_warning, "%s", msg);
  }
}

static int parse(const void *data, size_t size) {
  struct kparam_image *image = NULL;
  int rc = kparam_image_parse(data, size, "corrupt-test", 90, &image);
  for (size_t i = 0; i < kparam_image_kernel_count(image); i++)
    (void)kparam_image_kernel(image, i)->param_count;
  kparam_image_free(image);
  return rc;
}

static const char ptx[] = "//\n.version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry _Z1kiPf(.param .u32 a, .param .u64 b)\n{ ret; }\n";

/* A container holding one uncompressed PTX entry (80-byte header, as nvcc writes it). */
static size_t make_container(unsigned char *out) {
  size_t payload = (sizeof ptx + 7) & ~(size_t)7;
  memset(out, 0, 16 + 80 + payload);
  uint32_t magic = 0xBA55ED50u, header = 80;
  uint16_t version = 1, header_size = 16, kind = 1, entry_version = 0x0101;
  uint64_t fat_size = 80 + payload, size = payload, flags = 0x11;
  uint32_t arch = 90;
  memcpy(out, &magic, 4);
  memcpy(out + 4, &version, 2);
  memcpy(out + 6, &header_size, 2);
  memcpy(out + 8, &fat_size, 8);
  unsigned char *e = out + 16;
  memcpy(e, &kind, 2);
  memcpy(e + 2, &entry_version, 2);
  memcpy(e + 4, &header, 4);
  memcpy(e + 8, &size, 8);
  memcpy(e + 28, &arch, 4);
  memcpy(e + 40, &flags, 8);
  memcpy(e + 80, ptx, sizeof ptx);
  return 16 + 80 + payload;
}

static void flip_everything(const unsigned char *data, size_t size, size_t stride) {
  unsigned char *copy = malloc(size);
  for (size_t at = 0; at < size; at += stride)
    for (int bit = 0; bit < 8; bit++) {
      memcpy(copy, data, size);
      copy[at] ^= (unsigned char)(1u << bit);
      parse(copy, size);
    }
  free(copy);
}

static void truncate_everywhere(const unsigned char *data, size_t size, size_t stride) {
  for (size_t n = 1; n < size; n += stride) {
    unsigned char *copy = malloc(n); /* exact size: ASan sees any overread */
    memcpy(copy, data, n);
    parse(copy, n);
    free(copy);
  }
}

int main(int argc, char **argv) {
  kparam_set_log(on_log);
  unsigned char container[1024];
  size_t size = make_container(container);
  CHECK(parse(container, size) == 0, "the synthetic container is valid");
  CHECK_EQ(warnings, 0);

  /* A container cut inside the entry header: an error naming the offset of that entry. */
  CHECK(parse(container, 16 + 40) == -EBADMSG, "truncated container");
  CHECK(strstr(last_warning, "corrupt-test") && strstr(last_warning, "offset 0"),
        "warning names the image and offset");
  /* A second container with a bad magic after a good one: offset of the second. */
  unsigned char two[2048];
  memcpy(two, container, size);
  memcpy(two + size, container, size);
  two[size] ^= 0xff;
  CHECK(parse(two, 2 * size) == -EBADMSG, "bad second container");
  char expect[64];
  snprintf(expect, sizeof expect, "offset %zu", size);
  if (!strstr(last_warning, expect)) test_fail("warning '%s' lacks '%s'", last_warning, expect);
  /* An entry whose size runs past its container. */
  unsigned char bad_entry[1024];
  memcpy(bad_entry, container, size);
  uint64_t huge = 1u << 20;
  memcpy(bad_entry + 16 + 8, &huge, 8);
  CHECK(parse(bad_entry, size) == -EBADMSG, "entry past its container");
  CHECK(strstr(last_warning, "offset 16") != NULL, "names the entry offset");

  /* Regression (found by the fuzzer): a zstd frame of a few bytes whose header claims 2 GiB of
   * content made the parser allocate 2 GiB. With the address space capped below that, the claim
   * must be refused as corrupt, not attempted (under the cap the attempt reports "out of
   * memory"; without it, it allocates 2 GiB). */
  unsigned char claim[1024];
  memcpy(claim, container, size);
  uint64_t zstd_flags = 0x8011;
  memcpy(claim + 16 + 40, &zstd_flags, 8);
  static const unsigned char frame[] = {0x28, 0xb5, 0x2f, 0xfd, 0xa0, 0x00, 0x00, 0x00, 0x80,
                                        0x01, 0x00, 0x00};
  memcpy(claim + 16 + 80, frame, sizeof frame);
  struct rlimit saved, capped;
  CHECK(getrlimit(RLIMIT_AS, &saved) == 0);
  capped = saved;
  capped.rlim_cur = (rlim_t)1 << 30;
  int limited = saved.rlim_cur == RLIM_INFINITY || saved.rlim_cur > capped.rlim_cur;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  limited = 0; /* the sanitizer's shadow memory alone is far above the cap */
#endif
  if (limited) limited = setrlimit(RLIMIT_AS, &capped) == 0;
  int claimed = parse(claim, size);
  if (limited) CHECK(setrlimit(RLIMIT_AS, &saved) == 0);
  CHECK(claimed == -EBADMSG && strstr(last_warning, "corrupt zstd payload"),
        "a 2 GiB zstd claim in %zu bytes was attempted, not refused: %d, '%s'", size, claimed,
        last_warning);

  truncate_everywhere(container, size, 1);
  flip_everything(container, size, 1);

  if (argc > 1) {
    size_t file_size, fatbin_size;
    const unsigned char *fatbin;
    void *file = map_section(argv[1], ".nv_fatbin", &file_size, &fatbin, &fatbin_size);
    CHECK(file && fatbin, "the executable has a .nv_fatbin");
    /* The first raw cubin entry. */
    const unsigned char *cubin = NULL;
    uint64_t cubin_size = 0;
    for (size_t at = 16; at + 64 <= fatbin_size;) {
      uint16_t kind;
      uint32_t header;
      uint64_t entry_size, flags;
      memcpy(&kind, fatbin + at, 2);
      memcpy(&header, fatbin + at + 4, 4);
      memcpy(&entry_size, fatbin + at + 8, 8);
      memcpy(&flags, fatbin + at + 40, 8);
      if (kind == 2 && !(flags & 0xa000)) {
        cubin = fatbin + at + header;
        cubin_size = entry_size;
        break;
      }
      at += header + entry_size;
    }
    CHECK(cubin != NULL, "a raw cubin");
    CHECK(parse(cubin, cubin_size) == 0, "the cubin is valid");
    warnings = 0;
    CHECK(parse(cubin, cubin_size / 2) == -EBADMSG, "half a cubin");
    CHECK(warnings > 0 && strstr(last_warning, "offset"), "warning names an offset");
    truncate_everywhere(cubin, cubin_size, 97);
    flip_everything(cubin, cubin_size, 61);
    /* And the whole section, bit-flipped in its headers. */
    flip_everything(fatbin, fatbin_size < 4096 ? fatbin_size : 4096, 7);
    munmap(file, file_size);
  }
  printf("ok (%d warnings)\n", warnings);
  return 0;
}
