/* Resume streamed from disk: the copy engine's threads ask for chunks (engine_restore_from) and
 * this file reads each one from its chunk file straight into the staging buffer, checks it
 * against the manifest and hands it back for the H2D, while the engine's other staging buffers
 * are on the link. The image never lies in host memory: the memory this costs beyond the
 * staging buffers is a zstd context and input buffer per compressed file being read (a few at
 * once), counted in `held`.
 *
 * Uncompressed files are read at each chunk's offset (pread) by any thread, and dropped from
 * the page cache behind; so are zstd files written with one frame per chunk (the manifest's
 * "frames"), each thread decoding with a decoder of its own from a small pool. A zstd file
 * written as one frame (before "frames" existed) can only come out in order, so the thread that
 * took chunk c waits until chunk c - 1 of that file is out (the engine hands out a file's chunks
 * in order, and start_from_source asks for every chunk it took). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
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

/* A zstd decoder and its input buffer, for one chunk's frame at a time. */
struct decoder {
  ZSTD_DCtx *dctx;
  uint8_t *in;
  uint64_t held; /* host bytes of both */
  struct decoder *next;
};

struct source_file {
  const struct manifest_file *file;
  uint64_t *frame_at; /* per-chunk frames: where chunk c's frame starts in the file */
  int fd;             /* -1 until its first chunk is read, and again after its last */
  uint64_t next;      /* zstd: the chunk the decoder gives next */
  uint64_t delivered; /* chunks read (or failed): the file is closed after the last */
  ZSTD_DCtx *dctx;    /* zstd: the frame's decoder, and its input */
  uint8_t *in;
  size_t in_pos, in_len;
  uint64_t held; /* host bytes of this file's decoder and input */
};

struct disk_source {
  char dir[PATH_MAX];
  struct manifest m;
  struct ckpt_region *regions; /* [m.region_count] */
  struct source_file **files;  /* [region][file] */
  pthread_mutex_t lock;        /* the files' fd, next, delivered, held; failed */
  pthread_cond_t turn;         /* a zstd file's next chunk is out, or a chunk failed */
  int error;                   /* the first chunk that failed, and why */
  char reason[224];
  uint64_t held, peak;
  struct decoder *idle; /* decoders not in use (per-chunk frames) */
  _Atomic uint64_t stored_read;
};

/* A chunk failed (reason written): the first failure's reason is the source's, and zstd
 * waiters give up. */
static int record_fail(struct disk_source *s, int error, const char *reason) {
  pthread_mutex_lock(&s->lock);
  if (!s->error) {
    s->error = error;
    snprintf(s->reason, sizeof s->reason, "%s", reason);
  }
  pthread_cond_broadcast(&s->turn);
  pthread_mutex_unlock(&s->lock);
  return error;
}

static int source_fail(struct disk_source *s, const struct manifest_file *f, int error,
                       char *reason, size_t len, const char *format, ...)
    __attribute__((format(printf, 6, 7)));

static int source_fail(struct disk_source *s, const struct manifest_file *f, int error,
                       char *reason, size_t len, const char *format, ...) {
  char why[160];
  va_list args;
  va_start(args, format);
  vsnprintf(why, sizeof why, format, args);
  va_end(args);
  snprintf(reason, len, "image file %s/%s: %s", s->dir, f->name, why);
  return record_fail(s, error, reason);
}

/* *counted (a file's or a decoder's host bytes, part of s->held) is now `bytes`; s->lock held. */
static void count_held(struct disk_source *s, uint64_t *counted, uint64_t bytes) {
  s->held = s->held - *counted + bytes;
  *counted = bytes;
  if (s->held > s->peak) s->peak = s->held;
}

/* Open sf's file (with s->lock held); 0 or -errno with the file named. */
static int open_file(struct disk_source *s, struct source_file *sf, char *reason, size_t len) {
  char path[PATH_MAX + 80]; /* dir and a file name */
  snprintf(path, sizeof path, "%s/%s", s->dir, sf->file->name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int rc = -errno;
    snprintf(reason, len, "image file %s: %s", path, rc == -ENOENT ? "missing" : strerror(-rc));
    return rc;
  }
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  if (s->m.compressed && !sf->frame_at) { /* one frame: this file's own decoder */
    sf->dctx = ZSTD_createDCtx();
    sf->in = malloc(ZSTD_DStreamInSize());
    if (!sf->dctx || !sf->in) {
      ZSTD_freeDCtx(sf->dctx);
      free(sf->in);
      sf->dctx = NULL;
      sf->in = NULL;
      close(fd);
      snprintf(reason, len, "image file %s: out of memory for its zstd decoder", path);
      return -ENOMEM;
    }
    sf->in_pos = sf->in_len = 0;
    count_held(s, &sf->held, ZSTD_DStreamInSize() + ZSTD_sizeof_DCtx(sf->dctx));
  }
  sf->fd = fd;
  return 0;
}

static void close_file(struct disk_source *s, struct source_file *sf) {
  if (sf->fd >= 0) close(sf->fd);
  sf->fd = -1;
  ZSTD_freeDCtx(sf->dctx);
  free(sf->in);
  sf->dctx = NULL;
  sf->in = NULL;
  count_held(s, &sf->held, 0);
}

/* sf's descriptor, the file opened at its first chunk; 0 or the failure recorded. */
static int file_fd(struct disk_source *s, struct source_file *sf, int *fd, char *reason,
                   size_t len) {
  pthread_mutex_lock(&s->lock);
  int rc = sf->fd < 0 ? open_file(s, sf, reason, len) : 0;
  *fd = sf->fd;
  pthread_mutex_unlock(&s->lock);
  return rc ? record_fail(s, rc, reason) : 0;
}

/* Uncompressed: the chunk at file offset `at`, read where it lies. */
static int read_plain(struct disk_source *s, struct source_file *sf, uint64_t at, uint8_t *dst,
                      size_t n, char *reason, size_t len) {
  int fd, rc = file_fd(s, sf, &fd, reason, len);
  if (rc) return rc;
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, dst + got, n - got, (off_t)(at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return source_fail(s, sf->file, -errno, reason, len, "cannot read it at offset %" PRIu64
                         ": %s", at + got, strerror(errno));
    if (r == 0)
      return source_fail(s, sf->file, -EBADMSG, reason, len, "truncated: it ends at %" PRIu64
                         " bytes, inside the chunk at file offset %" PRIu64, at + got, at);
    got += (size_t)r;
  }
  posix_fadvise(fd, (off_t)at, (off_t)n, POSIX_FADV_DONTNEED); /* on the device now */
  atomic_fetch_add(&s->stored_read, n);
  return 0;
}

/* zstd: chunk c of the file's frame, once the chunks before it are out. */
static int read_zstd(struct disk_source *s, struct source_file *sf, uint64_t c, uint64_t at,
                     uint8_t *dst, size_t n, char *reason, size_t len) {
  pthread_mutex_lock(&s->lock);
  while (!s->error && sf->next != c) pthread_cond_wait(&s->turn, &s->lock);
  int rc = s->error;
  if (rc) { /* a chunk before this one failed: so does this, for the same reason */
    snprintf(reason, len, "%s", s->reason);
    pthread_mutex_unlock(&s->lock);
    return rc;
  }
  if (sf->fd < 0) rc = open_file(s, sf, reason, len);
  pthread_mutex_unlock(&s->lock);
  if (rc) return record_fail(s, rc, reason);
  /* This thread's turn: nobody else touches the decoder until next moves on. */
  ZSTD_outBuffer out = {dst, n, 0};
  while (out.pos < out.size) {
    if (sf->in_pos == sf->in_len) {
      ssize_t r = read(sf->fd, sf->in, ZSTD_DStreamInSize());
      if (r < 0 && errno == EINTR) continue;
      if (r < 0)
        return source_fail(s, sf->file, -errno, reason, len, "cannot read it: %s",
                           strerror(errno));
      if (r == 0)
        return source_fail(s, sf->file, -EBADMSG, reason, len, "corrupt zstd data: it ends "
                           "inside the chunk at file offset %" PRIu64, at);
      atomic_fetch_add(&s->stored_read, (uint64_t)r);
      sf->in_pos = 0;
      sf->in_len = (size_t)r;
    }
    ZSTD_inBuffer in = {sf->in, sf->in_len, sf->in_pos};
    size_t ret = ZSTD_decompressStream(sf->dctx, &out, &in);
    sf->in_pos = in.pos;
    if (ZSTD_isError(ret))
      return source_fail(s, sf->file, -EBADMSG, reason, len, "corrupt zstd data in the chunk at "
                         "file offset %" PRIu64 ": %s", at, ZSTD_getErrorName(ret));
    if (ret == 0 && out.pos < out.size) /* the frame ended early */
      return source_fail(s, sf->file, -EBADMSG, reason, len, "corrupt zstd data: the frame "
                         "ends inside the chunk at file offset %" PRIu64, at);
  }
  pthread_mutex_lock(&s->lock);
  sf->next++;
  count_held(s, &sf->held, ZSTD_DStreamInSize() + ZSTD_sizeof_DCtx(sf->dctx));
  pthread_cond_broadcast(&s->turn);
  pthread_mutex_unlock(&s->lock);
  return 0;
}

static struct decoder *take_decoder(struct disk_source *s) {
  pthread_mutex_lock(&s->lock);
  struct decoder *d = s->idle;
  if (d) s->idle = d->next;
  pthread_mutex_unlock(&s->lock);
  if (d) return d;
  if (!(d = calloc(1, sizeof *d))) return NULL;
  d->dctx = ZSTD_createDCtx();
  d->in = malloc(ZSTD_DStreamInSize());
  if (!d->dctx || !d->in) {
    ZSTD_freeDCtx(d->dctx);
    free(d->in);
    free(d);
    return NULL;
  }
  return d;
}

static void put_decoder(struct disk_source *s, struct decoder *d) {
  pthread_mutex_lock(&s->lock);
  count_held(s, &d->held, ZSTD_DStreamInSize() + ZSTD_sizeof_DCtx(d->dctx));
  d->next = s->idle;
  s->idle = d;
  pthread_mutex_unlock(&s->lock);
}

/* zstd, one frame per chunk: chunk c's frame, read where it lies and decoded into dst. */
static int read_frame(struct disk_source *s, struct source_file *sf, uint64_t c, uint64_t at,
                      uint8_t *dst, size_t n, char *reason, size_t len) {
  int fd, rc = file_fd(s, sf, &fd, reason, len);
  if (rc) return rc;
  struct decoder *d = take_decoder(s);
  if (!d)
    return source_fail(s, sf->file, -ENOMEM, reason, len, "out of memory for a zstd decoder");
  ZSTD_DCtx_reset(d->dctx, ZSTD_reset_session_only);
  uint64_t from = sf->frame_at[c], left = sf->file->frames[c];
  ZSTD_outBuffer out = {dst, n, 0};
  size_t ret = 1;
  while (!rc && left) {
    size_t want = left < ZSTD_DStreamInSize() ? (size_t)left : ZSTD_DStreamInSize();
    ssize_t r = pread(fd, d->in, want, (off_t)from);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      rc = source_fail(s, sf->file, r < 0 ? -errno : -EBADMSG, reason, len, "cannot read the "
                       "frame of the chunk at file offset %" PRIu64 ": %s", at,
                       r < 0 ? strerror(errno) : "the file ends inside it");
      break;
    }
    atomic_fetch_add(&s->stored_read, (uint64_t)r);
    from += (uint64_t)r;
    left -= (uint64_t)r;
    ZSTD_inBuffer in = {d->in, (size_t)r, 0};
    while (!rc && in.pos < in.size) {
      ret = ZSTD_decompressStream(d->dctx, &out, &in);
      if (ZSTD_isError(ret))
        rc = source_fail(s, sf->file, -EBADMSG, reason, len, "corrupt zstd data in the chunk at "
                         "file offset %" PRIu64 ": %s", at, ZSTD_getErrorName(ret));
      else if (ret != 0 && out.pos == out.size && in.pos < in.size)
        rc = source_fail(s, sf->file, -EBADMSG, reason, len, "corrupt zstd data: the chunk at "
                         "file offset %" PRIu64 " decodes to more than %zu bytes", at, n);
      else if (ret == 0 && in.pos < in.size)
        rc = source_fail(s, sf->file, -EBADMSG, reason, len, "corrupt zstd data: the frame of "
                         "the chunk at file offset %" PRIu64 " ends early", at);
    }
  }
  if (!rc && (ret != 0 || out.pos != n))
    rc = source_fail(s, sf->file, -EBADMSG, reason, len, "corrupt zstd data: the chunk at file "
                     "offset %" PRIu64 " decodes to %zu of its %zu bytes", at, out.pos, n);
  if (!rc) posix_fadvise(fd, (off_t)sf->frame_at[c], (off_t)sf->file->frames[c],
                         POSIX_FADV_DONTNEED);
  put_decoder(s, d);
  return rc;
}

/* The file of region r holding byte `offset` (the manifest's files are contiguous). */
static struct source_file *file_at(struct disk_source *s, size_t r, uint64_t offset) {
  const struct manifest_region *mr = &s->m.regions[r];
  size_t lo = 0, hi = mr->file_count;
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (mr->files[mid].offset <= offset) lo = mid;
    else hi = mid;
  }
  return &s->files[r][lo];
}

/* engine_source_fn: read, decompress and verify one chunk into the staging buffer dst. */
static int fill_chunk(void *arg, size_t region, uint64_t chunk, uint8_t *dst, size_t n,
                      char *reason, size_t len) {
  struct disk_source *s = arg;
  uint64_t offset = chunk * s->m.chunk_bytes;
  struct source_file *sf = file_at(s, region, offset);
  const struct manifest_file *f = sf->file;
  uint64_t at = offset - f->offset, c = at / s->m.chunk_bytes;
  int rc = !s->m.compressed ? read_plain(s, sf, at, dst, n, reason, len)
           : sf->frame_at    ? read_frame(s, sf, c, at, dst, n, reason, len)
                             : read_zstd(s, sf, c, at, dst, n, reason, len);
  if (!rc) {
    uint64_t sum = s->m.regions[region].device_sums ? ckpt_delta_hash(dst, n)
                                                    : XXH3_64bits(dst, n);
    if (sum != f->sums[c])
      rc = source_fail(s, f, -EBADMSG, reason, len, "checksum mismatch in the chunk at file "
                       "offset %" PRIu64 " (%016" PRIx64 ", manifest %016" PRIx64 ")", at, sum,
                       f->sums[c]);
  }
  pthread_mutex_lock(&s->lock);
  if (++sf->delivered == f->chunks) close_file(s, sf);
  pthread_mutex_unlock(&s->lock);
  return rc;
}

void disk_source_close(struct disk_source *s) {
  if (!s) return;
  for (size_t r = 0; s->files && r < s->m.region_count; r++) {
    for (size_t f = 0; s->files[r] && f < s->m.regions[r].file_count; f++) {
      close_file(s, &s->files[r][f]);
      free(s->files[r][f].frame_at);
    }
    free(s->files[r]);
  }
  free(s->files);
  while (s->idle) {
    struct decoder *d = s->idle;
    s->idle = d->next;
    ZSTD_freeDCtx(d->dctx);
    free(d->in);
    free(d);
  }
  free(s->regions);
  manifest_free(&s->m);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->turn);
  free(s);
}

/* Every file there with the size the manifest says: a missing or cut file fails the resume
 * before any device memory is re-created. */
static int check_files(struct disk_source *s, char *reason, size_t len) {
  for (size_t r = 0; r < s->m.region_count; r++)
    for (size_t i = 0; i < s->m.regions[r].file_count; i++) {
      const struct manifest_file *f = &s->m.regions[r].files[i];
      char path[PATH_MAX + 80]; /* dir and a file name */
      struct stat st;
      snprintf(path, sizeof path, "%s/%s", s->dir, f->name);
      if (stat(path, &st) != 0) {
        int rc = -errno;
        snprintf(reason, len, "image file %s: %s", path, rc == -ENOENT ? "missing" : strerror(-rc));
        return rc;
      }
      if ((uint64_t)st.st_size != f->stored) {
        snprintf(reason, len, "image file %s: %s: %" PRIu64 " bytes, the manifest says %" PRIu64,
                 path, (uint64_t)st.st_size < f->stored ? "truncated" : "too long",
                 (uint64_t)st.st_size, f->stored);
        return -EBADMSG;
      }
    }
  return 0;
}

int disk_source_open(const char *dir, size_t chunk_bytes, const struct ckpt_region *live,
                     size_t live_count, struct disk_source **out, char *reason, size_t len) {
  *out = NULL;
  struct disk_source *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(reason, len, "image directory %s: out of memory", dir);
    return -ENOMEM;
  }
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->turn, NULL);
  snprintf(s->dir, sizeof s->dir, "%s", dir);
  char path[PATH_MAX + 80]; /* dir and a file name */
  snprintf(path, sizeof path, "%s/" MANIFEST_NAME, dir);
  int rc = manifest_read(path, &s->m, reason, len);
  if (rc) {
    free(s); /* manifest_read leaves nothing to free on error */
    return rc == -ENOENT ? -ENOENT : -EBADMSG;
  }
  rc = disk_check_manifest(&s->m, path, chunk_bytes, live, live_count, reason, len);
  if (!rc) rc = check_files(s, reason, len);
  size_t count = s->m.region_count;
  if (!rc && (!(s->regions = calloc(count ? count : 1, sizeof *s->regions)) ||
              !(s->files = calloc(count ? count : 1, sizeof *s->files)))) {
    rc = -ENOMEM;
    snprintf(reason, len, "image directory %s: out of memory", dir);
  }
  for (size_t r = 0; !rc && r < count; r++) {
    const struct manifest_region *mr = &s->m.regions[r];
    s->regions[r] = mr->region;
    if (!(s->files[r] = calloc(mr->file_count ? mr->file_count : 1, sizeof **s->files))) {
      rc = -ENOMEM;
      snprintf(reason, len, "image directory %s: out of memory", dir);
      break;
    }
    for (size_t f = 0; !rc && f < mr->file_count; f++) {
      const struct manifest_file *file = &mr->files[f];
      struct source_file *sf = &s->files[r][f];
      *sf = (struct source_file){.file = file, .fd = -1};
      if (!s->m.compressed || !file->frames) continue;
      if (!(sf->frame_at = calloc(file->chunks, sizeof *sf->frame_at))) {
        rc = -ENOMEM;
        snprintf(reason, len, "image directory %s: out of memory", dir);
        break;
      }
      for (uint64_t c = 1; c < file->chunks; c++)
        sf->frame_at[c] = sf->frame_at[c - 1] + file->frames[c - 1];
    }
  }
  if (rc) {
    disk_source_close(s);
    return rc;
  }
  *out = s;
  return 0;
}

int disk_source_restore(struct engine *e, struct disk_source *s, struct engine_stats *stats,
                        struct disk_stats *disk, uint64_t *peak, char *reason, size_t len) {
  double t0 = ckpt_now();
  int rc = engine_restore_from(e, s->regions, s->m.region_count, fill_chunk, s, stats, reason,
                               len);
  uint64_t files = 0;
  for (size_t r = 0; r < s->m.region_count; r++) files += s->m.regions[r].file_count;
  *disk = (struct disk_stats){s->m.bytes, atomic_load(&s->stored_read), files, ckpt_now() - t0};
  pthread_mutex_lock(&s->lock);
  *peak = s->peak;
  pthread_mutex_unlock(&s->lock);
  return rc;
}
