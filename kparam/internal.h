/* Internal interfaces between kparam's files. Not installed; kparam.h is the public contract. */
#ifndef CUDAW_KPARAM_INTERNAL_H
#define CUDAW_KPARAM_INTERNAL_H

#include "kparam.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KPARAM_HIDDEN __attribute__((visibility("hidden")))

/* Bounds that reject absurd values read from images before they drive allocations. */
#define KPARAM_MAX_PARAMS 4096u
#define KPARAM_MAX_PARAM_BYTES (1u << 20)
#define KPARAM_MAX_IMAGE_BYTES ((size_t)1 << 32)

/* A kernel's layout without kinds. name and params are owned (malloc). */
struct kparam_layout {
  char *name;
  uint32_t count;
  uint32_t param_bytes;
  struct kparam_param *params; /* ordered by ordinal; kind filled by whoever knows */
};

/* A list of layouts, as one cubin or PTX entry yields it. */
struct kparam_layout_list {
  struct kparam_layout *items;
  size_t count, capacity;
};

KPARAM_HIDDEN int layout_list_push(struct kparam_layout_list *list, struct kparam_layout *layout);
KPARAM_HIDDEN void layout_list_free(struct kparam_layout_list *list);
KPARAM_HIDDEN void layout_free(struct kparam_layout *layout);

/* log.c: printf-style message routed to kparam_set_log's callback. */
KPARAM_HIDDEN void kparam_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define kparam_warn(...) kparam_log(0, __VA_ARGS__)

/* fatbin.c: iterate the entries of one or more concatenated containers. */
#define FATBIN_CONTAINER_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243B1u
#define FATBIN_KIND_PTX 1
#define FATBIN_KIND_ELF 2
#define FATBIN_FLAG_LZ4 0x2000u
#define FATBIN_FLAG_ZSTD 0x8000u

struct fatbin_entry {
  unsigned kind;            /* FATBIN_KIND_* */
  unsigned sm_arch;         /* e.g. 90 */
  uint64_t flags;
  const uint8_t *payload;   /* stored bytes, maybe compressed */
  size_t payload_size;
  uint64_t decompressed_size;
  size_t offset;            /* of the entry header from the start of the iterated data */
};

struct fatbin_iter {
  const uint8_t *data;
  size_t size;
  size_t container_end; /* 0 before the first container */
  size_t next;
  size_t error_offset;  /* where the last -EBADMSG was found */
};

KPARAM_HIDDEN void fatbin_iter_init(struct fatbin_iter *it, const void *data, size_t size);
/* 1: *entry filled; 0: no more; -EBADMSG: corrupt at it->error_offset. */
KPARAM_HIDDEN int fatbin_iter_next(struct fatbin_iter *it, struct fatbin_entry *entry);
/* The bytes a container occupies in memory, read from its header; 0 if p is not a container. */
KPARAM_HIDDEN size_t fatbin_container_extent(const void *p);
KPARAM_HIDDEN bool fatbin_is_container(const void *p, size_t size);

/* decompress.c: the plain bytes of an entry. *owned is set to a malloc'd buffer to free when
 * decompression was needed (else NULL and *out points into the entry). -EBADMSG if corrupt. */
KPARAM_HIDDEN int entry_payload(const struct fatbin_entry *entry, const uint8_t **out,
                                size_t *out_size, void **owned);

/* cubin.c: layouts of every kernel in a cubin ELF image. *error_offset on -EBADMSG. */
KPARAM_HIDDEN bool cubin_is_elf(const void *p, size_t size);
KPARAM_HIDDEN size_t cubin_extent(const void *p);
KPARAM_HIDDEN int cubin_parse(const void *image, size_t size, struct kparam_layout_list *out,
                              size_t *error_offset);

/* ptx.c: layouts of every .entry of PTX text. */
KPARAM_HIDDEN bool ptx_is_text(const void *p, size_t size);
KPARAM_HIDDEN int ptx_parse(const char *text, size_t size, struct kparam_layout_list *out,
                            size_t *error_offset);

/* plan.c: a plan from a layout (kinds decoded from the name), or an opaque one. */
KPARAM_HIDDEN struct kparam_plan *plan_build(const struct kparam_layout *layout,
                                             enum kparam_source source, int sm_arch);
KPARAM_HIDDEN struct kparam_plan *plan_opaque(const char *name);
KPARAM_HIDDEN void plan_free(struct kparam_plan *plan);

/* image.c: a fatbin image whose entries are parsed on demand. */
struct image;
KPARAM_HIDDEN int image_open(const void *data, size_t size, const char *label, struct image **out);
/* Layout of kernel name, searching exact-arch cubins, other cubins, then PTX. NULL if absent. */
KPARAM_HIDDEN const struct kparam_layout *image_lookup(struct image *image, const char *name,
                                                       int prefer_sm, enum kparam_source *source,
                                                       int *sm_arch);
KPARAM_HIDDEN int image_parse_all(struct image *image);
KPARAM_HIDDEN void image_close(struct image *image);
KPARAM_HIDDEN void image_counts(const struct image *image, size_t *entries, size_t *cubins,
                                size_t *ptx);
/* Call fn for every kernel name across all parsed entries (duplicates included). */
KPARAM_HIDDEN void image_each_name(struct image *image, void (*fn)(void *ctx, const char *name),
                                   void *ctx);

/* hash.c: open-addressing map from nonzero 64-bit keys to pointers. Not thread-safe. */
struct hash_map {
  uint64_t *keys;
  void **values;
  size_t capacity, count;
};
KPARAM_HIDDEN void *hash_get(const struct hash_map *map, uint64_t key);
KPARAM_HIDDEN int hash_put(struct hash_map *map, uint64_t key, void *value);
KPARAM_HIDDEN void *hash_remove(struct hash_map *map, uint64_t key);
KPARAM_HIDDEN void hash_free(struct hash_map *map);
KPARAM_HIDDEN uint64_t hash_string(const char *s);

#endif
