/* Decompression of fatbin entries: LZ4 block (flag 0x2000) and zstd frame (flag 0x8000). */
#include "internal.h"

#include <errno.h>
#include <lz4.h>
#include <stdlib.h>
#include <zstd.h>

/* Reject sizes that would make a corrupt header allocate gigabytes: an absolute bound, and one
 * by compression ratio. LZ4 cannot exceed 255:1; zstd could in theory (RLE blocks), but cubins
 * and PTX compress far below 1024:1, and a claim above that comes from a corrupt header (the
 * fuzzer found a 2 GiB claim in a few bytes). A rejected entry only leaves its kernels opaque. */
#define MAX_DECOMPRESSED_BYTES ((size_t)1 << 31)
#define MAX_LZ4_RATIO 255u
#define MAX_ZSTD_RATIO 1024u

static int plausible(size_t want, size_t payload, unsigned ratio) {
  return want > 0 && want < MAX_DECOMPRESSED_BYTES && want / ratio <= payload + 64;
}

static int lz4_block(const struct fatbin_entry *e, const uint8_t **out, size_t *out_size,
                     void **owned) {
  size_t want = (size_t)e->decompressed_size;
  if (!plausible(want, (size_t)e->payload_size, MAX_LZ4_RATIO) || e->payload_size > INT32_MAX ||
      want > INT32_MAX)
    return -EBADMSG;
  char *buffer = malloc(want);
  if (!buffer) return -ENOMEM;
  int got = LZ4_decompress_safe((const char *)e->payload, buffer, (int)e->payload_size, (int)want);
  if (got < 0) {
    free(buffer);
    return -EBADMSG;
  }
  *out = (const uint8_t *)buffer;
  *out_size = (size_t)got;
  *owned = buffer;
  return 0;
}

static int zstd_frame(const struct fatbin_entry *e, const uint8_t **out, size_t *out_size,
                      void **owned) {
  unsigned long long frame = ZSTD_getFrameContentSize(e->payload, e->payload_size);
  size_t want = (size_t)e->decompressed_size;
  if (frame != ZSTD_CONTENTSIZE_UNKNOWN && frame != ZSTD_CONTENTSIZE_ERROR) want = (size_t)frame;
  if (!plausible(want, (size_t)e->payload_size, MAX_ZSTD_RATIO)) return -EBADMSG;
  void *buffer = malloc(want);
  if (!buffer) return -ENOMEM;
  size_t got = ZSTD_decompress(buffer, want, e->payload, e->payload_size);
  if (ZSTD_isError(got)) {
    free(buffer);
    return -EBADMSG;
  }
  *out = buffer;
  *out_size = got;
  *owned = buffer;
  return 0;
}

int entry_payload(const struct fatbin_entry *entry, const uint8_t **out, size_t *out_size,
                  void **owned) {
  *owned = NULL;
  if (entry->flags & FATBIN_FLAG_ZSTD) return zstd_frame(entry, out, out_size, owned);
  if (entry->flags & FATBIN_FLAG_LZ4) return lz4_block(entry, out, out_size, owned);
  *out = entry->payload;
  *out_size = entry->payload_size;
  return 0;
}
