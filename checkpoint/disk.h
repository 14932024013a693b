/* Images on disk (disk.c, manifest.c): a directory with manifest.json and the data in chunk
 * files, optionally zstd-compressed, each chunk with its XXH3-64. Every error names the file. */
#ifndef CUDAW_CKPT_DISK_H
#define CUDAW_CKPT_DISK_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"

#define MANIFEST_VERSION 1
#define MANIFEST_NAME "manifest.json"

/* One chunk file: [offset, offset + size) of its region; `stored` bytes on disk. */
struct manifest_file {
  char name[64];
  uint64_t offset, size, stored;
  uint64_t chunks;
  uint64_t *sums; /* [chunks], the checksum of each chunk_bytes piece */
  /* zstd: [chunks], the stored bytes of each chunk's own frame, so that a streamed resume can
   * decode chunks in parallel; NULL where the file is one frame (images written before). */
  uint64_t *frames;
};

struct manifest_region {
  struct ckpt_region region;
  bool device_sums; /* "checksum": "cudaw-delta-64" (delta_hash.h), else "xxh3-64" */
  size_t file_count;
  struct manifest_file *files;
};

struct manifest {
  uint64_t chunk_bytes; /* the engine's chunk (CUDAW_CKPT_STAGING) when written */
  uint64_t file_bytes;  /* most bytes of a region in one file */
  uint64_t bytes;       /* sum of the region sizes */
  bool compressed;      /* zstd frames */
  size_t region_count;
  struct manifest_region *regions;
};

/* Write *m as JSON to path. -errno with `reason` naming the file. */
int manifest_write(const struct manifest *m, const char *path, char *reason, size_t reason_len);
/* Parse and check path into *m (free with manifest_free). -ENOENT when the file cannot be
 * read, -EBADMSG when it is not a valid manifest; `reason` names the file and what is wrong. */
int manifest_read(const char *path, struct manifest *m, char *reason, size_t reason_len);
void manifest_free(struct manifest *m);

struct disk_stats {
  uint64_t bytes;  /* image bytes */
  uint64_t stored; /* bytes in the files */
  uint64_t files;
  double seconds;
};

/* dir made (0700) or checked as a place for an image: a directory of this process's uid, made
 * its owner's alone (group and other bits cleared, logged). 0, or -errno with reason. */
int disk_private_dir(const char *dir, char *reason, size_t reason_len);
/* Write the engine's image to dir (created if missing): the chunk files, each synced and
 * dropped from the page cache, then manifest.json (atomically, by rename); then the chunk files
 * of an older image in dir that the new manifest does not name are removed. The image stays
 * in host memory; the caller drops it. `threads` writers run at once. */
int disk_write_image(struct engine *engine, const char *dir, bool compress, int threads,
                     struct disk_stats *stats, char *reason, size_t reason_len);
/* Remove the image in dir (its manifest, then the chunk files as remove_stale_files picks
 * them), then dir if nothing else is in it. 0 or -errno. */
int disk_remove_image(const char *dir);
/* Read the image in dir back into the engine, verifying every chunk against the manifest, and
 * check that its regions are `live` (those of the paused process). On error the engine holds
 * no image and nothing else has changed; `reason` names the file at fault. */
int disk_read_image(struct engine *engine, const char *dir, const struct ckpt_region *live,
                    size_t live_count, int threads, struct disk_stats *stats, char *reason,
                    size_t reason_len);

/* Whether manifest m (read from path) fits the paused process: chunks of chunk_bytes and
 * exactly its regions `live`. 0, or -EBADMSG with reason naming the manifest. */
int disk_check_manifest(const struct manifest *m, const char *path, size_t chunk_bytes,
                        const struct ckpt_region *live, size_t live_count, char *reason,
                        size_t reason_len);

/* Resume streamed from disk (disk_stream.c): the image's chunk files are read by the copy
 * threads straight into the staging buffers, each chunk verified against the manifest before
 * it is sent to the device, while the chunks before it are on the link; the image never lies
 * in host memory. Open checks the manifest (disk_check_manifest) and every file's presence and
 * size, before anything changes: -ENOENT/-EBADMSG with reason naming the file. */
struct disk_source;
int disk_source_open(const char *dir, size_t chunk_bytes, const struct ckpt_region *live,
                     size_t live_count, struct disk_source **out, char *reason, size_t reason_len);
/* Restore the recreated regions from the files (engine_restore_from). A bad chunk (corrupt,
 * truncated, unreadable) stops it with reason naming the file and offset; *peak is the most
 * host memory the reading held at once beyond the staging buffers (zstd contexts, input). */
int disk_source_restore(struct engine *engine, struct disk_source *source,
                        struct engine_stats *stats, struct disk_stats *disk, uint64_t *peak,
                        char *reason, size_t reason_len);
void disk_source_close(struct disk_source *source);

#endif
