/* manifest.json of an image on disk: what regions the image holds, in which files, and the
 * XXH3-64 of every chunk. Written and read with libjansson; everything read is checked before
 * use, and every complaint names the manifest's path. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disk.h"

#define FORMAT_NAME "cudaw-image"
#define SUM_XXH3 "xxh3-64"
#define SUM_DEVICE "cudaw-delta-64" /* ckpt_delta_hash, taken on the device */

/* What our repacked libjansson's load.o reads instead of libc's stdin (cmake/ThirdParty.cmake):
 * never a real stream, so json_loadf never names a source "<stdin>". */
__attribute__((visibility("hidden"))) FILE *cudaw_jansson_stdin;

void manifest_free(struct manifest *m) {
  for (size_t r = 0; m->regions && r < m->region_count; r++) {
    for (size_t f = 0; f < m->regions[r].file_count; f++) {
      free(m->regions[r].files[f].sums);
      free(m->regions[r].files[f].frames);
    }
    free(m->regions[r].files);
  }
  free(m->regions);
  memset(m, 0, sizeof *m);
}

static json_t *file_json(const struct manifest_file *f) {
  json_t *sums = json_array();
  for (uint64_t c = 0; sums && c < f->chunks; c++) {
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, f->sums[c]);
    json_array_append_new(sums, json_string(hex));
  }
  json_t *frames = f->frames ? json_array() : NULL;
  for (uint64_t c = 0; frames && c < f->chunks; c++)
    json_array_append_new(frames, json_integer((json_int_t)f->frames[c]));
  return json_pack("{s:s, s:I, s:I, s:I, s:o*, s:o*}", "name", f->name, "offset",
                   (json_int_t)f->offset, "size", (json_int_t)f->size, "stored",
                   (json_int_t)f->stored, "sums", sums, "frames", frames);
}

int manifest_write(const struct manifest *m, const char *path, char *reason, size_t len) {
  json_t *regions = json_array();
  for (size_t r = 0; regions && r < m->region_count; r++) {
    const struct manifest_region *mr = &m->regions[r];
    json_t *files = json_array();
    for (size_t f = 0; files && f < mr->file_count; f++)
      json_array_append_new(files, file_json(&mr->files[f]));
    json_array_append_new(regions,
                          json_pack("{s:I, s:I, s:I, s:i, s:s, s:o*}", "id",
                                    (json_int_t)mr->region.id, "vaddr", (json_int_t)mr->region.vaddr,
                                    "size", (json_int_t)mr->region.size, "device", mr->region.device,
                                    "checksum", mr->device_sums ? SUM_DEVICE : SUM_XXH3, "files",
                                    files));
  }
  json_t *root = json_pack("{s:s, s:i, s:I, s:I, s:s, s:I, s:o*}", "format", FORMAT_NAME,
                           "version", MANIFEST_VERSION, "chunk_bytes", (json_int_t)m->chunk_bytes,
                           "file_bytes", (json_int_t)m->file_bytes, "compression",
                           m->compressed ? "zstd" : "none", "bytes", (json_int_t)m->bytes,
                           "regions", regions);
  if (!root) {
    snprintf(reason, len, "manifest %s: out of memory building it", path);
    return -ENOMEM;
  }
  /* Its owner's alone, like the image files (json_dump_file would create it 0666 & umask), and
   * never through a name someone planted. */
  unlink(path);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  int rc = fd >= 0 && json_dumpfd(root, fd, JSON_INDENT(1) | JSON_COMPACT) == 0 ? 0 : -EIO;
  if (rc) snprintf(reason, len, "manifest %s: cannot write it: %s", path, strerror(errno));
  if (fd >= 0 && close(fd) != 0 && !rc) {
    rc = -EIO;
    snprintf(reason, len, "manifest %s: cannot write it: %s", path, strerror(errno));
  }
  json_decref(root);
  return rc;
}

/* ---- reading: every value checked ---- */

struct reader {
  const char *path;
  char *reason;
  size_t len;
};

static int bad(struct reader *rd, const char *format, ...) __attribute__((format(printf, 2, 3)));

static int bad(struct reader *rd, const char *format, ...) {
  int n = snprintf(rd->reason, rd->len, "manifest %s: ", rd->path);
  if (n > 0 && (size_t)n < rd->len) {
    va_list args;
    va_start(args, format);
    vsnprintf(rd->reason + n, rd->len - (size_t)n, format, args);
    va_end(args);
  }
  return -EBADMSG;
}

static int get_u64(struct reader *rd, json_t *object, const char *where, const char *key,
                   uint64_t *out) {
  json_t *value = json_object_get(object, key);
  if (!json_is_integer(value) || json_integer_value(value) < 0)
    return bad(rd, "%s: \"%s\" missing or not a non-negative integer", where, key);
  *out = (uint64_t)json_integer_value(value);
  return 0;
}

static int read_file_entry(struct reader *rd, json_t *entry, const char *where,
                           uint64_t chunk_bytes, struct manifest_file *f) {
  const char *name = json_string_value(json_object_get(entry, "name"));
  if (!name || !*name || strchr(name, '/') || strlen(name) >= sizeof f->name || name[0] == '.')
    return bad(rd, "%s: \"name\" missing or not a plain file name", where);
  snprintf(f->name, sizeof f->name, "%s", name);
  int rc = get_u64(rd, entry, where, "offset", &f->offset);
  if (!rc) rc = get_u64(rd, entry, where, "size", &f->size);
  if (!rc) rc = get_u64(rd, entry, where, "stored", &f->stored);
  if (rc) return rc;
  if (f->size == 0 || f->offset % chunk_bytes)
    return bad(rd, "%s (%s): empty or not chunk-aligned", where, name);
  f->chunks = (f->size + chunk_bytes - 1) / chunk_bytes;
  json_t *sums = json_object_get(entry, "sums");
  if (!json_is_array(sums) || json_array_size(sums) != f->chunks)
    return bad(rd, "%s (%s): \"sums\" must list %" PRIu64 " checksums", where, name, f->chunks);
  if (!(f->sums = calloc(f->chunks, sizeof *f->sums))) return -ENOMEM;
  for (uint64_t c = 0; c < f->chunks; c++) {
    const char *hex = json_string_value(json_array_get(sums, c));
    char *end = NULL;
    if (hex) f->sums[c] = strtoull(hex, &end, 16);
    if (!hex || strlen(hex) != 16 || !end || *end)
      return bad(rd, "%s (%s): checksum %" PRIu64 " is not 16 hex digits", where, name, c);
  }
  /* Optional (zstd, one frame per chunk): absent in images written before, which still read. */
  json_t *frames = json_object_get(entry, "frames");
  if (!frames) return 0;
  if (!json_is_array(frames) || json_array_size(frames) != f->chunks)
    return bad(rd, "%s (%s): \"frames\" must list %" PRIu64 " sizes", where, name, f->chunks);
  if (!(f->frames = calloc(f->chunks, sizeof *f->frames))) return -ENOMEM;
  uint64_t total = 0;
  for (uint64_t c = 0; c < f->chunks; c++) {
    json_t *size = json_array_get(frames, c);
    if (!json_is_integer(size) || json_integer_value(size) <= 0 ||
        (uint64_t)json_integer_value(size) > f->stored - total)
      return bad(rd, "%s (%s): frame %" PRIu64 " is not a size inside the file", where, name, c);
    f->frames[c] = (uint64_t)json_integer_value(size);
    total += f->frames[c];
  }
  if (total != f->stored)
    return bad(rd, "%s (%s): frames hold %" PRIu64 " of its %" PRIu64 " stored bytes", where, name,
               total, f->stored);
  return 0;
}

static int read_region(struct reader *rd, json_t *entry, size_t index, const struct manifest *m,
                       struct manifest_region *mr) {
  char where[48];
  snprintf(where, sizeof where, "region %zu", index);
  if (!json_is_object(entry)) return bad(rd, "%s is not an object", where);
  json_t *device = json_object_get(entry, "device");
  int rc = get_u64(rd, entry, where, "id", &mr->region.id);
  if (!rc) rc = get_u64(rd, entry, where, "vaddr", &mr->region.vaddr);
  if (!rc) rc = get_u64(rd, entry, where, "size", &mr->region.size);
  if (rc) return rc;
  if (!json_is_integer(device) || json_integer_value(device) < 0 || json_integer_value(device) > 1024)
    return bad(rd, "%s: \"device\" missing or out of range", where);
  mr->region.device = (int)json_integer_value(device);
  const char *checksum = json_string_value(json_object_get(entry, "checksum"));
  if (!checksum || (strcmp(checksum, SUM_XXH3) != 0 && strcmp(checksum, SUM_DEVICE) != 0))
    return bad(rd, "%s: \"checksum\" must be \"" SUM_XXH3 "\" or \"" SUM_DEVICE "\"", where);
  mr->device_sums = strcmp(checksum, SUM_DEVICE) == 0;
  json_t *files = json_object_get(entry, "files");
  if (!json_is_array(files) || json_array_size(files) == 0)
    return bad(rd, "%s: \"files\" missing or empty", where);
  mr->file_count = json_array_size(files);
  if (!(mr->files = calloc(mr->file_count, sizeof *mr->files))) return -ENOMEM;
  uint64_t covered = 0;
  for (size_t f = 0; f < mr->file_count; f++) {
    char file_where[80];
    snprintf(file_where, sizeof file_where, "%s file %zu", where, f);
    if ((rc = read_file_entry(rd, json_array_get(files, f), file_where, m->chunk_bytes,
                              &mr->files[f])) != 0)
      return rc;
    if (mr->files[f].offset != covered || mr->files[f].size > mr->region.size - covered)
      return bad(rd, "%s: files do not cover the region in order", where);
    covered += mr->files[f].size;
  }
  if (covered != mr->region.size)
    return bad(rd, "%s: files hold %" PRIu64 " of its %" PRIu64 " bytes", where, covered,
               mr->region.size);
  return 0;
}

int manifest_read(const char *path, struct manifest *m, char *reason, size_t len) {
  struct reader rd = {path, reason, len};
  memset(m, 0, sizeof *m);
  json_error_t error;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &error);
  if (!root) {
    if (error.line < 0) /* not a parse error: the file itself */
      snprintf(reason, len, "manifest %s: %s", path, error.text);
    else
      snprintf(reason, len, "manifest %s: line %d column %d: %s", path, error.line, error.column,
               error.text);
    return error.line < 0 ? -ENOENT : -EBADMSG;
  }
  int rc = 0;
  json_t *version = json_object_get(root, "version");
  const char *format = json_string_value(json_object_get(root, "format"));
  const char *compression = json_string_value(json_object_get(root, "compression"));
  json_t *regions = json_object_get(root, "regions");
  if (!json_is_object(root) || !format || strcmp(format, FORMAT_NAME) != 0) {
    rc = bad(&rd, "not a cudaw image (\"format\" is not \"" FORMAT_NAME "\")");
  } else if (!json_is_integer(version) || json_integer_value(version) != MANIFEST_VERSION) {
    rc = bad(&rd, "format version %lld; this cudaw reads version %d",
             json_is_integer(version) ? (long long)json_integer_value(version) : -1LL,
             MANIFEST_VERSION);
  } else if (!compression || (strcmp(compression, "zstd") != 0 && strcmp(compression, "none") != 0)) {
    rc = bad(&rd, "\"compression\" must be \"zstd\" or \"none\"");
  } else if (!json_is_array(regions)) {
    rc = bad(&rd, "\"regions\" missing or not an array");
  } else if ((rc = get_u64(&rd, root, "image", "chunk_bytes", &m->chunk_bytes)) == 0 &&
             (rc = get_u64(&rd, root, "image", "file_bytes", &m->file_bytes)) == 0 &&
             (rc = get_u64(&rd, root, "image", "bytes", &m->bytes)) == 0) {
    m->compressed = strcmp(compression, "zstd") == 0;
    m->region_count = json_array_size(regions);
    if (m->chunk_bytes == 0) rc = bad(&rd, "\"chunk_bytes\" is 0");
    else if (!(m->regions = calloc(m->region_count ? m->region_count : 1, sizeof *m->regions)))
      rc = -ENOMEM;
    uint64_t total = 0;
    for (size_t r = 0; !rc && r < m->region_count; r++) {
      rc = read_region(&rd, json_array_get(regions, r), r, m, &m->regions[r]);
      total += m->regions[r].region.size;
    }
    if (!rc && total != m->bytes)
      rc = bad(&rd, "regions hold %" PRIu64 " bytes, \"bytes\" says %" PRIu64, total, m->bytes);
  }
  if (rc == -ENOMEM) snprintf(reason, len, "manifest %s: out of memory", path);
  json_decref(root);
  if (rc) manifest_free(m);
  return rc;
}
