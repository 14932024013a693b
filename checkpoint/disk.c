/* Images on disk: the engine's host image written to a directory of chunk files plus
 * manifest.json, and read back with every chunk verified. Files are written and read by
 * several threads at once; each written file is synced and dropped from the page cache, so
 * that the image really leaves host memory and survives a reboot. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "delta_hash.h"
#include "disk.h"

#define FILE_TARGET_BYTES (64ull << 20)
#define ZSTD_LEVEL 1 /* device memory compresses little; spend as little time as possible */

struct file_task {
  struct manifest_file *file;
  uint8_t *data;  /* the file's bytes in the image */
  uint64_t *sums; /* the engine's checksums for its chunks */
  bool device_sums; /* which checksum (see struct manifest_region) */
};

struct disk_job {
  const char *dir;
  bool write, compressed;
  uint64_t chunk_bytes;
  struct file_task *tasks;
  size_t task_count;
  _Atomic size_t next;
  _Atomic uint64_t stored;
  pthread_mutex_t lock;
  int error;
  char *reason;
  size_t reason_len;
};

static void job_fail(struct disk_job *job, int error, const char *name, const char *format, ...)
    __attribute__((format(printf, 4, 5)));

static void job_fail(struct disk_job *job, int error, const char *name, const char *format, ...) {
  pthread_mutex_lock(&job->lock);
  if (!job->error) {
    job->error = error;
    int n = snprintf(job->reason, job->reason_len, "image file %s/%s: ", job->dir, name);
    if (n > 0 && (size_t)n < job->reason_len) {
      va_list args;
      va_start(args, format);
      vsnprintf(job->reason + n, job->reason_len - (size_t)n, format, args);
      va_end(args);
    }
  }
  pthread_mutex_unlock(&job->lock);
}

static int write_all(int fd, const uint8_t *data, uint64_t n) {
  for (uint64_t done = 0; done < n;) {
    size_t piece = n - done > (1u << 30) ? (1u << 30) : (size_t)(n - done);
    ssize_t w = write(fd, data + done, piece);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -errno;
    if (w == 0) return -ENOSPC;
    done += (uint64_t)w;
  }
  return 0;
}

/* 0, or -errno; *got is how many bytes were there before end of file. */
static int read_all(int fd, uint8_t *data, uint64_t n, uint64_t *got) {
  for (*got = 0; *got < n;) {
    size_t piece = n - *got > (1u << 30) ? (1u << 30) : (size_t)(n - *got);
    ssize_t r = read(fd, data + *got, piece);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -errno;
    if (r == 0) break;
    *got += (uint64_t)r;
  }
  return 0;
}

static int write_file(struct disk_job *job, struct file_task *t, ZSTD_CCtx *cctx) {
  struct manifest_file *f = t->file;
  const uint8_t *out = t->data;
  uint64_t out_len = f->size;
  void *packed = NULL;
  if (job->compressed) {
    /* One frame per chunk (f->frames): a streamed resume decodes chunks in parallel, and a
     * whole-file decode reads the frames one after another as before. */
    size_t bound = ZSTD_compressBound((size_t)job->chunk_bytes);
    if (!(packed = malloc(bound * f->chunks))) {
      job_fail(job, -ENOMEM, f->name, "out of memory compressing it");
      return -ENOMEM;
    }
    out_len = 0;
    for (uint64_t c = 0; c < f->chunks; c++) {
      uint64_t at = c * job->chunk_bytes;
      size_t piece = (size_t)(f->size - at < job->chunk_bytes ? f->size - at : job->chunk_bytes);
      size_t n = ZSTD_compressCCtx(cctx, (uint8_t *)packed + out_len, bound, t->data + at, piece,
                                   ZSTD_LEVEL);
      if (ZSTD_isError(n)) {
        job_fail(job, -EIO, f->name, "zstd: %s", ZSTD_getErrorName(n));
        free(packed);
        return -EIO;
      }
      f->frames[c] = n;
      out_len += n;
    }
    out = packed;
  }
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", job->dir, f->name);
  /* The image is the program's memory: its owner's alone (0600, even over an older file of
   * another mode), never written through a link someone planted. */
  int rc = 0, fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 || fchmod(fd, 0600) != 0) rc = -errno;
  if (!rc) rc = write_all(fd, out, out_len);
  if (!rc && fsync(fd) != 0) rc = -errno;
  if (!rc) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* the page cache need not keep it */
  if (fd >= 0 && close(fd) != 0 && !rc) rc = -errno;
  if (rc) job_fail(job, rc, f->name, "cannot write %" PRIu64 " bytes: %s", out_len, strerror(-rc));
  f->stored = out_len;
  atomic_fetch_add(&job->stored, out_len);
  free(packed);
  return rc;
}

static int read_file(struct disk_job *job, struct file_task *t, ZSTD_DCtx *dctx) {
  struct manifest_file *f = t->file;
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", job->dir, f->name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int rc = -errno;
    job_fail(job, rc, f->name, "%s", errno == ENOENT ? "missing" : strerror(-rc));
    return rc;
  }
  struct stat st;
  int rc = fstat(fd, &st) != 0 ? -errno : 0;
  if (!rc && (uint64_t)st.st_size != f->stored) {
    rc = -EBADMSG;
    job_fail(job, rc, f->name, "%s: %" PRIu64 " bytes, the manifest says %" PRIu64,
             (uint64_t)st.st_size < f->stored ? "truncated" : "too long", (uint64_t)st.st_size,
             f->stored);
  }
  void *packed = NULL;
  uint64_t got = 0;
  if (!rc && job->compressed && !(packed = malloc((size_t)f->stored ? (size_t)f->stored : 1)))
    rc = -ENOMEM;
  if (!rc) rc = read_all(fd, packed ? packed : t->data, f->stored, &got);
  if (!rc && got != f->stored) rc = -EBADMSG;
  close(fd);
  if (rc && !job->error) job_fail(job, rc, f->name, "cannot read it: %s", strerror(-rc));
  if (!rc && packed) {
    size_t n = ZSTD_decompressDCtx(dctx, t->data, (size_t)f->size, packed, (size_t)f->stored);
    if (ZSTD_isError(n) || n != f->size) {
      rc = -EBADMSG;
      job_fail(job, rc, f->name, "corrupt zstd data: %s",
               ZSTD_isError(n) ? ZSTD_getErrorName(n) : "wrong decompressed size");
    }
  }
  free(packed);
  for (uint64_t c = 0; !rc && c < f->chunks; c++) {
    uint64_t offset = c * job->chunk_bytes;
    uint64_t n = f->size - offset < job->chunk_bytes ? f->size - offset : job->chunk_bytes;
    uint64_t sum = t->device_sums ? ckpt_delta_hash(t->data + offset, n)
                                  : XXH3_64bits(t->data + offset, (size_t)n);
    if (sum != f->sums[c]) {
      rc = -EBADMSG;
      job_fail(job, rc, f->name,
               "checksum mismatch in the chunk at file offset %" PRIu64 " (%016" PRIx64
               ", manifest %016" PRIx64 ")", offset, sum, f->sums[c]);
    }
    t->sums[c] = sum;
  }
  return rc;
}

static void *run_files(void *arg) {
  struct disk_job *job = arg;
  ZSTD_CCtx *cctx = job->compressed && job->write ? ZSTD_createCCtx() : NULL;
  ZSTD_DCtx *dctx = job->compressed && !job->write ? ZSTD_createDCtx() : NULL;
  if (job->compressed && !cctx && !dctx) {
    job_fail(job, -ENOMEM, "-", "out of memory for a zstd context");
    return NULL;
  }
  for (;;) {
    size_t i = atomic_fetch_add(&job->next, 1);
    pthread_mutex_lock(&job->lock);
    bool stop = job->error != 0;
    pthread_mutex_unlock(&job->lock);
    if (stop || i >= job->task_count) break;
    if (job->write) write_file(job, &job->tasks[i], cctx);
    else read_file(job, &job->tasks[i], dctx);
  }
  ZSTD_freeCCtx(cctx);
  ZSTD_freeDCtx(dctx);
  return NULL;
}

static int run_job(struct disk_job *job, int threads) {
  pthread_t ids[64];
  int started = 0;
  if (threads > 64) threads = 64;
  for (int t = 1; t < threads && (size_t)t < job->task_count; t++) {
    if (pthread_create(&ids[started], NULL, run_files, job) != 0) break;
    started++;
  }
  run_files(job);
  for (int t = 0; t < started; t++) pthread_join(ids[t], NULL);
  return job->error;
}

/* The file tasks for manifest m over the engine's current image. */
static int make_tasks(struct engine *e, struct manifest *m, struct disk_job *job) {
  size_t count = 0;
  for (size_t r = 0; r < m->region_count; r++) count += m->regions[r].file_count;
  if (!(job->tasks = calloc(count ? count : 1, sizeof *job->tasks))) return -ENOMEM;
  for (size_t r = 0; r < m->region_count; r++) {
    struct engine_image_view view;
    int rc = engine_image_region(e, r, &view);
    if (rc) return rc;
    for (size_t f = 0; f < m->regions[r].file_count; f++) {
      struct manifest_file *file = &m->regions[r].files[f];
      job->tasks[job->task_count++] =
          (struct file_task){file, view.data + file->offset,
                             view.sums + file->offset / m->chunk_bytes, m->regions[r].device_sums};
    }
  }
  return 0;
}

/* The manifest of the engine's image: regions cut into files of file_bytes. */
static int plan_manifest(struct engine *e, bool compress, struct manifest *m) {
  m->chunk_bytes = engine_chunk_bytes(e);
  m->file_bytes = FILE_TARGET_BYTES / m->chunk_bytes * m->chunk_bytes;
  if (!m->file_bytes) m->file_bytes = m->chunk_bytes;
  m->compressed = compress;
  m->region_count = engine_image_regions(e);
  if (!(m->regions = calloc(m->region_count ? m->region_count : 1, sizeof *m->regions)))
    return -ENOMEM;
  for (size_t r = 0; r < m->region_count; r++) {
    struct engine_image_view view;
    struct manifest_region *mr = &m->regions[r];
    engine_image_region(e, r, &view);
    mr->region = view.region;
    mr->device_sums = *view.device_sums;
    m->bytes += view.region.size;
    mr->file_count = (size_t)((view.region.size + m->file_bytes - 1) / m->file_bytes);
    if (!(mr->files = calloc(mr->file_count ? mr->file_count : 1, sizeof *mr->files)))
      return -ENOMEM;
    for (size_t f = 0; f < mr->file_count; f++) {
      struct manifest_file *file = &mr->files[f];
      file->offset = (uint64_t)f * m->file_bytes;
      file->size = view.region.size - file->offset < m->file_bytes ? view.region.size - file->offset
                                                                   : m->file_bytes;
      file->chunks = (file->size + m->chunk_bytes - 1) / m->chunk_bytes;
      snprintf(file->name, sizeof file->name, "region-%zu-%zu.%s", r, f, compress ? "zst" : "bin");
      if (!(file->sums = calloc(file->chunks, sizeof *file->sums))) return -ENOMEM;
      if (compress && !(file->frames = calloc(file->chunks, sizeof *file->frames))) return -ENOMEM;
      memcpy(file->sums, view.sums + file->offset / m->chunk_bytes, file->chunks * sizeof *file->sums);
    }
  }
  return 0;
}

/* Whether name is a chunk file name as plan_manifest makes them: region-<r>-<n>.bin or .zst,
 * decimal numbers without leading zeros. Nothing else in a directory is cudaw's to remove. */
static bool chunk_file_name(const char *name) {
  const char *p = name;
  if (strncmp(p, "region-", 7) != 0) return false;
  p += 7;
  for (int part = 0; part < 2; part++) {
    if (!isdigit((unsigned char)*p) || (*p == '0' && isdigit((unsigned char)p[1]))) return false;
    while (isdigit((unsigned char)*p)) p++;
    if (*p++ != (part == 0 ? '-' : '.')) return false;
  }
  return strcmp(p, "bin") == 0 || strcmp(p, "zst") == 0;
}

/* Whether the chunk file name (chunk_file_name) is one of manifest m's files. */
static bool in_manifest(const struct manifest *m, const char *name) {
  unsigned long r = strtoul(name + 7, NULL, 10);
  unsigned long f = strtoul(strchr(name + 7, '-') + 1, NULL, 10);
  return r < m->region_count && f < m->regions[r].file_count &&
         strcmp(m->regions[r].files[f].name, name) == 0;
}

/* Once the new image's manifest is in place: remove the chunk files of an older image in dir
 * (a reused --to DIR would otherwise keep them beside the new ones, e.g. .bin beside .zst).
 * Only regular files of this uid named as cudaw names them and not in the new manifest; a link
 * is never followed (links are skipped, and unlinkat removes a name, not what it points to).
 * A file that cannot be removed is logged; the new image is complete either way. */
static void remove_stale_files(const char *dir, const struct manifest *m, const char *whose) {
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (!d) {
    ckpt_logf(CKPT_LOG_WARN, "image directory %s: cannot list it to remove %s's files: %s", dir,
              whose, strerror(errno));
    if (dfd >= 0) close(dfd);
    return;
  }
  size_t removed = 0;
  uint64_t bytes = 0;
  struct dirent *entry;
  while ((entry = readdir(d)) != NULL) {
    const char *name = entry->d_name;
    struct stat st;
    if (!chunk_file_name(name) || in_manifest(m, name)) continue;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != geteuid())
      continue;
    if (unlinkat(dfd, name, 0) != 0) {
      ckpt_logf(CKPT_LOG_WARN, "image directory %s: cannot remove %s of %s: %s", dir, name,
                whose, strerror(errno));
      continue;
    }
    removed++;
    bytes += (uint64_t)st.st_size;
  }
  closedir(d);
  if (removed)
    ckpt_logf(CKPT_LOG_INFO, "image directory %s: removed %zu files (%" PRIu64 " bytes) of %s",
              dir, removed, bytes, whose);
}

int disk_remove_image(const char *dir) {
  struct manifest none = {0}; /* names no file: every chunk file goes */
  char manifest_path[PATH_MAX];
  if ((size_t)snprintf(manifest_path, sizeof manifest_path, "%s/" MANIFEST_NAME, dir) >=
      sizeof manifest_path)
    return -ENAMETOOLONG;
  /* The manifest first: a directory half emptied must not look like an image. */
  if (unlink(manifest_path) != 0 && errno != ENOENT) return -errno;
  remove_stale_files(dir, &none, "a resumed image");
  return rmdir(dir) == 0 || errno == ENOTEMPTY || errno == EEXIST ? 0 : -errno;
}

static void sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

int disk_private_dir(const char *dir, char *reason, size_t len) {
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    int err = errno;
    snprintf(reason, len, "image directory %s: cannot create it: %s", dir, strerror(err));
    return -err;
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    int err = errno ? errno : ENOTDIR;
    snprintf(reason, len, "image directory %s: %s", dir, strerror(err));
    return -err;
  }
  /* Another user's directory: they could swap the files under us; write only into our own. */
  if (st.st_uid != geteuid()) {
    snprintf(reason, len, "image directory %s belongs to uid %u, not to this process's uid %u: "
             "an image goes only into a directory of its owner", dir, (unsigned)st.st_uid,
             (unsigned)geteuid());
    return -EPERM;
  }
  if ((st.st_mode & 077) && chmod(dir, st.st_mode & 07700) == 0)
    ckpt_logf(CKPT_LOG_INFO, "image directory %s was mode %03o: made %03o (its owner's alone)",
              dir, (unsigned)(st.st_mode & 0777), (unsigned)(st.st_mode & 0700));
  return 0;
}

int disk_write_image(struct engine *e, const char *dir, bool compress, int threads,
                     struct disk_stats *stats, char *reason, size_t len) {
  double t0 = ckpt_now();
  *stats = (struct disk_stats){0};
  int rc = disk_private_dir(dir, reason, len);
  if (rc) return rc;
  char manifest_path[PATH_MAX], temporary[PATH_MAX];
  snprintf(manifest_path, sizeof manifest_path, "%s/" MANIFEST_NAME, dir);
  snprintf(temporary, sizeof temporary, "%s/" MANIFEST_NAME ".tmp", dir);
  /* An older image's manifest must not describe the new files while they are written. */
  if (unlink(manifest_path) != 0 && errno != ENOENT) {
    snprintf(reason, len, "manifest %s: cannot replace it: %s", manifest_path, strerror(errno));
    return -errno;
  }
  struct manifest m = {0};
  struct disk_job job = {.dir = dir, .write = true, .compressed = compress, .reason = reason,
                         .reason_len = len};
  pthread_mutex_init(&job.lock, NULL);
  rc = plan_manifest(e, compress, &m);
  if (!rc) {
    job.chunk_bytes = m.chunk_bytes;
    rc = make_tasks(e, &m, &job);
  }
  if (rc) snprintf(reason, len, "image directory %s: out of memory planning the files", dir);
  if (!rc) rc = run_job(&job, threads);
  if (!rc && (rc = manifest_write(&m, temporary, reason, len)) == 0) {
    int fd = open(temporary, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0 || rename(temporary, manifest_path) != 0) {
      rc = -errno;
      snprintf(reason, len, "manifest %s: cannot write it: %s", manifest_path, strerror(errno));
    }
    if (fd >= 0) close(fd);
  }
  if (rc) {
    unlink(temporary);
  } else {
    remove_stale_files(dir, &m, "an older image");
    sync_dir(dir);
  }
  *stats = (struct disk_stats){m.bytes, atomic_load(&job.stored), job.task_count, ckpt_now() - t0};
  free(job.tasks);
  manifest_free(&m);
  pthread_mutex_destroy(&job.lock);
  return rc;
}

int disk_check_manifest(const struct manifest *m, const char *path, size_t chunk_bytes,
                        const struct ckpt_region *live, size_t live_count, char *reason,
                        size_t len) {
  if (m->chunk_bytes != chunk_bytes) {
    snprintf(reason, len, "manifest %s: chunks of %" PRIu64 " bytes; this process uses %zu "
             "(CUDAW_CKPT_STAGING must be what it was when the image was written)", path,
             m->chunk_bytes, chunk_bytes);
    return -EBADMSG;
  }
  if (m->region_count != live_count) {
    snprintf(reason, len, "manifest %s: %zu regions, the paused process has %zu", path,
             m->region_count, live_count);
    return -EBADMSG;
  }
  for (size_t r = 0; r < live_count; r++) {
    const struct ckpt_region *a = &m->regions[r].region, *b = &live[r];
    if (a->id != b->id || a->vaddr != b->vaddr || a->size != b->size || a->device != b->device) {
      snprintf(reason, len, "manifest %s: region %zu (id %" PRIu64 ", 0x%" PRIx64 ", %" PRIu64
               " bytes, device %d) is not the paused process's (id %" PRIu64 ", 0x%" PRIx64
               ", %" PRIu64 " bytes, device %d)", path, r, a->id, a->vaddr, a->size, a->device,
               b->id, b->vaddr, b->size, b->device);
      return -EBADMSG;
    }
  }
  return 0;
}

int disk_read_image(struct engine *e, const char *dir, const struct ckpt_region *live,
                    size_t live_count, int threads, struct disk_stats *stats, char *reason,
                    size_t len) {
  double t0 = ckpt_now();
  *stats = (struct disk_stats){0};
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/" MANIFEST_NAME, dir);
  struct manifest m;
  int rc = manifest_read(path, &m, reason, len);
  if (rc) return rc == -ENOENT ? -ENOENT : -EBADMSG;
  rc = disk_check_manifest(&m, path, engine_chunk_bytes(e), live, live_count, reason, len);
  struct ckpt_region *regions = calloc(m.region_count ? m.region_count : 1, sizeof *regions);
  if (!rc && !regions) rc = -ENOMEM;
  for (size_t r = 0; !rc && r < m.region_count; r++) regions[r] = m.regions[r].region;
  if (!rc) rc = engine_image_create(e, regions, m.region_count, reason, len);
  struct disk_job job = {.dir = dir, .compressed = m.compressed, .chunk_bytes = m.chunk_bytes,
                         .reason = reason, .reason_len = len};
  pthread_mutex_init(&job.lock, NULL);
  for (size_t r = 0; !rc && r < m.region_count; r++) {
    struct engine_image_view view;
    engine_image_region(e, r, &view);
    *view.device_sums = m.regions[r].device_sums;
  }
  if (!rc && (rc = make_tasks(e, &m, &job)) != 0)
    snprintf(reason, len, "image directory %s: out of memory", dir);
  if (!rc) rc = run_job(&job, threads);
  if (rc) engine_drop_image(e);
  uint64_t stored = 0;
  for (size_t i = 0; i < job.task_count; i++) stored += job.tasks[i].file->stored;
  *stats = (struct disk_stats){m.bytes, stored, job.task_count, ckpt_now() - t0};
  free(regions);
  free(job.tasks);
  manifest_free(&m);
  pthread_mutex_destroy(&job.lock);
  return rc;
}
