/* Fatbin images: the entries of one image (containers, a bare cubin or PTX text), each parsed on
 * first use and cached, and the search for a kernel's layout in order of preference. */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct image_entry {
  struct fatbin_entry entry;
  bool parsed, failed;
  struct kparam_layout_list layouts;
  struct hash_map by_name; /* hash_string(name) -> index + 1 */
};

struct image {
  char *label;
  struct image_entry *entries;
  size_t count, cubins, ptx;
};

static int add_entry(struct image *image, const struct fatbin_entry *entry, size_t *capacity) {
  if (image->count == *capacity) {
    *capacity = *capacity ? *capacity * 2 : 8;
    struct image_entry *grown = realloc(image->entries, *capacity * sizeof *grown);
    if (!grown) return -ENOMEM;
    image->entries = grown;
  }
  memset(&image->entries[image->count], 0, sizeof image->entries[0]);
  image->entries[image->count++].entry = *entry;
  if (entry->kind == FATBIN_KIND_ELF) image->cubins++;
  if (entry->kind == FATBIN_KIND_PTX) image->ptx++;
  return 0;
}

/* The sm arch a cubin was built for, from e_flags (CUDA 12+ keeps it in bits 8..15, older
 * toolkits in bits 0..7). */
static unsigned cubin_arch(const uint8_t *elf) {
  uint32_t flags;
  memcpy(&flags, elf + 48, sizeof flags);
  unsigned newer = (flags >> 8) & 0xff, older = flags & 0xff;
  return newer >= 30 ? newer : older;
}

int image_open(const void *data, size_t size, const char *label, struct image **out) {
  struct image *image = calloc(1, sizeof *image);
  if (!image) return -ENOMEM;
  char fallback[32];
  snprintf(fallback, sizeof fallback, "%p", data);
  image->label = strdup(label && *label ? label : fallback);
  if (!image->label) {
    free(image);
    return -ENOMEM;
  }
  size_t capacity = 0;
  int rc = 0;
  struct fatbin_entry entry = {0};
  if (cubin_is_elf(data, size)) {
    entry = (struct fatbin_entry){FATBIN_KIND_ELF, cubin_arch(data), 0, data, size, 0, 0};
    rc = add_entry(image, &entry, &capacity);
  } else if (fatbin_is_container(data, size)) {
    struct fatbin_iter it;
    fatbin_iter_init(&it, data, size);
    while ((rc = fatbin_iter_next(&it, &entry)) > 0)
      if ((entry.kind == FATBIN_KIND_ELF || entry.kind == FATBIN_KIND_PTX) &&
          (rc = add_entry(image, &entry, &capacity)) < 0)
        break;
    if (rc == -EBADMSG)
      kparam_warn("fatbin %s: corrupt container or entry header at offset %zu; kernels after it "
                  "are unknown", image->label, it.error_offset);
  } else if (ptx_is_text(data, size)) {
    entry = (struct fatbin_entry){FATBIN_KIND_PTX, 0, 0, data, size, 0, 0};
    rc = add_entry(image, &entry, &capacity);
  } else {
    kparam_warn("fatbin %s: neither a fatbin container, a cubin nor PTX (offset 0)", image->label);
    rc = -EBADMSG;
  }
  *out = image;
  return rc < 0 ? rc : 0;
}

static void parse_entry(struct image *image, struct image_entry *e) {
  if (e->parsed) return;
  e->parsed = true;
  const uint8_t *bytes;
  size_t size, bad = 0;
  void *owned = NULL;
  int rc = entry_payload(&e->entry, &bytes, &size, &owned);
  if (rc == -EBADMSG) {
    kparam_warn("fatbin %s: entry at offset %zu: corrupt %s payload", image->label,
                e->entry.offset, (e->entry.flags & FATBIN_FLAG_ZSTD) ? "zstd" : "LZ4");
    e->failed = true;
    return;
  }
  if (rc == 0)
    rc = e->entry.kind == FATBIN_KIND_ELF ? cubin_parse(bytes, size, &e->layouts, &bad)
                                          : ptx_parse((const char *)bytes, size, &e->layouts, &bad);
  free(owned);
  for (size_t i = 0; rc == 0 && i < e->layouts.count; i++)
    rc = hash_put(&e->by_name, hash_string(e->layouts.items[i].name), (void *)(i + 1));
  if (rc) {
    kparam_warn("fatbin %s: entry at offset %zu (%s, sm_%u): %s at byte %zu of its payload",
                image->label, e->entry.offset, e->entry.kind == FATBIN_KIND_ELF ? "cubin" : "PTX",
                e->entry.sm_arch, rc == -EBADMSG ? "corrupt" : "out of memory", bad);
    layout_list_free(&e->layouts);
    hash_free(&e->by_name);
    e->failed = true;
  }
}

static const struct kparam_layout *find_in_entry(const struct image_entry *e, const char *name) {
  size_t index = (size_t)hash_get(&e->by_name, hash_string(name));
  if (index && strcmp(e->layouts.items[index - 1].name, name) == 0)
    return &e->layouts.items[index - 1];
  if (!index) return NULL;
  for (size_t i = 0; i < e->layouts.count; i++) /* a hash collision */
    if (strcmp(e->layouts.items[i].name, name) == 0) return &e->layouts.items[i];
  return NULL;
}

const struct kparam_layout *image_lookup(struct image *image, const char *name, int prefer_sm,
                                         enum kparam_source *source, int *sm_arch) {
  for (int pass = 0; pass < 3; pass++) {
    for (size_t i = 0; i < image->count; i++) {
      struct image_entry *e = &image->entries[i];
      bool exact = prefer_sm > 0 && e->entry.sm_arch == (unsigned)prefer_sm;
      if (pass == 0 && !(e->entry.kind == FATBIN_KIND_ELF && exact)) continue;
      if (pass == 1 && !(e->entry.kind == FATBIN_KIND_ELF && !exact)) continue;
      if (pass == 2 && e->entry.kind != FATBIN_KIND_PTX) continue;
      parse_entry(image, e);
      const struct kparam_layout *layout = find_in_entry(e, name);
      if (!layout) continue;
      *source = pass == 0 ? KPARAM_SOURCE_CUBIN_EXACT
                : pass == 1 ? KPARAM_SOURCE_CUBIN_OTHER_ARCH
                            : KPARAM_SOURCE_PTX;
      *sm_arch = pass == 2 ? 0 : (int)e->entry.sm_arch;
      return layout;
    }
  }
  return NULL;
}

int image_parse_all(struct image *image) {
  int rc = 0;
  for (size_t i = 0; i < image->count; i++) {
    parse_entry(image, &image->entries[i]);
    if (image->entries[i].failed) rc = -EBADMSG;
  }
  return rc;
}

void image_each_name(struct image *image, void (*fn)(void *ctx, const char *name), void *ctx) {
  for (size_t i = 0; i < image->count; i++)
    for (size_t k = 0; k < image->entries[i].layouts.count; k++)
      fn(ctx, image->entries[i].layouts.items[k].name);
}

void image_counts(const struct image *image, size_t *entries, size_t *cubins, size_t *ptx) {
  if (entries) *entries = image->count;
  if (cubins) *cubins = image->cubins;
  if (ptx) *ptx = image->ptx;
}

void image_close(struct image *image) {
  if (!image) return;
  for (size_t i = 0; i < image->count; i++) {
    layout_list_free(&image->entries[i].layouts);
    hash_free(&image->entries[i].by_name);
  }
  free(image->entries);
  free(image->label);
  free(image);
}
