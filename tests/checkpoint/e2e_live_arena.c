/* Description: live checkpoints of one large allocation that the program writes at one small spot
 * while the pre-copy runs: the pre-copy must cover the whole allocation and the pause must
 * re-copy only the chunk that changed (recopy_bytes, as the control socket reports it, is exactly
 * one chunk: CUDAW_CKPT_STAGING). Mode "vmem": the allocation is cudaMalloc's (vmem). Mode
 * "mapped": the program maps it itself with cuMemCreate + cuMemMap through the driver API, as
 * JAX/XLA's arena and PyTorch's expandable segments do. Mode "unmap": a thread unmaps, releases,
 * re-creates and re-maps pieces of a mapped arena (checking that every call succeeds) while live
 * checkpoints copy it; each checkpoint must stay live (the emulated device faults the context when
 * memory is unmapped under a copy in flight, which would fail it) and every byte is verified after
 * every resume. Run on the emulated device; exits 77 without one.
 * usage: ckpt_e2e_live_arena vmem|mapped|unmap */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>

#include "cudaw_emu.h"
#include "e2e_common.h"

#define ARENA_BYTES ((size_t)64 << 20)
/* In the first chunk, which the pre-copy takes first: the writer has the rest of the pre-copy
 * (63 chunks) to write it again after its copy, and every write stores a new value, so exactly
 * that chunk differs at the pause. */
#define SPOT_OFFSET ((size_t)64 << 10)
#define PIECES 8 /* unmap mode: the arena is this many mappings */
#define PIECE_BYTES (ARENA_BYTES / PIECES)

/* The driver's declarations give the types (cuda.h maps versioned names such as cuMemcpyHtoD). */
static struct {
  __typeof__(&cuMemAddressReserve) reserve;
  __typeof__(&cuMemCreate) create;
  __typeof__(&cuMemRelease) release;
  __typeof__(&cuMemMap) map;
  __typeof__(&cuMemUnmap) unmap;
  __typeof__(&cuMemSetAccess) set_access;
  __typeof__(&cuMemcpyHtoD) htod;
  __typeof__(&cuMemcpyDtoH) dtoh;
} cu;

#define CU_OK(call)                                                                      \
  do {                                                                                   \
    CUresult r_ = (call);                                                                \
    CHECK(r_ == CUDA_SUCCESS, "%s: CUresult %d", #call, (int)r_);                        \
  } while (0)

/* A driver function as the runtime hands it out (PyTorch's way to the VMM calls). */
static void get(const char *name, void *slot)
{
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  CUDA_OK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status));
  CHECK(status == cudaDriverEntryPointSuccess && fn, "no driver function %s", name);
  memcpy(slot, &fn, sizeof fn);
}

static void load_driver(void)
{
  get("cuMemAddressReserve", &cu.reserve);
  get("cuMemCreate", &cu.create);
  get("cuMemRelease", &cu.release);
  get("cuMemMap", &cu.map);
  get("cuMemUnmap", &cu.unmap);
  get("cuMemSetAccess", &cu.set_access);
  get("cuMemcpyHtoD", &cu.htod);
  get("cuMemcpyDtoH", &cu.dtoh);
}

/* Physical memory of `bytes` mapped read-write at `at`; its handle. With gap_us, a pause may
 * land between the map and the access (regression: such a mapping was listed, and its copy
 * failed the checkpoint, live or not). */
static CUmemGenericAllocationHandle map_piece(CUdeviceptr at, size_t bytes, long gap_us)
{
  CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
  CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CUmemGenericAllocationHandle handle;
  CU_OK(cu.create(&handle, bytes, &prop, 0));
  CU_OK(cu.map(at, bytes, 0, handle, 0));
  if (gap_us) e2e_sleep_us(gap_us);
  CU_OK(cu.set_access(at, bytes, &access, 1));
  return handle;
}

static unsigned char pattern(unsigned seed, size_t i)
{
  return (unsigned char)(i * 151 + seed * 29 + (i >> 13));
}

/* The arena and what it must hold (shadow). */
static CUdeviceptr arena;
static unsigned char *shadow;
static int mapped; /* written and read through the driver API */

static void write_range(size_t offset, size_t bytes)
{
  if (mapped) CU_OK(cu.htod(arena + offset, shadow + offset, bytes));
  else CUDA_OK(cudaMemcpy((void *)(uintptr_t)(arena + offset), shadow + offset, bytes,
                          cudaMemcpyHostToDevice));
}

static void check_arena(const char *when)
{
  unsigned char *host = malloc(ARENA_BYTES);
  CHECK(host);
  if (mapped) CU_OK(cu.dtoh(host, arena, ARENA_BYTES));
  else CUDA_OK(cudaMemcpy(host, (void *)(uintptr_t)arena, ARENA_BYTES, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < ARENA_BYTES; i++)
    if (host[i] != shadow[i])
      test_fail("%s: arena byte %zu is %#x, expected %#x", when, i, host[i], shadow[i]);
  free(host);
}

/* ---- one spot written during the pre-copy ---- */

static atomic_int stop;
static atomic_ulong spot_writes; /* also the last value written at the spot */

/* Writes the next count to the spot again and again (the gate holds it while paused). */
static void *write_spot(void *unused)
{
  (void)unused;
  CUDA_OK(cudaSetDevice(0));
  for (uint64_t count = 1; !atomic_load(&stop); count++) {
    if (mapped) CU_OK(cu.htod(arena + SPOT_OFFSET, &count, sizeof count));
    else CUDA_OK(cudaMemcpy((void *)(uintptr_t)(arena + SPOT_OFFSET), &count, sizeof count,
                            cudaMemcpyHostToDevice));
    atomic_store(&spot_writes, count);
  }
  return NULL;
}

static int run_spot(const char *mode)
{
  size_t chunk = 0;
  const char *staging = getenv("CUDAW_CKPT_STAGING");
  CHECK(staging && (chunk = strtoull(staging, NULL, 10) << 20) != 0,
        "CUDAW_CKPT_STAGING must be set in MiB (the chunk the count is checked against)");
  if (mapped) {
    CU_OK(cu.reserve(&arena, ARENA_BYTES, 0, 0, 0));
    map_piece(arena, ARENA_BYTES, 0);
  } else {
    void *p;
    CUDA_OK(cudaMalloc(&p, ARENA_BYTES));
    arena = (CUdeviceptr)(uintptr_t)p;
  }
  for (size_t i = 0; i < ARENA_BYTES; i++) shadow[i] = pattern(1, i);
  write_range(0, ARENA_BYTES);

  pthread_t writer;
  CHECK(pthread_create(&writer, NULL, write_spot, NULL) == 0);
  while (atomic_load(&spot_writes) < 10) e2e_sleep_us(100);
  char reply[4096];
  e2e_ask("checkpoint live", reply, sizeof reply);
  CHECK(e2e_reply_ok(reply) && e2e_reply_state(reply, "paused"), "checkpoint: %s", reply);
  CHECK(strstr(reply, "\"live\":true"), "not a live checkpoint: %s", reply);
  uint64_t precopied = e2e_json_u64(reply, "precopy_bytes");
  uint64_t recopied = e2e_json_u64(reply, "recopy_bytes");
  printf("%s: %llu bytes pre-copied while running, %llu re-copied in the pause (chunk %zu)\n",
         mode, (unsigned long long)precopied, (unsigned long long)recopied, chunk);
  CHECK(precopied >= ARENA_BYTES, "the pre-copy left out the arena: %s", reply);
  CHECK(recopied == chunk,
        "the pause re-copied %llu bytes, expected the one chunk written (%zu): %s",
        (unsigned long long)recopied, chunk, reply);
  e2e_ask("resume", reply, sizeof reply);
  CHECK(e2e_reply_ok(reply), "resume: %s", reply);
  atomic_store(&stop, 1);
  pthread_join(writer, NULL);
  uint64_t last = atomic_load(&spot_writes);
  memcpy(shadow + SPOT_OFFSET, &last, sizeof last);
  check_arena("after the resume");
  printf("%s: ok: only the chunk written was re-copied; every byte verified\n", mode);
  return 0;
}

/* ---- pieces unmapped and mapped again during the pre-copy ---- */

static CUmemGenericAllocationHandle handles[PIECES];
static unsigned char *fresh[PIECES]; /* the next contents of each piece */
static atomic_long remaps;

/* Unmaps and releases a piece, maps new memory there with new contents, and so on. */
static void *churn(void *unused)
{
  (void)unused;
  CUDA_OK(cudaSetDevice(0));
  uint64_t random = 12345;
  for (unsigned seed = 2; !atomic_load(&stop); seed++) {
    int piece = (int)(e2e_random(&random) % PIECES);
    CUdeviceptr at = arena + (size_t)piece * PIECE_BYTES;
    CU_OK(cu.unmap(at, PIECE_BYTES));
    CU_OK(cu.release(handles[piece]));
    handles[piece] = map_piece(at, PIECE_BYTES, 300);
    for (size_t i = 0; i < PIECE_BYTES; i++) fresh[piece][i] = pattern(seed, i);
    CU_OK(cu.htod(at, fresh[piece], PIECE_BYTES));
    memcpy(shadow + (size_t)piece * PIECE_BYTES, fresh[piece], PIECE_BYTES);
    atomic_fetch_add(&remaps, 1);
  }
  return NULL;
}

static int run_unmap(int cycles)
{
  CU_OK(cu.reserve(&arena, ARENA_BYTES, 0, 0, 0));
  for (int p = 0; p < PIECES; p++) {
    handles[p] = map_piece(arena + (size_t)p * PIECE_BYTES, PIECE_BYTES, 0);
    CHECK((fresh[p] = malloc(PIECE_BYTES)) != NULL);
  }
  for (size_t i = 0; i < ARENA_BYTES; i++) shadow[i] = pattern(1, i);
  write_range(0, ARENA_BYTES);
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, churn, NULL) == 0);
  uint64_t precopied = 0, recopied = 0;
  for (int cycle = 0; cycle < cycles; cycle++) {
    char reply[4096];
    e2e_ask("checkpoint live", reply, sizeof reply);
    CHECK(e2e_reply_ok(reply) && e2e_reply_state(reply, "paused"), "checkpoint %d: %s", cycle,
          reply);
    CHECK(strstr(reply, "\"live\":true"), "checkpoint %d not live (the pre-copy failed): %s",
          cycle, reply);
    precopied += e2e_json_u64(reply, "precopy_bytes");
    recopied += e2e_json_u64(reply, "recopy_bytes");
    e2e_ask("resume", reply, sizeof reply);
    CHECK(e2e_reply_ok(reply), "resume %d: %s", cycle, reply);
    long before = atomic_load(&remaps);
    while (atomic_load(&remaps) < before + 2) e2e_sleep_us(200);
  }
  atomic_store(&stop, 1);
  pthread_join(thread, NULL);
  check_arena("at the end");
  printf("unmap: %d live checkpoints while %ld pieces were unmapped, released and mapped again; "
         "%llu MiB pre-copied, %llu MiB re-copied; every unmap succeeded, every byte verified; "
         "ok\n", cycles, atomic_load(&remaps), (unsigned long long)(precopied >> 20),
         (unsigned long long)(recopied >> 20));
  return 0;
}

int main(int argc, char **argv)
{
  CHECK(argc >= 2, "usage: ckpt_e2e_live_arena vmem|mapped|unmap");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) test_skip("no device");
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaFree(0));
  load_driver();
  CHECK((shadow = malloc(ARENA_BYTES)) != NULL);
  if (strcmp(argv[1], "vmem") == 0) return run_spot(argv[1]);
  mapped = 1;
  if (strcmp(argv[1], "mapped") == 0) return run_spot(argv[1]);
  if (strcmp(argv[1], "unmap") == 0) return run_unmap(argc > 2 ? atoi(argv[2]) : 20);
  test_fail("unknown mode %s", argv[1]);
}
