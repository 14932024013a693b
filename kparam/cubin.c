/* Cubin ELF images: per-kernel parameter layouts from the .nv.info.<kernel> sections
 * (EIATTR_KPARAM_INFO, EIATTR_KPARAM_INFO_V2, EIATTR_CBANK_PARAM_SIZE), read with libelf. */
#include "internal.h"

#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>

#define NV_INFO_PREFIX ".nv.info."

/* .nv.info record formats and the attributes we read. */
enum { FORMAT_NVAL = 1, FORMAT_BVAL = 2, FORMAT_HVAL = 3, FORMAT_SVAL = 4 };
enum { ATTR_KPARAM_INFO = 0x17, ATTR_CBANK_PARAM_SIZE = 0x19, ATTR_KPARAM_INFO_V2 = 0x45 };

static uint16_t read16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t read32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

bool cubin_is_elf(const void *p, size_t size) {
  const unsigned char *b = p;
  return p && size >= sizeof(Elf64_Ehdr) && memcmp(b, ELFMAG, SELFMAG) == 0 &&
         b[EI_CLASS] == ELFCLASS64 && b[EI_DATA] == ELFDATA2LSB;
}

size_t cubin_extent(const void *p) {
  if (!cubin_is_elf(p, sizeof(Elf64_Ehdr))) return 0;
  Elf64_Ehdr eh;
  memcpy(&eh, p, sizeof eh);
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > KPARAM_MAX_IMAGE_BYTES) return 0;
  size_t end = (size_t)eh.e_shoff + (size_t)eh.e_shnum * sizeof(Elf64_Shdr);
  if (eh.e_phoff + (size_t)eh.e_phnum * eh.e_phentsize > end)
    end = eh.e_phoff + (size_t)eh.e_phnum * eh.e_phentsize;
  for (unsigned i = 0; i < eh.e_shnum; i++) {
    Elf64_Shdr sh;
    memcpy(&sh, (const uint8_t *)p + eh.e_shoff + (size_t)i * sizeof sh, sizeof sh);
    if (sh.sh_type != SHT_NOBITS && sh.sh_offset + sh.sh_size > end &&
        sh.sh_offset + sh.sh_size <= KPARAM_MAX_IMAGE_BYTES)
      end = sh.sh_offset + sh.sh_size;
  }
  return end;
}

/* One parameter record seen in the info section. */
struct record {
  uint32_t ordinal, offset, size;
};

struct info_scan {
  struct record *records;
  size_t count, capacity;
  uint32_t cbank_size;
  bool have_cbank_size;
};

static int add_record(struct info_scan *scan, uint32_t ordinal, uint32_t offset, uint32_t size) {
  if (scan->count == scan->capacity) {
    size_t capacity = scan->capacity ? scan->capacity * 2 : 16;
    if (capacity > KPARAM_MAX_PARAMS) return -EBADMSG;
    struct record *grown = realloc(scan->records, capacity * sizeof *grown);
    if (!grown) return -ENOMEM;
    scan->records = grown;
    scan->capacity = capacity;
  }
  scan->records[scan->count++] = (struct record){ordinal, offset, size};
  return 0;
}

/* Walk the records of one .nv.info.<kernel> section. *bad is the offset of a bad record. */
static int scan_info(const uint8_t *data, size_t size, struct info_scan *scan, size_t *bad) {
  size_t at = 0;
  while (at < size) {
    if (size - at < 4) goto corrupt;
    uint8_t format = data[at], attribute = data[at + 1];
    size_t payload = 2, length = 2;
    if (format == FORMAT_SVAL) {
      length = read16(data + at + 2);
      payload = 4;
      if (length > size - at - payload) goto corrupt;
    } else if (format != FORMAT_NVAL && format != FORMAT_BVAL && format != FORMAT_HVAL) {
      goto corrupt;
    }
    const uint8_t *value = data + at + payload;
    if (format == FORMAT_SVAL && attribute == ATTR_KPARAM_INFO) {
      if (length < 12) goto corrupt;
      int rc = add_record(scan, read16(value + 4), read16(value + 6), read32(value + 8) >> 18);
      if (rc) return rc == -EBADMSG ? (*bad = at, rc) : rc;
    } else if (format == FORMAT_SVAL && attribute == ATTR_KPARAM_INFO_V2) {
      if (length < 12) goto corrupt;
      int rc = add_record(scan, read16(value + 4), read16(value + 6), read32(value + 8));
      if (rc) return rc == -EBADMSG ? (*bad = at, rc) : rc;
    } else if (format == FORMAT_HVAL && attribute == ATTR_CBANK_PARAM_SIZE) {
      scan->cbank_size = read16(data + at + 2);
      scan->have_cbank_size = true;
    }
    at += format == FORMAT_SVAL ? payload + length : 4;
  }
  return 0;
corrupt:
  *bad = at;
  return -EBADMSG;
}

/* Turn the records into a layout ordered by ordinal; reject gaps, duplicates, overflow. */
static int build_layout(const char *name, struct info_scan *scan, struct kparam_layout *out) {
  memset(out, 0, sizeof *out);
  uint32_t count = 0, end = 0;
  for (size_t i = 0; i < scan->count; i++)
    if (scan->records[i].ordinal + 1 > count) count = scan->records[i].ordinal + 1;
  if (count != scan->count) return -EBADMSG;
  out->params = calloc(count ? count : 1, sizeof *out->params);
  out->name = strdup(name);
  if (!out->params || !out->name) {
    layout_free(out);
    return -ENOMEM;
  }
  for (size_t i = 0; i < scan->count; i++) {
    struct record r = scan->records[i];
    struct kparam_param *p = &out->params[r.ordinal];
    if (p->size != 0 || r.size == 0 || r.size > KPARAM_MAX_PARAM_BYTES) goto bad;
    *p = (struct kparam_param){r.ordinal, r.offset, r.size, KPARAM_KIND_UNKNOWN};
    if (r.offset + r.size > end) end = r.offset + r.size;
  }
  for (uint32_t i = 1; i < count; i++)
    if (out->params[i].offset < out->params[i - 1].offset + out->params[i - 1].size) goto bad;
  if (scan->have_cbank_size) {
    if (scan->cbank_size < end) goto bad;
    end = scan->cbank_size;
  }
  out->count = count;
  out->param_bytes = end;
  return 0;
bad:
  layout_free(out);
  return -EBADMSG;
}

static int parse_elf(Elf *elf, const uint8_t *image, size_t size, struct kparam_layout_list *out,
                     size_t *error_offset) {
  size_t shstrndx;
  if (elf_kind(elf) != ELF_K_ELF || gelf_getclass(elf) != ELFCLASS64 ||
      elf_getshdrstrndx(elf, &shstrndx) != 0) {
    *error_offset = 0;
    return -EBADMSG;
  }
  Elf_Scn *scn = NULL;
  while ((scn = elf_nextscn(elf, scn)) != NULL) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) return (*error_offset = 0, -EBADMSG);
    const char *name = elf_strptr(elf, shstrndx, sh.sh_name);
    if (!name || strncmp(name, NV_INFO_PREFIX, sizeof NV_INFO_PREFIX - 1) != 0) continue;
    if (sh.sh_type == SHT_NOBITS || sh.sh_offset > size || sh.sh_size > size - sh.sh_offset)
      return (*error_offset = (size_t)sh.sh_offset, -EBADMSG);
    struct info_scan scan = {0};
    size_t bad = 0;
    int rc = scan_info(image + sh.sh_offset, (size_t)sh.sh_size, &scan, &bad);
    struct kparam_layout layout;
    if (rc == 0) rc = build_layout(name + sizeof NV_INFO_PREFIX - 1, &scan, &layout);
    free(scan.records);
    if (rc == 0) {
      rc = layout_list_push(out, &layout);
      if (rc) layout_free(&layout);
    }
    if (rc) {
      *error_offset = (size_t)sh.sh_offset + bad;
      return rc;
    }
  }
  return 0;
}

int cubin_parse(const void *image, size_t size, struct kparam_layout_list *out,
                size_t *error_offset) {
  *error_offset = 0;
  if (!cubin_is_elf(image, size)) return -EBADMSG;
  /* libelf accepts an image cut short and just sees fewer sections: check the bounds first. */
  Elf64_Ehdr eh;
  memcpy(&eh, image, sizeof eh);
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > size ||
      (size_t)eh.e_shnum * sizeof(Elf64_Shdr) > size - eh.e_shoff)
    return (*error_offset = offsetof(Elf64_Ehdr, e_shoff), -EBADMSG);
  for (unsigned i = 0; i < eh.e_shnum; i++) {
    Elf64_Shdr sh;
    size_t at = (size_t)eh.e_shoff + (size_t)i * sizeof sh;
    memcpy(&sh, (const uint8_t *)image + at, sizeof sh);
    if (sh.sh_type != SHT_NOBITS && (sh.sh_offset > size || sh.sh_size > size - sh.sh_offset))
      return (*error_offset = at, -EBADMSG);
  }
  elf_version(EV_CURRENT);
  /* libelf only reads here: the image is native 64-bit little-endian, so nothing is converted
   * in place (the fatbin may sit in read-only memory). */
  Elf *elf = elf_memory((char *)(uintptr_t)image, size);
  if (!elf) return -EBADMSG;
  int rc = parse_elf(elf, image, size, out, error_offset);
  elf_end(elf);
  return rc;
}
