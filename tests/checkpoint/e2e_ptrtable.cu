/* Description: pointers kept in device memory under CUDAW_VMEM=translate (issue 21), in an
 * unmodified nvcc program (shared runtime) on the emulated device. A table of device pointers is
 * built as libraries build theirs (half copied from the host, half stored by a kernel from its
 * pointer arguments); a kernel reads the table and writes through every entry. Modes:
 *   identity: allocations sit at their real address, so the table is right on the device; after
 *             each of two checkpoints and resumes nothing moved (moved_bytes 0) and the table is
 *             still right: with CUDAW_EMU_ALLOC=lowest the allocator gives every address back;
 *             by default (it never does) the resume re-creates the memory at its old addresses
 *             with the VMM calls (status in_place_bytes, the info line in the ctest regex).
 *   forced:   CUDAW_TEST_MOVE=1 on a device that never reuses an address: the resume moves every
 *             chunk: status counts it, a warning names the chunks (the ctest regex), the stale
 *             table faults (cudaErrorIllegalAddress) while kernel arguments and copies are still
 *             translated, and a table stored again by the kernel works.
 *   virtual:  CUDAW_VMEM_IDENTITY=0: the table holds virtual pointers, which fault on the device
 *             (what issue 21 fixes; this mode pins down that the test can fail).
 *   gpu:      on a real GPU: prints what the resume moved and what it re-created in place; if
 *             nothing moved, the table must still be right (twice), else kernel arguments and a
 *             table stored again must be.
 * Exits 77 without a device. usage: e2e_ptrtable identity|forced|virtual|gpu */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "cudaw_emu.h"
#include "test.h"

#define CUDA_OK(call)                                                                    \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    CHECK(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorName(e_));                     \
  } while (0)

#define WORDS 64 /* written through each table entry */

__host__ __device__ static unsigned value(unsigned seed, unsigned entry, unsigned word)
{
  return seed * 2654435761u ^ (entry * 40503u + word * 977u);
}

/* Writes WORDS values through each of the n pointers in table. */
__global__ void scatter(unsigned **table, int n, unsigned seed)
{
  for (int i = blockIdx.x; i < n; i += gridDim.x)
    for (unsigned k = threadIdx.x; k < WORDS; k += blockDim.x) table[i][k] = value(seed, i, k);
}

/* Stores its pointer argument in table[i], as a library's set-up kernel does. */
__global__ void keep(unsigned **table, int i, unsigned *p) { table[i] = p; }

/* Writes WORDS values at p (a plain pointer argument). */
__global__ void fill(unsigned *p, unsigned seed)
{
  for (unsigned k = threadIdx.x; k < WORDS; k += blockDim.x) p[k] = value(seed, 0, k);
}

/* The emulated device runs these on the host, checking every access as a GPU would fault
 * (cudaw_emu_access, found in the emulated runtime that cudaw loaded). */
static int (*emu_access)(const struct cudaw_emu_launch *, const void *, size_t);
#define cudaw_emu_access emu_access

CUDAW_EMU_KERNEL(_Z7scatterPPjij) {
  unsigned **table = CUDAW_EMU_ARG(args, 0, unsigned **);
  int n = CUDAW_EMU_ARG(args, 1, int);
  unsigned seed = CUDAW_EMU_ARG(args, 2, unsigned);
  if (cudaw_emu_access(launch, table, n * sizeof *table) != 0) return;
  for (int i = 0; i < n; i++) {
    unsigned *p = table[i];
    if (cudaw_emu_access(launch, p, WORDS * sizeof *p) != 0) return;
    for (unsigned k = 0; k < WORDS; k++) p[k] = value(seed, i, k);
  }
}

CUDAW_EMU_KERNEL(_Z4keepPPjiS_) {
  unsigned **table = CUDAW_EMU_ARG(args, 0, unsigned **);
  int i = CUDAW_EMU_ARG(args, 1, int);
  if (cudaw_emu_access(launch, table + i, sizeof *table) != 0) return;
  table[i] = CUDAW_EMU_ARG(args, 2, unsigned *);
}

CUDAW_EMU_KERNEL(_Z4fillPjj) {
  unsigned *p = CUDAW_EMU_ARG(args, 0, unsigned *);
  unsigned seed = CUDAW_EMU_ARG(args, 1, unsigned);
  if (cudaw_emu_access(launch, p, WORDS * sizeof *p) != 0) return;
  for (unsigned k = 0; k < WORDS; k++) p[k] = value(seed, 0, k);
}

/* One request line to this process's control socket; the reply line into reply. */
static void ask(const char *request, char *reply, size_t len)
{
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  const char *dir = getenv("CUDAW_RUN_DIR");
  CHECK(dir && *dir, "CUDAW_RUN_DIR must be set");
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%ld.sock", dir, (long)getpid());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0,
        "control socket %s: %s", addr.sun_path, strerror(errno));
  size_t n = strlen(request), used = 0;
  CHECK(send(fd, request, n, MSG_NOSIGNAL) == (ssize_t)n, "send %s", request);
  while (used + 1 < len) {
    ssize_t got = recv(fd, reply + used, len - 1 - used, 0);
    if (got <= 0) break;
    used += (size_t)got;
    if (memchr(reply, '\n', used)) break;
  }
  reply[used] = '\0';
  close(fd);
  CHECK(used > 0, "no reply to %s", request);
}

static unsigned long long json_u64(const char *reply, const char *key)
{
  char want[64];
  snprintf(want, sizeof want, "\"%s\":", key);
  const char *at = strstr(reply, want);
  CHECK(at != NULL, "status has no %s: %s", key, reply);
  return strtoull(at + strlen(want), NULL, 10);
}

/* A checkpoint and a resume through the control socket; what the resume moved (status). */
static void pause_resume(char *reply, size_t len, unsigned long long *moved,
                         unsigned long long *chunks)
{
  ask("checkpoint\n", reply, len);
  CHECK(strstr(reply, "\"ok\":true") && strstr(reply, "\"state\":\"paused\""), "checkpoint: %s",
        reply);
  ask("resume\n", reply, len);
  CHECK(strstr(reply, "\"ok\":true") && strstr(reply, "\"state\":\"running\""), "resume: %s", reply);
  ask("status\n", reply, len);
  *moved = json_u64(reply, "moved_bytes");
  *chunks = json_u64(reply, "moved_chunks");
  printf("resume: %llu bytes in place, %llu bytes in %llu chunks moved\n",
         json_u64(reply, "in_place_bytes"), *moved, *chunks);
}

/* Small (packed in one arena), medium and large buffers. */
static const size_t sizes[] = {256, 512, 4096, 100000, 3 << 20, 16 << 20};
#define N ((int)(sizeof sizes / sizeof sizes[0]))
static unsigned *buffer[N];
static unsigned **table;

/* The table as a library builds it: the first half copied from the host, the rest stored by a
 * kernel from its (translated) pointer arguments. */
static void build_table(int from)
{
  if (from == 0) CUDA_OK(cudaMemcpy(table, buffer, N / 2 * sizeof *table, cudaMemcpyHostToDevice));
  for (int i = from ? 0 : N / 2; i < N; i++) keep<<<1, 1>>>(table, i, buffer[i]);
  CUDA_OK(cudaDeviceSynchronize());
}

/* scatter through the table; the launch's (or the synchronisation's) status. */
static cudaError_t run_scatter(unsigned seed)
{
  scatter<<<2, 32>>>(table, N, seed);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  return e;
}

static void verify(unsigned seed, const char *when)
{
  unsigned got[WORDS];
  for (int i = 0; i < N; i++) {
    CUDA_OK(cudaMemcpy(got, buffer[i], sizeof got, cudaMemcpyDeviceToHost));
    for (unsigned k = 0; k < WORDS; k++)
      CHECK(got[k] == value(seed, i, k), "%s: buffer %d word %u is %#x, expected %#x", when, i, k,
            got[k], value(seed, i, k));
  }
}

int main(int argc, char **argv)
{
  CHECK(argc == 2, "usage: %s identity|forced|virtual|gpu", argv[0]);
  const char *mode = argv[1];
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    printf("skipped: no device\n");
    return 77;
  }
  const char *real = getenv("CUDAW_REAL_CUDART");
  void *emu = real ? dlopen(real, RTLD_NOW | RTLD_NOLOAD) : NULL;
  if (emu) emu_access = (int (*)(const struct cudaw_emu_launch *, const void *, size_t))dlsym(
      emu, "cudaw_emu_access");
  CHECK(emu_access || strcmp(mode, "gpu") == 0, "not on the emulated device (CUDAW_REAL_CUDART)");
  for (int i = 0; i < N; i++) CUDA_OK(cudaMalloc(&buffer[i], sizes[i]));
  CUDA_OK(cudaMalloc(&table, N * sizeof *table));
  build_table(0);

  cudaError_t e = run_scatter(1);
  if (strcmp(mode, "virtual") == 0) {
    CHECK(e == cudaErrorIllegalAddress, "virtual pointers in device memory: %s, expected "
          "cudaErrorIllegalAddress", cudaGetErrorName(e));
    printf("ok: virtual pointers kept in device memory fault\n");
    return 0;
  }
  CHECK(e == cudaSuccess, "scatter through the table: %s", cudaGetErrorName(e));
  verify(1, "before the checkpoint");

  char reply[8192];
  unsigned long long moved, chunks;
  pause_resume(reply, sizeof reply, &moved, &chunks);
  verify(1, "after the resume"); /* copies are translated either way */

  int gpu = strcmp(mode, "gpu") == 0;
  if (strcmp(mode, "identity") == 0 || (gpu && moved == 0)) {
    CHECK(moved == 0 && chunks == 0, "nothing should have moved: %s", reply);
    e = run_scatter(2);
    CHECK(e == cudaSuccess, "scatter through the table after the resume: %s", cudaGetErrorName(e));
    verify(2, "after the resume");
    pause_resume(reply, sizeof reply, &moved, &chunks); /* the kept reservations, if any */
    CHECK(moved == 0 && chunks == 0, "nothing should have moved the second time: %s", reply);
    e = run_scatter(5);
    CHECK(e == cudaSuccess, "scatter after the second resume: %s", cudaGetErrorName(e));
    verify(5, "after the second resume");
    printf("ok: identity, the table kept in device memory survived two checkpoints\n");
  } else {
    if (!gpu) {
      CHECK(moved >= (19u << 20) && chunks >= 3, "every chunk should have moved: %s", reply);
      e = run_scatter(2);
      CHECK(e == cudaErrorIllegalAddress, "a stale table should fault: %s", cudaGetErrorName(e));
    } /* on a GPU a fault would end the context: the stale table is left alone */
    for (int i = 0; i < N; i++) { /* plain pointer arguments are translated to the new memory */
      fill<<<1, 32>>>(buffer[i], 3);
      CUDA_OK(cudaGetLastError());
    }
    CUDA_OK(cudaDeviceSynchronize());
    unsigned got[WORDS];
    CUDA_OK(cudaMemcpy(got, buffer[N - 1], sizeof got, cudaMemcpyDeviceToHost));
    CHECK(got[WORDS - 1] == value(3, 0, WORDS - 1), "fill after the move");
    build_table(1); /* stored again from translated arguments: right for the new memory */
    e = run_scatter(4);
    CHECK(e == cudaSuccess, "scatter through the rebuilt table: %s", cudaGetErrorName(e));
    verify(4, "through the rebuilt table");
    printf("ok: forced move reported (%llu bytes in %llu chunks)\n", moved, chunks);
  }
  for (int i = 0; i < N; i++) CUDA_OK(cudaFree(buffer[i]));
  CUDA_OK(cudaFree(table));
  return 0;
}
