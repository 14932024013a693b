// Checkpoint benchmark (run under cudaw; see the bench_ckpt_run target). For each size (GiB, from
// argv): device memory in one allocation and in thousands, a first checkpoint, a resume, a
// repeated checkpoint (image kept: CUDAW_CKPT_KEEP_IMAGE=1) and a resume, each as GB/s and as a
// ratio against the copy ceilings measured in the same run (pinned D2H and H2D cudaMemcpyAsync
// through one reused pinned buffer); pause latency (signal -> gate closed, drain excluded, with
// a thread busy in API calls); and NVIDIA's driver checkpoint (cuCheckpointProcess*) driven from
// a native helper process against a child holding the same amount of data.
// Between the first checkpoint and its resume the benchmark waits until cudaw has page-locked
// the image in the background (a real pause outlasts that; the time is printed).
// Then a repeated checkpoint after every byte changed (the kept image reused, every chunk copied)
// and a delta checkpoint after one byte in every tenth 4 MiB chunk changed (device checksums
// find them; only those are copied), each with where its time went.
// Then two live checkpoints ("checkpoint live": copied while the program runs, then a pause that
// re-copies the chunks whose checksum changed): one while a thread writes 10% of the memory once
// (every tenth 4 MiB chunk), one while it writes that 10% over and over until the gate stops it.
// Their stall (gate closed to device memory released) is printed against size / D2H ceiling of
// the same run, with the total time and the bytes copied before and inside the pause.
// Goals: first checkpoint >= 0.7x pinned D2H, repeated >= 0.9x, resume >= 0.8x pinned H2D,
// delta (10% changed) <= 0.2x of a full copy, faster than the driver, pause latency < 5 ms.
//
// usage: bench_ckpt [GiB...]                       (default 1 8 32; under cudaw)
//        bench_ckpt --driver <GiB>                 (native helper: prints "driver <ckpt s> <restore s>")
//        bench_ckpt --driver-child <GiB> <fd>      (native child holding the data)
//        bench_ckpt --hold <GiB> <device>          (under cudaw: hold GiB on one device, print
//                    that device's ceilings, wait for SIGTERM, verify; tests/gpu/multi_ckpt.sh
//                    group-pauses one per device to get per-device GB/s with all at once)
// BENCH_CKPT_DRIVER=0 leaves the driver out (quicker runs comparing cudaw's own settings).
// With CUDAW_CKPT_RESERVE set (bench_ckpt.sh runs both ways) the rows carry "[reserve]": before
// each first checkpoint the benchmark waits until the reserve has grown to the device memory
// (in the background, while the program runs; the time is printed), and each breakdown says
// how many bytes went straight into the reserve and how many through staging.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <vector>

#define CUDA_CHECK(call)                                                                       \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "bench_ckpt: %s: %s\n", #call, cudaGetErrorString(e_));                  \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

static const size_t GIB = (size_t)1 << 30;

static double now()
{
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// ---- talking to our own control socket --------------------------------------------------------

static std::string ask(const char *command)
{
  const char *dir = getenv("CUDAW_RUN_DIR");
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%ld.sock", dir ? dir : "", (long)getpid());
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (sockaddr *)&addr, sizeof addr) != 0) {
    fprintf(stderr, "bench_ckpt: cannot reach %s: is this running under cudaw with CUDAW_RUN_DIR "
            "set?\n", addr.sun_path);
    exit(1);
  }
  std::string line = std::string(command) + "\n", reply;
  if (send(fd, line.data(), line.size(), 0) != (ssize_t)line.size()) exit(1);
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
    reply.append(buf, (size_t)n);
    if (reply.find('\n') != std::string::npos) break;
  }
  close(fd);
  return reply;
}

static bool json_true(const std::string &json, const char *key)
{
  return json.find(std::string("\"") + key + "\":true") != std::string::npos;
}

static double number(const std::string &json, const char *key)
{
  std::string pattern = std::string("\"") + key + "\":";
  size_t at = json.find(pattern);
  return at == std::string::npos ? -1.0 : strtod(json.c_str() + at + pattern.size(), nullptr);
}

struct transition {
  double total, copy, setup_ms, gate_ms;
  double stall_ms, precopy_bytes, precopy_seconds, recopy_bytes; // live checkpoints
  double bytes;
  double drain_ms, memory_ms, wait_ms, memcpy_ms, hash_ms, fault_ms, device_hash_ms, threads;
  double unchanged_bytes;
  long rss_mib;
  double filled_bytes; // saved into fresh pages by the kernel (userfaultfd), never zeroed
  double issue_ms, image_ms; // this process's resident memory right after the transition
  double reserve_bytes, staged_bytes; // into the reserve directly / through staging buffers
  bool memory_beside;    // resume: memory made beside the copy (memory_ms beside, not before it)
  double memory_wait_ms; // ... what the copy threads waited for it, each on average
  double release_early_ms, release_tail_ms; // checkpoint: memory given back while saving: the
                                            // driver's time, and what it added after the copy
};

static long rss_mib()
{
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  if (f) fclose(f);
  return kib >> 10;
}

static transition run(const char *command)
{
  std::string reply = ask(command);
  if (reply.find("\"ok\":true") == std::string::npos) {
    fprintf(stderr, "bench_ckpt: %s failed: %s", command, reply.c_str());
    exit(1);
  }
  return {number(reply, "seconds"), number(reply, "copy_seconds"), number(reply, "setup_ms"),
          number(reply, "gate_ms"), number(reply, "stall_ms"), number(reply, "precopy_bytes"),
          number(reply, "precopy_seconds"), number(reply, "recopy_bytes"), number(reply, "bytes"), number(reply, "drain_ms"),
          number(reply, "memory_ms"), number(reply, "wait_ms"), number(reply, "memcpy_ms"),
          number(reply, "hash_ms"), number(reply, "fault_ms"), number(reply, "device_hash_ms"),
          number(reply, "threads"), number(reply, "unchanged_bytes"), rss_mib(),
          number(reply, "filled_bytes"), number(reply, "issue_ms"), number(reply, "image_ms"),
          number(reply, "reserve_bytes"), number(reply, "staged_bytes"),
          reply.find("\"memory_beside\":true") != std::string::npos, number(reply, "memory_wait_ms"),
          number(reply, "release_early_ms"), number(reply, "release_tail_ms")};
}

// Where one transition's time went: the engine's copy phase split per copy thread (on average:
// waiting for DMA, copying staging <-> image, host checksums, faulting fresh image pages in),
// the device checksums, release/recreate of device memory, and this process's RSS after it.
static std::string breakdown(const char *what, const transition &t)
{
  char memory[128];
  if (t.memory_beside)
    snprintf(memory, sizeof memory, "recreate beside the copy %6.1f ms (copy waited %5.1f ms)",
             t.memory_ms, t.memory_wait_ms);
  else if (t.release_early_ms > 0)
    snprintf(memory, sizeof memory, "release %6.1f ms (while saving %6.1f ms, after the copy %5.1f ms)",
             t.memory_ms, t.release_early_ms, t.release_tail_ms);
  else
    snprintf(memory, sizeof memory, "%s %6.1f ms", strstr(what, "checkpoint") ? "release" : "recreate",
             t.memory_ms);
  char line[800];
  snprintf(line, sizeof line,
           "  %-20s %7.3f s = gate+drain %6.1f ms, setup %6.1f ms, copy %7.1f ms [per thread of "
           "%.0f: DMA wait %6.1f, memcpy %6.1f, hash %6.1f, fault %6.1f, issue %5.1f ms; image map "
           "%5.1f ms, device hash %5.1f ms], %s; RSS %ld MiB; staged %.0f MiB%s%s",
           what, t.total, t.gate_ms + t.drain_ms, t.setup_ms, t.copy * 1e3, t.threads, t.wait_ms,
           t.memcpy_ms, t.hash_ms, t.fault_ms, t.issue_ms, t.image_ms, t.device_hash_ms,
           memory, t.rss_mib,
           t.staged_bytes / 1048576.0, t.reserve_bytes > 0 ? ", image in the reserve" : "",
           t.filled_bytes > 0 ? "; image pages filled by the kernel (no zeroing)" : "");
  return line;
}

// ---- ceilings ----------------------------------------------------------------------------------

// GB/s of `total` bytes copied between `device` and one reused pinned buffer of `chunk` bytes.
static double ceiling(bool d2h, char *device, size_t total, void *pinned, size_t chunk,
                      cudaStream_t stream)
{
  CUDA_CHECK(cudaStreamSynchronize(stream));
  double t0 = now();
  for (size_t off = 0; off < total; off += chunk) {
    size_t n = std::min(chunk, total - off);
    if (d2h) CUDA_CHECK(cudaMemcpyAsync(pinned, device + off, n, cudaMemcpyDeviceToHost, stream));
    else CUDA_CHECK(cudaMemcpyAsync(device + off, pinned, n, cudaMemcpyHostToDevice, stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return (double)total / (now() - t0) / 1e9;
}

// ---- NVIDIA's driver checkpoint, from a native helper ------------------------------------------

static int driver_child(size_t gib, int fd)
{
  std::vector<char *> blocks(gib);
  for (size_t i = 0; i < gib; i++) {
    CUDA_CHECK(cudaMalloc(&blocks[i], GIB));
    CUDA_CHECK(cudaMemset(blocks[i], (int)(i * 37 + 1), GIB));
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  char byte = 'r';
  if (write(fd, &byte, 1) != 1) return 1;
  if (read(fd, &byte, 1) != 1) return 1; // the helper has checkpointed and restored us
  std::vector<unsigned char> host(64 << 20);
  for (size_t i = 0; i < gib; i++) { // spot-check every GiB
    CUDA_CHECK(cudaMemcpy(host.data(), blocks[i] + GIB - host.size(), host.size(),
                          cudaMemcpyDeviceToHost));
    for (unsigned char c : host)
      if (c != (unsigned char)(i * 37 + 1)) {
        fprintf(stderr, "bench_ckpt: driver restore lost data in GiB %zu\n", i);
        return 1;
      }
  }
  byte = 'v';
  return write(fd, &byte, 1) == 1 ? 0 : 1;
}

static int driver_helper(const char *self, size_t gib)
{
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    printf("driver unavailable\n");
    return 0;
  }
  auto init = (CUresult(*)(unsigned))dlsym(lib, "cuInit");
  auto lock = (CUresult(*)(int, CUcheckpointLockArgs *))dlsym(lib, "cuCheckpointProcessLock");
  auto ckpt = (CUresult(*)(int, CUcheckpointCheckpointArgs *))dlsym(lib, "cuCheckpointProcessCheckpoint");
  auto restore = (CUresult(*)(int, CUcheckpointRestoreArgs *))dlsym(lib, "cuCheckpointProcessRestore");
  auto unlock = (CUresult(*)(int, CUcheckpointUnlockArgs *))dlsym(lib, "cuCheckpointProcessUnlock");
  if (!init || !lock || !ckpt || !restore || !unlock || init(0) != CUDA_SUCCESS) {
    printf("driver unavailable\n");
    return 0;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  pid_t child = fork();
  if (child == 0) {
    close(sv[0]);
    std::string g = std::to_string(gib), f = std::to_string(sv[1]);
    execl(self, self, "--driver-child", g.c_str(), f.c_str(), (char *)nullptr);
    _exit(127);
  }
  close(sv[1]);
  char byte;
  if (read(sv[0], &byte, 1) != 1) return 1;
  CUcheckpointLockArgs lock_args = {};
  CUcheckpointCheckpointArgs ckpt_args = {};
  CUcheckpointRestoreArgs restore_args = {};
  CUcheckpointUnlockArgs unlock_args = {};
  double t0 = now();
  CUresult r1 = lock(child, &lock_args);
  double t1 = now();
  CUresult r2 = ckpt(child, &ckpt_args);
  double t2 = now();
  CUresult r3 = restore(child, &restore_args);
  double t3 = now();
  CUresult r4 = unlock(child, &unlock_args);
  if (r1 || r2 || r3 || r4) {
    printf("driver failed %d %d %d %d\n", (int)r1, (int)r2, (int)r3, (int)r4);
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    return 0;
  }
  byte = 'c';
  bool verified = write(sv[0], &byte, 1) == 1 && read(sv[0], &byte, 1) == 1 && byte == 'v';
  int status;
  waitpid(child, &status, 0);
  printf("driver %.6f %.6f %.6f %s\n", t2 - t1, t3 - t2, t1 - t0, verified ? "verified" : "LOST");
  return 0;
}

// The host memory the kernel says it can still give (MemAvailable), or 0 if unknown.
static size_t available_host_bytes()
{
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (fgets(line, sizeof line, f) && sscanf(line, "MemAvailable: %llu kB", &kib) != 1) {}
  fclose(f);
  return (size_t)kib << 10;
}

// Run `self --driver gib` natively (without cudaw in the environment); "ckpt restore" seconds.
// The driver keeps its image in host memory while this process keeps its own (image kept,
// reserve): where both do not fit, the kernel would kill one of them, so the rows are left out.
static bool driver_figures(const char *self, size_t gib, double *ckpt_s, double *restore_s)
{
  size_t need = gib * GIB + gib * GIB / 8, have = available_host_bytes();
  if (have && have < need) {
    fprintf(stderr, "bench_ckpt: driver rows for %zu GiB left out: its image needs %.1f GiB of host "
            "memory, %.1f GiB available while this process holds its own\n", gib,
            need / (double)GIB, have / (double)GIB);
    return false;
  }
  std::string cmd = "env -u LD_PRELOAD -u LD_LIBRARY_PATH '" + std::string(self) + "' --driver " +
                    std::to_string(gib);
  FILE *p = popen(cmd.c_str(), "r");
  char line[256] = "";
  bool ok = p && fgets(line, sizeof line, p) && sscanf(line, "driver %lf %lf", ckpt_s, restore_s) == 2;
  if (p) pclose(p);
  if (!ok) fprintf(stderr, "bench_ckpt: driver checkpoint for %zu GiB: %s", gib, line);
  if (ok && !strstr(line, "verified")) fprintf(stderr, "bench_ckpt: driver restore lost data\n");
  return ok;
}

// ---- the benchmark ------------------------------------------------------------------------------

struct row {
  std::string what;
  double gbps, ceiling;
  double seconds;
};

static std::vector<row> rows;
static std::vector<std::string> notes;

static void add(const std::string &what, double bytes, double seconds, double ceiling_gbps)
{
  rows.push_back({what, bytes / seconds / 1e9, ceiling_gbps, seconds});
}

static std::vector<std::string> live_rows;

// Writes every tenth 4 MiB chunk of the blocks (10% of the memory): once, or pass after pass
// (each with a new value) until stop, which is set once the checkpoint has paused the program.
static void write_tenth(std::vector<char *> *blocks, size_t piece, bool continuous,
                        std::atomic<bool> *stop)
{
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t stride = (size_t)40 << 20, span = (size_t)4 << 20;
  size_t total = piece * blocks->size();
  for (int pass = 1; !stop->load(); pass++) {
    for (size_t at = 0; at < total && !stop->load(); at += stride) {
      size_t n = std::min(span, total - at);
      for (size_t done = 0; done < n;) { // a chunk may span allocations
        size_t in = std::min(n - done, piece - (at + done) % piece);
        CUDA_CHECK(cudaMemsetAsync((*blocks)[(at + done) / piece] + (at + done) % piece,
                                   (pass * 29 + 3) & 0xff, in, s));
        done += in;
      }
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    if (!continuous) break;
  }
  CUDA_CHECK(cudaStreamDestroy(s));
}

// A live checkpoint while write_tenth runs, then its resume; one line for the table.
static void live_checkpoint(const std::string &name, std::vector<char *> &blocks, size_t piece,
                            bool continuous, double d2h)
{
  std::atomic<bool> stop(false);
  std::thread writer(write_tenth, &blocks, piece, continuous, &stop);
  transition c = run("checkpoint live");
  stop = true;
  transition r = run("resume");
  writer.join();
  double bytes = (double)piece * blocks.size(), floor_s = bytes / (d2h * 1e9);
  char line[400];
  snprintf(line, sizeof line, "%-58s %9.1f ms %7.3fx %9.3f s %8.0f MiB %8.0f MiB %8.3f s",
           (name + (continuous ? ": live, writing continuously" : ": live, 10% written")).c_str(),
           c.stall_ms, c.stall_ms / 1e3 / floor_s, c.total, c.precopy_bytes / 1048576.0,
           c.recopy_bytes / 1048576.0, r.total);
  live_rows.push_back(line);
  notes.push_back(breakdown(continuous ? "live (continuous)" : "live (10% written)", c));
}

static std::atomic<bool> busy_stop;

// Keeps API calls in flight while the pause latency is measured, as a real program would.
static void busy_thread(char *device)
{
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  while (!busy_stop.load()) {
    CUDA_CHECK(cudaMemsetAsync(device, 1, 1 << 20, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }
  CUDA_CHECK(cudaStreamDestroy(s));
}

static volatile sig_atomic_t hold_stop;
static void on_term(int) { hold_stop = 1; }

// One device's share of a per-device measurement: its data stay put while others pause it.
static int hold(size_t gib, int device)
{
  CUDA_CHECK(cudaSetDevice(device));
  const size_t chunk = (size_t)32 << 20, total = gib * GIB;
  void *pinned;
  CUDA_CHECK(cudaHostAlloc(&pinned, chunk, cudaHostAllocPortable));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  char *data;
  CUDA_CHECK(cudaMalloc(&data, total));
  size_t measure = std::min(total, (size_t)4 * GIB);
  double d2h = std::max(ceiling(true, data, measure, pinned, chunk, stream),
                        ceiling(true, data, measure, pinned, chunk, stream));
  double h2d = std::max(ceiling(false, data, measure, pinned, chunk, stream),
                        ceiling(false, data, measure, pinned, chunk, stream));
  for (size_t off = 0; off < total; off += chunk)
    CUDA_CHECK(cudaMemsetAsync(data + off, (int)((off / chunk) & 0xff), std::min(chunk, total - off), stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  signal(SIGTERM, on_term);
  printf("hold pid %ld device %d GiB %zu d2h %.2f h2d %.2f\n", (long)getpid(), device, gib, d2h, h2d);
  fflush(stdout);
  while (!hold_stop) usleep(20000); // no API calls: a pause finds nothing in flight
  size_t bad = 0;
  for (size_t off = 0; off < total; off += chunk) {
    size_t n = std::min(chunk, total - off);
    CUDA_CHECK(cudaMemcpy(pinned, data + off, n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i += 4096) bad += ((unsigned char *)pinned)[i] != ((off / chunk) & 0xff);
  }
  printf("hold device %d: %s\n", device, bad ? "DATA LOST" : "verified");
  return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
  if (argc == 4 && !strcmp(argv[1], "--hold")) return hold(strtoull(argv[2], 0, 10), atoi(argv[3]));
  if (argc == 3 && !strcmp(argv[1], "--driver")) return driver_helper(argv[0], strtoull(argv[2], 0, 10));
  if (argc == 4 && !strcmp(argv[1], "--driver-child"))
    return driver_child(strtoull(argv[2], 0, 10), atoi(argv[3]));
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    printf("skipped: no GPU\n");
    return 77;
  }
  const char *keep = getenv("CUDAW_CKPT_KEEP_IMAGE");
  const bool kept = keep && strcmp(keep, "1") == 0;
  printf("# host image kept between checkpoints (CUDAW_CKPT_KEEP_IMAGE): %s\n", kept ? "yes" : "no");
  const char *reserve_env = getenv("CUDAW_CKPT_RESERVE");
  const bool reserve = reserve_env && *reserve_env && strcmp(reserve_env, "off") != 0 &&
                       strcmp(reserve_env, "0") != 0;
  printf("# image reserve (CUDAW_CKPT_RESERVE): %s\n", reserve ? reserve_env : "off");
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; i++) sizes.push_back(strtoull(argv[i], 0, 10));
  if (sizes.empty()) sizes = {1, 8, 32};
  std::string self = argv[0];
  if (self.find('/') == std::string::npos) self = "./" + self;

  const size_t chunk = (size_t)32 << 20; // like the engine's staging buffers
  void *pinned;
  CUDA_CHECK(cudaHostAlloc(&pinned, chunk, cudaHostAllocPortable));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  double first_pause_ms = 0;
  std::vector<double> gate_ms;

  for (size_t gib : sizes) {
    double d2h = 0, h2d = 0; // this size's ceilings, measured on the one allocation
    for (int layout = 0; layout < 2; layout++) {
      size_t total = gib * GIB;
      size_t pieces = layout == 0 ? 1 : std::max<size_t>(2048, gib * 256); // >= 2048 allocations
      size_t piece = total / pieces;
      std::vector<char *> blocks(pieces);
      for (size_t i = 0; i < pieces; i++) {
        CUDA_CHECK(cudaMalloc(&blocks[i], piece));
        CUDA_CHECK(cudaMemsetAsync(blocks[i], (int)(i & 0xff), piece, stream));
      }
      CUDA_CHECK(cudaStreamSynchronize(stream));
      std::string name = std::to_string(gib) + " GiB in " + std::to_string(pieces) +
                         (pieces == 1 ? " allocation" : " allocations") + (reserve ? " [reserve]" : "");
      double bytes = (double)piece * pieces;
      if (reserve) { // grown by cudaw's thread while the program runs; a real job has that time
        double grow_start = now(), ready = 0, target = 0;
        do {
          std::string status = ask("status");
          ready = number(status, "reserve_bytes");
          target = number(status, "reserve_target");
          if (ready < 0 || json_true(status, "reserve_refused") || (target >= bytes && ready >= target))
            break;
          usleep(1000);
        } while (now() - grow_start < 120);
        char grown[200];
        snprintf(grown, sizeof grown, "%s: reserve %.0f of %.0f MiB ready %.3f s after the "
                 "allocations (grown in the background)", name.c_str(), ready / 1048576.0,
                 target / 1048576.0, now() - grow_start);
        notes.push_back(grown);
      }
      // Ceilings over the same amount of data (one allocation's worth; 4 GiB at most), measured
      // once the reserve has grown: its threads page-locking beside the copies lowered them.
      size_t measure = std::min(piece * pieces, (size_t)4 * GIB);
      if (layout == 0) {
        d2h = ceiling(true, blocks[0], measure, pinned, chunk, stream);
        h2d = ceiling(false, blocks[0], measure, pinned, chunk, stream);
        d2h = std::max(d2h, ceiling(true, blocks[0], measure, pinned, chunk, stream));
        h2d = std::max(h2d, ceiling(false, blocks[0], measure, pinned, chunk, stream));
        rows.push_back({std::to_string(gib) + " GiB ceiling pinned D2H", d2h, d2h, 0});
        rows.push_back({std::to_string(gib) + " GiB ceiling pinned H2D", h2d, h2d, 0});
      }
      long rss_before = rss_mib();
      transition c1 = run("checkpoint");
      // While paused, cudaw page-locks the image in the background (CUDAW_CKPT_REGISTER) so that
      // the resume copies straight from it; a real pause outlasts that. How long it took:
      double pin_start = now(), pinned_bytes = 0, image_bytes = 0;
      do {
        std::string status = ask("status");
        pinned_bytes = number(status, "image_pinned_bytes");
        image_bytes = number(status, "image_bytes");
        if (pinned_bytes >= image_bytes || pinned_bytes < 0) break;
        usleep(1000);
      } while (now() - pin_start < 60);
      double pin_seconds = now() - pin_start;
      transition r1 = run("resume");
      // Every byte changes: the kept image is reused but every chunk is copied again.
      for (size_t i = 0; i < pieces; i++)
        CUDA_CHECK(cudaMemsetAsync(blocks[i], (int)((i + 1) & 0xff), piece, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      transition c2 = run("checkpoint");
      transition r2 = run("resume");
      // One byte in every tenth 4 MiB chunk changes: a delta checkpoint copies 10% of them.
      const size_t stride = (size_t)40 << 20;
      size_t changed = 0;
      for (size_t at = 0; at < piece * pieces; at += stride, changed++)
        CUDA_CHECK(cudaMemsetAsync(blocks[at / piece] + at % piece, 0x5c, 1, stream));
      CUDA_CHECK(cudaStreamSynchronize(stream));
      transition c3 = run("checkpoint");
      transition r3 = run("resume");
      add(name + ": first checkpoint", bytes, c1.total, d2h);
      add(name + ": resume", bytes, r1.total, h2d);
      // Without a kept image the next checkpoint is a first one again.
      add(name + (kept ? ": repeated checkpoint (all changed)" : ": next checkpoint (image not kept)"),
          bytes, c2.total, d2h);
      add(name + ": repeated resume", bytes, r2.total, h2d);
      if (kept) add(name + ": delta checkpoint (10% changed)", bytes, c3.total, d2h);
      char delta[160];
      snprintf(delta, sizeof delta, "%s: delta checkpoint took %.3fx of the full one; %zu chunks "
               "changed, %.0f MiB found unchanged", name.c_str(), c3.total / c2.total, changed,
               c3.unchanged_bytes / 1048576.0);
      if (kept) notes.push_back(delta);
      if (!first_pause_ms) first_pause_ms = c1.gate_ms;
      char pin[160];
      snprintf(pin, sizeof pin, " (process RSS before: %ld MiB; image pinned while paused: %.0f of "
               "%.0f MiB in %.3f s, before the resume):", rss_before, pinned_bytes / 1048576.0,
               image_bytes / 1048576.0, pin_seconds);
      notes.push_back(name + pin);
      notes.push_back(breakdown("first checkpoint", c1));
      notes.push_back(breakdown("resume", r1));
      notes.push_back(breakdown("repeated checkpoint", c2));
      notes.push_back(breakdown("repeated resume", r2));
      notes.push_back(breakdown("delta checkpoint", c3));
      notes.push_back(breakdown("resume after delta", r3));
      live_checkpoint(name, blocks, piece, false, d2h);
      live_checkpoint(name, blocks, piece, true, d2h);
      for (char *b : blocks) CUDA_CHECK(cudaFree(b));
    }
    double ck = 0, rs = 0;
    const char *driver = getenv("BENCH_CKPT_DRIVER");
    if ((!driver || strcmp(driver, "0") != 0) && driver_figures(self.c_str(), gib, &ck, &rs)) {
      add(std::to_string(gib) + " GiB driver cuCheckpointProcessCheckpoint", (double)gib * GIB, ck, d2h);
      add(std::to_string(gib) + " GiB driver cuCheckpointProcessRestore", (double)gib * GIB, rs, h2d);
    }
  }

  // Pause latency: SIGUSR1 -> gate closed (the engine's gate_seconds), with API calls in flight.
  char *small;
  CUDA_CHECK(cudaMalloc(&small, 64 << 20));
  std::thread busy(busy_thread, small);
  for (int i = 0; i < 30; i++) {
    usleep(2000);
    kill(getpid(), SIGUSR1);
    std::string status;
    for (int w = 0; w < 20000; w++) {
      status = ask("status");
      if (status.find("\"state\":\"paused\"") != std::string::npos) break;
      usleep(100);
    }
    gate_ms.push_back(number(status, "last_gate_ms"));
    run("resume");
  }
  busy_stop = true;
  busy.join();
  CUDA_CHECK(cudaFree(small));
  std::sort(gate_ms.begin(), gate_ms.end());

  printf("\n%-58s %10s %10s %8s\n", "bench_ckpt (request -> paused / running)", "GB/s", "seconds",
         "ratio");
  for (const row &r : rows) {
    if (r.seconds == 0) printf("%-58s %10.2f %10s %8s\n", r.what.c_str(), r.gbps, "-", "1.00");
    else printf("%-58s %10.2f %10.3f %7.2fx\n", r.what.c_str(), r.gbps, r.seconds, r.gbps / r.ceiling);
  }
  printf("\n%-58s %12s %8s %11s %12s %12s %10s\n", "live checkpoints", "stall", "ratio",
         "total", "pre-copied", "re-copied", "resume");
  for (const std::string &l : live_rows) printf("%s\n", l.c_str());
  printf("stall: gate closed -> device memory released; ratio: stall / (size / pinned D2H ceiling "
         "of this run); goals: <= 0.2x with 10%% written, <= 0.5x writing continuously\n\n");
  for (const std::string &n : notes) printf("%s\n", n.c_str());
  printf("%-58s %10s %10.3f ms (median of %zu, max %.3f ms; first checkpoint %.3f ms)\n",
         "pause latency: signal -> gate closed", "", gate_ms[gate_ms.size() / 2], gate_ms.size(),
         gate_ms.back(), first_pause_ms);
  printf("ratios: checkpoint rows against pinned D2H of the same size, resume rows against pinned "
         "H2D, driver rows likewise; goals: first checkpoint >= 0.70x, repeated >= "
         "0.90x, resume >= 0.80x, above the driver's, pause latency < 5 ms\n");
  CUDA_CHECK(cudaFreeHost(pinned));
  return 0;
}
