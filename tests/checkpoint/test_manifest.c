/* Description: manifest.json of an image on disk, read back with every value checked: a written
 * manifest reads back the same; each kind of bad manifest (not JSON, wrong format or version,
 * missing or mistyped fields, a file name with a slash, files that do not cover their region,
 * the wrong number of checksums, a checksum that is not hex, an unknown checksum kind, zstd
 * "frames" of the wrong count, outside the file or not adding up to its stored bytes) is
 * refused with -EBADMSG and a reason naming the file and what is wrong; a missing file is
 * -ENOENT. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disk.h"
#include "test.h"

static char path[256];

static void write_text(const char *text)
{
  FILE *f = fopen(path, "w");
  CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "write %s", path);
}

/* A valid manifest with one region of 10 bytes in one file, with `edit` replacing `from`. */
static void expect_bad(const char *from, const char *to, const char *fragment)
{
  const char *good =
      "{\"format\":\"cudaw-image\",\"version\":1,\"chunk_bytes\":4,\"file_bytes\":8,"
      "\"compression\":\"none\",\"bytes\":10,\"regions\":[{\"id\":7,\"vaddr\":4096,\"size\":10,"
      "\"device\":0,\"checksum\":\"xxh3-64\",\"files\":["
      "{\"name\":\"region-0-0.bin\",\"offset\":0,\"size\":8,\"stored\":8,"
      "\"sums\":[\"0000000000000001\",\"0000000000000002\"]},"
      "{\"name\":\"region-0-1.bin\",\"offset\":8,\"size\":2,\"stored\":2,"
      "\"sums\":[\"0000000000000003\"]}]}]}";
  char text[2048];
  const char *at = from ? strstr(good, from) : NULL;
  CHECK(!from || at, "test bug: '%s' not in the manifest", from);
  if (at)
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - good), good, to, at + strlen(from));
  else
    snprintf(text, sizeof text, "%s", good);
  write_text(text);
  struct manifest m;
  char reason[512] = "";
  int rc = manifest_read(path, &m, reason, sizeof reason);
  if (!fragment) {
    CHECK(rc == 0, "the valid manifest was refused: %s", reason);
    CHECK(m.region_count == 1 && m.regions[0].region.id == 7 && m.regions[0].file_count == 2 &&
              m.regions[0].files[1].sums[0] == 3 && !m.regions[0].device_sums && m.bytes == 10,
          "the valid manifest read back wrong");
    manifest_free(&m);
    return;
  }
  CHECK(rc == -EBADMSG, "'%s' -> '%s': expected -EBADMSG, got %d (%s)", from, to, rc, reason);
  CHECK(strstr(reason, path) && strstr(reason, fragment),
        "'%s' -> '%s': the reason should name %s and say '%s': %s", from, to, path, fragment,
        reason);
  printf("refused as it should: %s\n", reason);
}

int main(void)
{
  snprintf(path, sizeof path, "/tmp/cudaw-test-manifest-%ld.json", (long)getpid());
  expect_bad(NULL, NULL, NULL);
  expect_bad("{\"format\"", "[\"format\"", "line 1");
  expect_bad("\"cudaw-image\"", "\"other\"", "not a cudaw image");
  expect_bad("\"version\":1", "\"version\":2", "format version 2");
  expect_bad("\"compression\":\"none\"", "\"compression\":\"lz4\"", "compression");
  expect_bad(",\"regions\":[", ",\"regionz\":[", "regions");
  expect_bad("\"size\":10", "\"size\":-10", "non-negative");
  expect_bad("\"region-0-0.bin\"", "\"../region-0-0.bin\"", "plain file name");
  expect_bad("\"offset\":8", "\"offset\":4", "cover");
  expect_bad("\"size\":2,\"stored\":2", "\"size\":1,\"stored\":1", "hold 9 of its 10 bytes");
  expect_bad("[\"0000000000000003\"]", "[]", "sums");
  expect_bad("\"0000000000000002\"", "\"00000000000000zz\"", "16 hex digits");
  expect_bad("\"xxh3-64\"", "\"md5\"", "checksum");
  expect_bad("\"bytes\":10", "\"bytes\":11", "\"bytes\" says 11");
  /* "frames" (optional: one zstd frame per chunk) must list one size per chunk, each inside
   * the file, adding up to its stored bytes. */
  const char *frames = "\"0000000000000003\"]}";
  expect_bad(frames, "\"0000000000000003\"],\"frames\":[1,1]}", "\"frames\" must list 1 sizes");
  expect_bad(frames, "\"0000000000000003\"],\"frames\":[0]}", "frame 0 is not a size");
  expect_bad(frames, "\"0000000000000003\"],\"frames\":[3]}", "frame 0 is not a size");
  expect_bad("\"stored\":8,", "\"stored\":8,\"frames\":[3,4],", "frames hold 7 of its 8");

  /* A written manifest reads back the same. */
  struct manifest_file file = {.name = "region-0-0.zst", .offset = 0, .size = 6, .stored = 5,
                               .chunks = 2};
  uint64_t sums[2] = {0xfedcba9876543210ull, 42}, frames_written[2] = {3, 2};
  file.sums = sums;
  file.frames = frames_written;
  struct manifest_region region = {.region = {.id = 3, .vaddr = 1ull << 40, .size = 6, .device = 1},
                                   .device_sums = true, .file_count = 1, .files = &file};
  struct manifest out = {.chunk_bytes = 4, .file_bytes = 8, .bytes = 6, .compressed = true,
                         .region_count = 1, .regions = &region};
  char reason[512];
  CHECK(manifest_write(&out, path, reason, sizeof reason) == 0, "%s", reason);
  struct manifest in;
  CHECK(manifest_read(path, &in, reason, sizeof reason) == 0, "%s", reason);
  CHECK(in.compressed && in.region_count == 1 && in.regions[0].region.vaddr == 1ull << 40 &&
            in.regions[0].region.device == 1 && in.regions[0].device_sums &&
            in.regions[0].files[0].stored == 5 && in.regions[0].files[0].sums[0] == sums[0] &&
            in.regions[0].files[0].frames && in.regions[0].files[0].frames[0] == 3 &&
            in.regions[0].files[0].frames[1] == 2 &&
            strcmp(in.regions[0].files[0].name, "region-0-0.zst") == 0,
        "the written manifest read back wrong");
  manifest_free(&in);
  unlink(path);
  char missing[300];
  snprintf(missing, sizeof missing, "%s.missing", path);
  CHECK(manifest_read(missing, &in, reason, sizeof reason) == -ENOENT && strstr(reason, missing),
        "a missing manifest: %s", reason);
  printf("ok\n");
  return 0;
}
