/* Fatbin containers: walk the 16-byte container headers and the entry headers inside them.
 * Every offset read from the image is checked against the bytes we were given. */
#include "internal.h"

#include <errno.h>
#include <string.h>

#define CONTAINER_HEADER_BYTES 16u
#define ENTRY_MIN_HEADER_BYTES 64u

static uint16_t read16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t read32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t read64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

bool fatbin_is_container(const void *p, size_t size) {
  return p && size >= CONTAINER_HEADER_BYTES && read32(p) == FATBIN_CONTAINER_MAGIC;
}

size_t fatbin_container_extent(const void *p) {
  const uint8_t *bytes = p;
  if (!fatbin_is_container(p, CONTAINER_HEADER_BYTES)) return 0;
  uint16_t header_size = read16(bytes + 6);
  uint64_t fat_size = read64(bytes + 8);
  if (header_size < CONTAINER_HEADER_BYTES || fat_size > KPARAM_MAX_IMAGE_BYTES) return 0;
  return header_size + (size_t)fat_size;
}

void fatbin_iter_init(struct fatbin_iter *it, const void *data, size_t size) {
  memset(it, 0, sizeof *it);
  it->data = data;
  it->size = size;
}

static int corrupt(struct fatbin_iter *it, size_t offset) {
  it->error_offset = offset;
  it->next = it->size; /* stop iterating */
  it->container_end = it->size;
  return -EBADMSG;
}

/* Start the container at it->next; skip the zero padding linkers put between containers. */
static int open_container(struct fatbin_iter *it) {
  while (it->next < it->size && it->data[it->next] == 0) it->next++;
  if (it->next >= it->size) return 0;
  size_t at = it->next;
  if (it->size - at < CONTAINER_HEADER_BYTES || read32(it->data + at) != FATBIN_CONTAINER_MAGIC)
    return corrupt(it, at);
  uint16_t header_size = read16(it->data + at + 6);
  uint64_t fat_size = read64(it->data + at + 8);
  if (header_size < CONTAINER_HEADER_BYTES || header_size > it->size - at ||
      fat_size > it->size - at - header_size)
    return corrupt(it, at);
  it->next = at + header_size;
  it->container_end = it->next + (size_t)fat_size;
  return 1;
}

int fatbin_iter_next(struct fatbin_iter *it, struct fatbin_entry *entry) {
  for (;;) {
    if (it->next >= it->container_end) {
      it->next = it->container_end > it->next ? it->container_end : it->next;
      int rc = open_container(it);
      if (rc <= 0) return rc;
      continue;
    }
    size_t at = it->next, room = it->container_end - at;
    if (room < ENTRY_MIN_HEADER_BYTES) {
      /* Trailing padding inside a container is harmless; anything else is not. */
      for (size_t i = at; i < it->container_end; i++)
        if (it->data[i]) return corrupt(it, at);
      it->next = it->container_end;
      continue;
    }
    const uint8_t *h = it->data + at;
    uint32_t header_size = read32(h + 4);
    uint64_t size = read64(h + 8);
    if (header_size < ENTRY_MIN_HEADER_BYTES || header_size > room || size > room - header_size)
      return corrupt(it, at);
    memset(entry, 0, sizeof *entry);
    entry->kind = read16(h);
    entry->flags = read64(h + 40);
    entry->sm_arch = read32(h + 28);
    entry->decompressed_size = read64(h + 56);
    entry->payload = h + header_size;
    entry->payload_size = (size_t)size;
    uint32_t compressed_size = read32(h + 16);
    if ((entry->flags & (FATBIN_FLAG_LZ4 | FATBIN_FLAG_ZSTD)) && compressed_size &&
        compressed_size <= size)
      entry->payload_size = compressed_size; /* the rest is alignment padding */
    entry->offset = at;
    it->next = at + header_size + (size_t)size;
    return 1;
  }
}
