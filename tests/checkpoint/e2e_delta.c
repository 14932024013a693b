/* Description: delta checkpoints end to end, through cudaw's own checksum kernel loaded with the
 * driver API: on the emulated device (its equivalent of the kernel) and, unchanged, on a GPU.
 * A program with one large and many small allocations is checkpointed and resumed with the image
 * kept (CUDAW_CKPT_KEEP_IMAGE=1); then, again and again, one byte at a random place (allocation
 * ends included) is changed by cudaMemcpy or cudaMemset before a checkpoint, which must copy that
 * byte's chunk and only it (the reply's unchanged_bytes), and the resumed memory must equal a
 * host shadow copy byte for byte. Exits 77 without a device.
 * usage: e2e_delta [changes] */
#include "e2e_common.h"

#define SMALL 24
#define CHUNK ((uint64_t)4 << 20) /* CUDAW_CKPT_STAGING's default: the delta's unit */

struct buffer {
  unsigned char *device, *shadow;
  size_t size;
};

static double reply_number(const char *reply, const char *key)
{
  char pattern[64];
  snprintf(pattern, sizeof pattern, "\"%s\":", key);
  const char *at = strstr(reply, pattern);
  CHECK(at != NULL, "no %s in %s", key, reply);
  return strtod(at + strlen(pattern), NULL);
}

/* Checkpoint and resume; returns the bytes the checkpoint copied. */
static uint64_t cycle(void)
{
  char reply[4096];
  e2e_ask("checkpoint", reply, sizeof reply);
  CHECK(e2e_reply_ok(reply), "checkpoint: %s", reply);
  uint64_t bytes = (uint64_t)reply_number(reply, "bytes");
  uint64_t unchanged = (uint64_t)reply_number(reply, "unchanged_bytes");
  e2e_ask("resume", reply, sizeof reply);
  CHECK(e2e_reply_ok(reply), "resume: %s", reply);
  return bytes - unchanged;
}

static void verify(const struct buffer *b, const char *when)
{
  unsigned char *copy = malloc(b->size);
  CHECK(copy != NULL);
  CUDA_OK(cudaMemcpy(copy, b->device, b->size, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < b->size; i++)
    if (copy[i] != b->shadow[i])
      test_fail("%s: byte %zu of a %zu-byte allocation is %#x, expected %#x", when, i, b->size,
                copy[i], b->shadow[i]);
  free(copy);
}

int main(int argc, char **argv)
{
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("skipped: no device\n");
    return 77;
  }
  const char *keep = getenv("CUDAW_CKPT_KEEP_IMAGE");
  CHECK(keep && strcmp(keep, "1") == 0, "run with CUDAW_CKPT_KEEP_IMAGE=1");
  int changes = argc > 1 ? atoi(argv[1]) : 40;
  struct buffer buffers[SMALL + 1];
  uint64_t random = 0x11;
  for (int i = 0; i <= SMALL; i++) {
    struct buffer *b = &buffers[i];
    /* One large allocation of several chunks, and small ones of odd sizes (some share arenas). */
    b->size = i == 0 ? (size_t)(5 * CHUNK + 12345) : (size_t)(1000 + e2e_random(&random) % 300000);
    b->shadow = malloc(b->size);
    CHECK(b->shadow != NULL);
    for (size_t k = 0; k < b->size; k++) b->shadow[k] = (unsigned char)e2e_random(&random);
    CUDA_OK(cudaMalloc((void **)&b->device, b->size));
    CUDA_OK(cudaMemcpy(b->device, b->shadow, b->size, cudaMemcpyHostToDevice));
  }
  uint64_t first = cycle();
  CHECK(first > 0, "the first checkpoint copies everything");
  CHECK_EQ(cycle(), 0); /* nothing changed */
  for (int n = 0; n < changes; n++) {
    struct buffer *b = &buffers[e2e_random(&random) % (SMALL + 1)];
    uint64_t pick = e2e_random(&random) % 4;
    size_t at = pick == 0 ? 0 : pick == 1 ? b->size - 1 : (size_t)(e2e_random(&random) % b->size);
    unsigned char value = (unsigned char)(b->shadow[at] ^ (1 + e2e_random(&random) % 255));
    if (n % 2) CUDA_OK(cudaMemset(b->device + at, value, 1));
    else CUDA_OK(cudaMemcpy(b->device + at, &value, 1, cudaMemcpyHostToDevice));
    b->shadow[at] = value;
    uint64_t copied = cycle();
    if (copied == 0 || copied > CHUNK)
      test_fail("change %d (byte %zu of %zu): the checkpoint copied %llu bytes, expected one chunk",
                n, at, b->size, (unsigned long long)copied);
    verify(b, "after resume");
  }
  for (int i = 0; i <= SMALL; i++) verify(&buffers[i], "at the end");
  for (int i = 0; i <= SMALL; i++) {
    CUDA_OK(cudaFree(buffers[i].device));
    free(buffers[i].shadow);
  }
  printf("ok %d single-byte changes, each found and copied as one chunk of %llu bytes in all\n",
         changes, (unsigned long long)first);
  return 0;
}
