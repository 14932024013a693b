/* Description: checkpoint images on disk (cudaw-ctl checkpoint --to DIR), end to end on the
 * emulated device: the image's host memory is freed (RSS drops by the image's size against a
 * checkpoint kept in host memory); resume reads it back and every byte is there; a corrupt
 * chunk file, a truncated one, a missing one, a manifest that is not JSON and one with the
 * wrong version each make resume fail with an error naming the file while the program stays
 * paused, and after fixing the file the resume succeeds; the same with zstd-compressed files;
 * a full disk (a 4 MiB tmpfs, or RLIMIT_FSIZE where mount is not allowed) makes the checkpoint
 * fail with the program running and its data intact, and with room again it succeeds; and
 * --release-all without the driver's process checkpoint (no driver) fails clearly, leaving
 * the program running. A reused DIR loses the older image's chunk files (.bin beside a new
 * .zst image) and keeps everything else: other files, a link named like a chunk file and what
 * it points to; the files stay after a resume.
 * usage: e2e_disk <cudaw-ctl> <work dir> */
#include "e2e_common.h"

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define MIB ((size_t)1 << 20)

static const char *ctl;
static char base[512];

/* A few buffers with known contents, checked after every resume. */
static struct e2e_data data = {4, {0}, {24 * MIB, 24 * MIB, 3 * MIB + 17, 4096}};

static void make_data(void) { e2e_make_data(&data); }
static void check_data(const char *when) { e2e_check_data(&data, when); }

static long rss_bytes(void)
{
  FILE *f = fopen("/proc/self/status", "re");
  CHECK(f);
  char line[128];
  long kib = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  fclose(f);
  return kib * 1024;
}

/* cudaw-ctl <command> <our pid>: expect exit `code` and `fragment` (if any) in its output. */
static void expect_ctl(const char *command, int code, const char *fragment)
{
  char out[8192];
  int got = e2e_run_ctl(ctl, command, (long)getpid(), out, sizeof out);
  CHECK(got == code && (!fragment || strstr(out, fragment)),
        "cudaw-ctl %s: expected exit %d%s%s; got %d: %s", command, code,
        fragment ? " and " : "", fragment ? fragment : "", got, out);
  printf("cudaw-ctl %s -> %d: %s", command, got, out);
}

static void expect_state(const char *state)
{
  char reply[8192];
  e2e_ask("status", reply, sizeof reply);
  CHECK(e2e_reply_state(reply, state), "expected %s, status says %s", state, reply);
}

static void write_file(const char *path, const char *data, size_t size)
{
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(data, 1, size, f) == size && fclose(f) == 0, "write %s", path);
}

/* Checkpoint to dir, damage `file` with `damage`, resume must fail naming it with `expect`,
 * then put the file back and resume must succeed with every byte. */
typedef void (*damage_fn)(const char *path, char *data, size_t size);

static void damage_and_fix(const char *dir, const char *flags, const char *file, damage_fn damage,
                           const char *expect)
{
  char command[1024], path[1024];
  snprintf(command, sizeof command, "checkpoint %s --to %s", flags, dir);
  expect_ctl(command, 0, "written to disk");
  snprintf(path, sizeof path, "%s/%s", dir, file);
  char *original;
  size_t size;
  e2e_read_file(path, &original, &size);
  char *copy = malloc(size + 1);
  CHECK(copy);
  memcpy(copy, original, size);
  damage(path, copy, size);
  expect_ctl("resume", 1, file);
  expect_ctl("status", 0, "paused");
  char out[8192];
  e2e_run_ctl(ctl, "status", (long)getpid(), out, sizeof out);
  CHECK(strstr(out, expect), "status after a bad %s should say '%s': %s", file, expect, out);
  write_file(path, original, size); /* fixed */
  expect_ctl("resume", 0, "read and verified from disk");
  expect_state("running");
  check_data(file);
  free(original);
  free(copy);
}

static void flip_byte(const char *path, char *data, size_t size)
{
  data[size / 2] ^= 0x5a;
  write_file(path, data, size);
}

static void truncate_half(const char *path, char *data, size_t size) { write_file(path, data, size / 2); }

static void remove_file(const char *path, char *data, size_t size)
{
  (void)data, (void)size;
  CHECK(unlink(path) == 0);
}

static void not_json(const char *path, char *data, size_t size)
{
  (void)data, (void)size;
  write_file(path, "{\"format\": \"cudaw-image\", \"version\": ", 37);
}

static void wrong_version(const char *path, char *data, size_t size)
{
  char *version = strstr(data, "\"version\":1");
  CHECK(version, "manifest without \"version\":1: %.200s", data);
  version[10] = '7';
  write_file(path, data, size);
}

static bool exists(const char *dir, const char *name)
{
  char path[1024];
  struct stat st;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return lstat(path, &st) == 0;
}

/* dir holds an uncompressed image: write a compressed one over it. Only the older image's chunk
 * files may go; a planted link named like one, its target, and files cudaw did not name stay. */
static void reuse_dir(const char *dir)
{
  char victim[1024], path[1024], command[1024];
  CHECK(exists(dir, "region-0-0.bin"), "%s should hold an uncompressed image", dir);
  snprintf(victim, sizeof victim, "%s/victim", base);
  write_file(victim, "keep", 4);
  snprintf(path, sizeof path, "%s/region-99-0.bin", dir);
  CHECK(symlink(victim, path) == 0, "symlink %s: %s", path, strerror(errno));
  snprintf(path, sizeof path, "%s/notes.txt", dir);
  write_file(path, "mine", 4);
  snprintf(path, sizeof path, "%s/region-01-0.bin", dir); /* not a name cudaw makes */
  write_file(path, "mine", 4);
  snprintf(command, sizeof command, "checkpoint --zstd --to %s", dir);
  expect_ctl(command, 0, "written to disk");
  const char *gone[] = {"region-0-0.bin", "region-1-0.bin", "region-2-0.bin", "region-3-0.bin"};
  for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
    CHECK(!exists(dir, gone[i]), "%s of the older image is still in %s", gone[i], dir);
  const char *kept[] = {"region-0-0.zst", "region-3-0.zst", "manifest.json", "region-99-0.bin",
                        "notes.txt", "region-01-0.bin"};
  for (size_t i = 0; i < sizeof kept / sizeof *kept; i++)
    CHECK(exists(dir, kept[i]), "%s should still be in %s", kept[i], dir);
  char *content;
  size_t size;
  e2e_read_file(victim, &content, &size);
  CHECK(size == 4 && memcmp(content, "keep", 4) == 0, "the link's target %s was changed", victim);
  free(content);
  expect_ctl("resume", 0, "read and verified from disk");
  check_data("after a compressed image over an uncompressed one");
  CHECK(exists(dir, "region-0-0.zst") && exists(dir, "manifest.json"),
        "the image's files should stay in %s after a resume", dir);
}

static bool tmpfs_mounted;
static char full_dir[600];

static void unmount_full(void)
{
  if (tmpfs_mounted) umount2(full_dir, MNT_DETACH);
  tmpfs_mounted = false;
}

/* A disk with too little room: a 4 MiB tmpfs if we may mount, else a file size limit. */
static const char *make_full_disk(void)
{
  snprintf(full_dir, sizeof full_dir, "%s/full", base);
  mkdir(full_dir, 0700);
  if (mount("cudaw-test", full_dir, "tmpfs", 0, "size=4m") == 0) {
    tmpfs_mounted = true;
    atexit(unmount_full);
    return "No space left on device";
  }
  signal(SIGXFSZ, SIG_IGN); /* write() then fails with EFBIG instead of killing us */
  struct rlimit limit;
  CHECK(getrlimit(RLIMIT_FSIZE, &limit) == 0);
  limit.rlim_cur = 4 * MIB;
  CHECK(setrlimit(RLIMIT_FSIZE, &limit) == 0);
  return "File too large";
}

static void fix_full_disk(void)
{
  if (tmpfs_mounted) {
    unmount_full();
    return;
  }
  struct rlimit limit;
  CHECK(getrlimit(RLIMIT_FSIZE, &limit) == 0);
  limit.rlim_cur = limit.rlim_max;
  CHECK(setrlimit(RLIMIT_FSIZE, &limit) == 0);
}

int main(int argc, char **argv)
{
  CHECK(argc >= 3, "usage: e2e_disk <cudaw-ctl> <work dir>");
  ctl = argv[1];
  snprintf(base, sizeof base, "%s/disk-%ld", argv[2], (long)getpid());
  CHECK(system("true") == 0);
  mkdir(argv[2], 0700);
  CHECK(mkdir(base, 0700) == 0, "mkdir %s: %s", base, strerror(errno));
  CUDA_OK(cudaFree(NULL));
  make_data();
  size_t total = 0;
  for (int b = 0; b < data.count; b++) total += data.size[b];

  /* Host memory against disk: the image's memory is given back. */
  expect_ctl("checkpoint", 0, "saved");
  long rss_memory = rss_bytes();
  expect_ctl("resume", 0, "restored");
  char plain[600], packed[600], command[1024];
  snprintf(plain, sizeof plain, "%s/plain", base);
  snprintf(command, sizeof command, "checkpoint --to %s", plain);
  expect_ctl(command, 0, "written to disk");
  long rss_disk = rss_bytes();
  printf("RSS paused: image in host memory %ld MiB, image on disk %ld MiB (image %zu MiB)\n",
         rss_memory >> 20, rss_disk >> 20, total >> 20);
  CHECK(rss_memory - rss_disk >= (long)(total * 8 / 10),
        "RSS with the image on disk (%ld) should be at least 80%% of the image (%zu) below the "
        "RSS with the image in memory (%ld)", rss_disk, total, rss_memory);
  expect_ctl("status", 0, "image on disk");
  expect_ctl("checkpoint", 6, "wrong state");
  expect_ctl("resume", 0, "read and verified from disk");
  check_data("after a resume from disk");

  /* Broken files: resume names them, stays paused, and works once they are fixed. */
  damage_and_fix(plain, "", "region-0-0.bin", flip_byte, "checksum mismatch");
  damage_and_fix(plain, "", "region-1-0.bin", truncate_half, "truncated");
  damage_and_fix(plain, "", "region-2-0.bin", remove_file, "missing");
  damage_and_fix(plain, "", "manifest.json", not_json, "line 1");
  damage_and_fix(plain, "", "manifest.json", wrong_version, "format version 7");
  snprintf(packed, sizeof packed, "%s/zstd", base);
  damage_and_fix(packed, "--zstd", "region-0-0.zst", flip_byte, "region-0-0.zst");
  reuse_dir(plain);

  /* A full disk: the checkpoint fails, the program runs on with its data. */
  const char *full_error = make_full_disk();
  snprintf(command, sizeof command, "checkpoint --to %s", full_dir);
  expect_ctl(command, 1, full_error);
  expect_state("running");
  check_data("after a checkpoint to a full disk");
  fix_full_disk();
  expect_ctl(command, 0, "written to disk");
  expect_ctl("resume", 0, "read and verified from disk");
  check_data("after the disk had room again");

  /* Release everything needs the driver's process checkpoint. Without a driver it fails and
   * nothing changes; where there is one (a GPU machine) it may take this CUDA-less process. */
  char out[8192];
  int code = e2e_run_ctl(ctl, "checkpoint --release-all", (long)getpid(), out, sizeof out);
  printf("cudaw-ctl checkpoint --release-all -> %d: %s", code, out);
  if (code == 0) {
    CHECK(strstr(out, "nothing left on the GPU"), "%s", out);
    expect_ctl("resume", 0, "driver's process restore");
  } else {
    CHECK(code == 1 && strstr(out, "releasing everything failed") &&
              strstr(out, "the program keeps running"), "%s", out);
  }
  expect_state("running");
  check_data("after --release-all");
  unmount_full();
  snprintf(command, sizeof command, "rm -rf '%s'", base);
  CHECK(system(command) == 0, "%s", command);
  printf("ok\n");
  return 0;
}
