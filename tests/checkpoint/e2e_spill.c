/* Description: spilling a paused program's image to disk (cudaw-ctl spill/unspill) and the
 * resume streamed from disk, end to end on the emulated device: spill is refused while running
 * and when the image is on disk already; a spill frees the image's host memory (RSS drops by
 * most of the image) and status names the directory; the resume streams the chunk files to the
 * device with every byte back, its peak host memory no more than where it ends plus 16 MiB
 * (VmHWM, reset before it; a resume that read the whole image first would hold it beside the
 * device memory) and its reply's disk_peak_bytes small; a corrupt chunk file and a missing one
 * make the resume fail naming the file while the program stays paused with its image on disk
 * and the device memory it re-created released again (the emulated device's free memory),
 * and once the file is back the resume succeeds; the same with zstd files; unspill reads the
 * image back into host memory (the files may then go) and the resume works from there; a zstd
 * manifest without per-chunk "frames" (as written before them) streams in file order.
 * A spill that fails (DIR cannot be made) leaves the image in host memory and the resume works.
 * usage: e2e_spill <cudaw-ctl> <work dir> */
#include "e2e_common.h"

#include <fcntl.h>
#include <stdbool.h>
#include <sys/stat.h>

#define MIB ((size_t)1 << 20)

static const char *ctl;
static char base[512];
static struct e2e_data data = {4, {0}, {40 * MIB, 40 * MIB, 5 * MIB + 17, 4096}};

/* cudaw-ctl <args with %ld for our pid>: expect exit `code` and `fragment` in its output. */
static void expect_ctl(const char *args, int code, const char *fragment, char *out, size_t len)
{
  char line[2048], cmd[2600];
  snprintf(line, sizeof line, args, (long)getpid());
  snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", ctl, line);
  FILE *p = popen(cmd, "r");
  CHECK(p != NULL, "popen %s", cmd);
  size_t used = fread(out, 1, len - 1, p);
  out[used] = '\0';
  int status = pclose(p);
  int got = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  CHECK(got == code && (!fragment || strstr(out, fragment)),
        "cudaw-ctl %s: expected exit %d and '%s'; got %d: %s", line, code,
        fragment ? fragment : "", got, out);
  printf("cudaw-ctl %s -> %d: %s", line, got, out);
}

static void ctl_ok(const char *args, int code, const char *fragment)
{
  char out[8192];
  expect_ctl(args, code, fragment, out, sizeof out);
}

static long status_kib(const char *key)
{
  FILE *f = fopen("/proc/self/status", "re");
  CHECK(f);
  char line[128];
  long kib = -1;
  size_t n = strlen(key);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, key, n) == 0 && sscanf(line + n, ": %ld kB", &kib) == 1) break;
  fclose(f);
  CHECK(kib >= 0, "no %s in /proc/self/status", key);
  return kib;
}

static void write_file(const char *path, const char *bytes, size_t size)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  CHECK(fd >= 0 && write(fd, bytes, size) == (ssize_t)size && close(fd) == 0, "write %s", path);
}

static void expect_state(const char *state)
{
  char reply[8192];
  e2e_ask("status", reply, sizeof reply);
  CHECK(e2e_reply_state(reply, state), "expected %s, status says %s", state, reply);
}

/* The emulated device's free memory, asked of it directly (cudaw's gate is closed while paused). */
static size_t emu_free_bytes(void)
{
  cudaError_t (*get)(size_t *, size_t *) =
      (cudaError_t(*)(size_t *, size_t *))e2e_emu_symbol("cudaMemGetInfo");
  size_t free_bytes = 0, total = 0;
  CHECK(get(&free_bytes, &total) == cudaSuccess, "the emulated cudaMemGetInfo failed");
  return free_bytes;
}

/* Pause and spill to dir (flags: "" or "--zstd"). */
static void pause_and_spill(const char *dir, const char *flags)
{
  char args[1024];
  ctl_ok("checkpoint %ld", 0, "saved");
  snprintf(args, sizeof args, "spill %s %%ld %s", flags, dir);
  ctl_ok(args, 0, "written to disk, its host memory freed");
}

/* The spilled image's `file` damaged (flipped in its middle, or removed): the resume fails
 * naming it with `expect`, still paused with the image on disk; with the file back it works. */
static void damage_and_fix(const char *dir, const char *flags, const char *file, bool remove,
                           const char *expect)
{
  char path[1024], out[8192];
  pause_and_spill(dir, flags);
  snprintf(path, sizeof path, "%s/%s", dir, file);
  char *original;
  size_t size;
  e2e_read_file(path, &original, &size);
  if (remove) {
    CHECK(unlink(path) == 0, "unlink %s", path);
  } else {
    char *copy = malloc(size);
    CHECK(copy);
    memcpy(copy, original, size);
    copy[size / 2] ^= 0x5a;
    write_file(path, copy, size);
    free(copy);
  }
  size_t free_paused = emu_free_bytes();
  expect_ctl("resume %ld", 1, file, out, sizeof out);
  CHECK(strstr(out, expect) && strstr(out, "still paused"), "expected '%s' and 'still paused': %s",
        expect, out);
  CHECK(emu_free_bytes() == free_paused, "the failed resume should release the device memory it "
        "re-created: %zu bytes free before, %zu after", free_paused, emu_free_bytes());
  expect_state("paused");
  ctl_ok("status %ld", 0, "image on disk");
  write_file(path, original, size);
  ctl_ok("resume %ld", 0, "streamed to the device");
  expect_state("running");
  e2e_check_data(&data, file);
  free(original);
}

/* Wait until the process holds no image in host memory (a resume drops it after its reply). */
static void wait_no_image(void)
{
  char reply[8192];
  for (int i = 0; i < 500; i++) {
    e2e_ask("status", reply, sizeof reply);
    if (strstr(reply, "\"image_bytes\":0,")) return;
    e2e_sleep_us(10000);
  }
  test_fail("the image is still in host memory 5 s after the resume: %s", reply);
}

int main(int argc, char **argv)
{
  CHECK(argc >= 3, "usage: e2e_spill <cudaw-ctl> <work dir>");
  ctl = argv[1];
  snprintf(base, sizeof base, "%s/spill-%ld", argv[2], (long)getpid());
  mkdir(argv[2], 0700);
  CHECK(mkdir(base, 0700) == 0, "mkdir %s: %s", base, strerror(errno));
  CUDA_OK(cudaFree(NULL));
  e2e_make_data(&data);
  size_t total = 0;
  for (int b = 0; b < data.count; b++) total += data.size[b];
  char plain[600], packed[600], args[1024], out[8192];
  snprintf(plain, sizeof plain, "%s/plain", base);
  snprintf(packed, sizeof packed, "%s/zstd", base);

  /* Only a paused program's image moves. */
  snprintf(args, sizeof args, "spill %%ld %s", plain);
  ctl_ok(args, 6, "not paused");
  ctl_ok("unspill %ld", 6, "not paused");
  expect_state("running");

  /* A spill that fails loses nothing: the image stays in host memory, the resume works. */
  char blocked[700];
  snprintf(blocked, sizeof blocked, "%s/a-file", base);
  write_file(blocked, "x", 1);
  ctl_ok("checkpoint %ld", 0, "saved");
  snprintf(args, sizeof args, "spill %%ld %s/image", blocked);
  ctl_ok(args, 1, "the image stays in host memory");
  expect_ctl("status %ld", 0, "paused", out, sizeof out);
  CHECK(!strstr(out, "image on disk"), "a failed spill left status saying disk: %s", out);
  ctl_ok("resume %ld", 0, "restored");
  e2e_check_data(&data, "after a failed spill");

  /* Spill: the host memory goes, status says where the image is. */
  snprintf(args, sizeof args, "spill %%ld %s", plain);
  ctl_ok("checkpoint %ld", 0, "saved");
  long rss_memory = status_kib("VmRSS");
  ctl_ok(args, 0, "written to disk, its host memory freed");
  long rss_disk = status_kib("VmRSS");
  printf("RSS paused: image in host memory %ld MiB, spilled %ld MiB (image %zu MiB)\n",
         rss_memory >> 10, rss_disk >> 10, total >> 20);
  CHECK((rss_memory - rss_disk) * 1024 >= (long)(total * 8 / 10),
        "a spill should free at least 80%% of the image (%zu bytes): RSS %ld -> %ld KiB", total,
        rss_memory, rss_disk);
  expect_ctl("status %ld", 0, "image on disk", out, sizeof out);
  CHECK(strstr(out, plain), "status should name %s: %s", plain, out);
  ctl_ok(args, 6, "on disk already");
  ctl_ok("checkpoint %ld", 6, "already paused");

  /* The streamed resume: peak host memory no more than where it ends, plus a little. */
  int fd = open("/proc/self/clear_refs", O_WRONLY);
  CHECK(fd >= 0 && write(fd, "5", 1) == 1 && close(fd) == 0, "resetting VmHWM: %s",
        strerror(errno));
  long before = status_kib("VmRSS");
  expect_ctl("--json resume %ld", 0, "\"ok\":true", out, sizeof out);
  long peak = status_kib("VmHWM");
  wait_no_image();
  long after = status_kib("VmRSS");
  char *field = strstr(out, "\"disk_peak_bytes\":");
  CHECK(field, "no disk_peak_bytes in %s", out);
  long long reading = atoll(field + strlen("\"disk_peak_bytes\":"));
  printf("streamed resume: RSS %ld MiB before, peak %ld MiB, %ld MiB after; reading held %lld "
         "bytes beyond the staging buffers (image %zu MiB)\n", before >> 10, peak >> 10,
         after >> 10, reading, total >> 20);
  CHECK(peak - after <= 16 * 1024, "the streamed resume's peak RSS (%ld KiB) should be at most "
        "16 MiB above its end (%ld KiB): the image must not lie in host memory", peak, after);
  CHECK(reading <= 16 * (long long)MIB, "disk_peak_bytes %lld should be at most 16 MiB", reading);
  e2e_check_data(&data, "after the streamed resume");

  /* Bad files: named, still paused, image on disk; fixed, the resume works. */
  damage_and_fix(plain, "", "region-0-0.bin", false, "checksum mismatch");
  damage_and_fix(plain, "", "region-1-0.bin", true, "missing");
  damage_and_fix(packed, "--zstd", "region-0-0.zst", false, "region-0-0.zst");
  damage_and_fix(packed, "--zstd", "region-1-0.zst", true, "missing");

  /* A zstd manifest without "frames" (images written before: one frame per file) still
   * streams: the chunks come out of each file in order, several threads taking turns. */
  pause_and_spill(packed, "--zstd");
  char manifest[700];
  snprintf(manifest, sizeof manifest, "%s/manifest.json", packed);
  char *json;
  size_t json_size;
  e2e_read_file(manifest, &json, &json_size);
  int stripped = 0;
  for (char *key; (key = strstr(json, "\"frames\":")) != NULL; stripped++) {
    char *at = key, *end = strchr(key, ']');
    while (at > json && *at != ',') at--; /* from the comma before the key (it is not first) */
    CHECK(end && *at == ',', "cannot cut \"frames\" out of %s", manifest);
    memmove(at, end + 1, strlen(end + 1) + 1);
  }
  CHECK(stripped >= 4, "expected \"frames\" for every file of %s: %d", manifest, stripped);
  write_file(manifest, json, strlen(json));
  free(json);
  ctl_ok("resume %ld", 0, "streamed to the device");
  e2e_check_data(&data, "after a resume from files of one zstd frame each");

  /* Unspill: back into host memory; the files are no longer needed. */
  pause_and_spill(packed, "--zstd");
  ctl_ok("unspill %ld", 0, "into host memory");
  ctl_ok("unspill %ld", 6, "in host memory already");
  expect_ctl("status %ld", 0, "paused", out, sizeof out);
  CHECK(!strstr(out, "image on disk"), "after unspill status should not say the image is on "
        "disk: %s", out);
  snprintf(args, sizeof args, "rm -rf '%s'", packed);
  CHECK(system(args) == 0, "%s", args);
  expect_ctl("resume %ld", 0, "restored", out, sizeof out);
  CHECK(!strstr(out, "disk"), "a resume after unspill reads nothing from disk: %s", out);
  e2e_check_data(&data, "after unspill and resume");

  snprintf(args, sizeof args, "rm -rf '%s'", base);
  CHECK(system(args) == 0, "%s", args);
  printf("ok\n");
  return 0;
}
