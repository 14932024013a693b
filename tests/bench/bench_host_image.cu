// Where a checkpoint's host-side time goes, measured without cudaw (run natively): the costs the
// copy engine pays per byte and per chunk, each alone, so that the engine's choices rest on
// figures. Host image: first-touch faults (kernel zeroing) with and without transparent huge
// pages, from 1 and from many threads; copying into faulted and into fresh pages; registering
// the image for direct DMA and the DMA rate into it; pinning. VMM: the driver calls behind one
// chunk (create, map, set access, unmap, release), serial, batched over adjacent mappings, from
// several threads, and with one physical allocation shared by all chunks.
//
// usage: bench_host_image [GiB] [chunks]      (default 8 GiB, 2048 chunks)
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <string>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <vector>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define CUDA_CHECK(call)                                                                       \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "bench_host_image: %s: %s\n", #call, cudaGetErrorString(e_));            \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

static double now()
{
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const size_t MIB = (size_t)1 << 20;

static void print_file(const char *path)
{
  FILE *f = fopen(path, "r");
  char line[256] = "?";
  if (f) {
    if (!fgets(line, sizeof line, f)) strcpy(line, "?");
    fclose(f);
  }
  line[strcspn(line, "\n")] = 0;
  printf("%-52s %s\n", path, line);
}

static char *fresh(size_t bytes, int huge)
{
  void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  return (char *)p;
}

// Run fn(first, count) over `threads` slices of [0, bytes) in 4 MiB steps; seconds.
template <class F> static double parallel(size_t bytes, int threads, F fn)
{
  std::vector<std::thread> pool;
  size_t steps = (bytes + 4 * MIB - 1) / (4 * MIB);
  double t0 = now();
  for (int t = 0; t < threads; t++)
    pool.emplace_back([=] {
      for (size_t s = (size_t)t; s < steps; s += (size_t)threads) {
        size_t off = s * 4 * MIB;
        fn(off, std::min(4 * MIB, bytes - off));
      }
    });
  for (auto &th : pool) th.join();
  return now() - t0;
}

static void report(const char *what, size_t bytes, double seconds)
{
  printf("%-60s %8.2f GB/s %9.3f s\n", what, bytes / seconds / 1e9, seconds);
}

static void host_image(size_t bytes, int threads)
{
  printf("\n-- host image, %.0f GiB, %d threads (CPUs online %ld)\n", bytes / 1073741824.0, threads,
         sysconf(_SC_NPROCESSORS_ONLN));
  print_file("/sys/kernel/mm/transparent_hugepage/enabled");
  print_file("/sys/kernel/mm/transparent_hugepage/defrag");
  print_file("/sys/kernel/mm/transparent_hugepage/khugepaged/defrag");
  print_file("/proc/sys/vm/nr_hugepages");
  print_file("/proc/sys/vm/unprivileged_userfaultfd");
  struct utsname u;
  if (uname(&u) == 0) printf("%-52s %s\n", "kernel", u.release);
  char name[128];
  for (int huge = 1; huge >= 0; huge--)
    for (int t : {1, threads}) {
      char *p = fresh(bytes, huge);
      double s = parallel(bytes, t, [&](size_t off, size_t n) {
        if (madvise(p + off, n, MADV_POPULATE_WRITE) != 0)
          for (size_t i = 0; i < n; i += 4096) p[off + i] = 0;
      });
      snprintf(name, sizeof name, "fault (MADV_POPULATE_WRITE), %s, %d thread%s",
               huge ? "huge pages" : "4 KiB pages", t, t > 1 ? "s" : "");
      report(name, bytes, s);
      munmap(p, bytes);
    }
  // Copy from per-thread 4 MiB sources (like staging buffers) into fresh and faulted pages.
  std::vector<char *> sources(threads);
  for (auto &s : sources) {
    s = (char *)aligned_alloc(4096, 4 * MIB);
    memset(s, 7, 4 * MIB);
  }
  for (int huge = 1; huge >= 0; huge--) {
    char *p = fresh(bytes, huge);
    std::atomic_int next{0};
    auto copy = [&](size_t off, size_t n) {
      thread_local int me = next++;
      memcpy(p + off, sources[me % threads], n);
    };
    snprintf(name, sizeof name, "copy into fresh pages (faults inline), %s", huge ? "huge" : "4 KiB");
    report(name, bytes, parallel(bytes, threads, copy));
    snprintf(name, sizeof name, "copy into faulted pages, %s", huge ? "huge" : "4 KiB");
    report(name, bytes, parallel(bytes, threads, copy));
    munmap(p, bytes);
  }
  // The same copies from fewer threads: is the fault path contended, or memory bound?
  for (int t : {4, 8}) {
    char *p = fresh(bytes, 1);
    std::atomic_int next{0};
    auto copy = [&](size_t off, size_t n) {
      thread_local int me = next++;
      memcpy(p + off, sources[me % threads], n);
    };
    snprintf(name, sizeof name, "copy into fresh pages (faults inline), huge, %d threads", t);
    report(name, bytes, parallel(bytes, t, copy));
    munmap(p, bytes);
  }
  // Each thread its own mapping: faults of one mapping do not wait for another's.
  {
    size_t share = (bytes / threads + 2 * MIB - 1) / (2 * MIB) * (2 * MIB);
    std::vector<char *> maps(threads);
    for (auto &m : maps) m = fresh(share, 1);
    std::vector<std::thread> pool;
    double t0 = now();
    for (int t = 0; t < threads; t++)
      pool.emplace_back([&, t] {
        for (size_t off = 0; off < share; off += 4 * MIB)
          memcpy(maps[t] + off, sources[t], std::min(4 * MIB, share - off));
      });
    for (auto &th : pool) th.join();
    report("copy into fresh pages, huge, one mapping per thread", share * threads, now() - t0);
    for (auto m : maps) munmap(m, share);
  }
  // Memory bandwidth with no fault at all: write and copy within faulted pages.
  {
    char *p = fresh(bytes, 1);
    parallel(bytes, threads, [&](size_t off, size_t n) { memset(p + off, 1, n); });
    report("memset of faulted pages (write bandwidth)", bytes,
           parallel(bytes, threads, [&](size_t off, size_t n) { memset(p + off, 2, n); }));
    munmap(p, bytes);
  }
  // userfaultfd's UFFDIO_COPY: the kernel allocates each page and fills it from the source,
  // without zeroing it first (4 KiB pages only).
  {
    long fd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | 1 /* UFFD_USER_MODE_ONLY */);
    if (fd < 0) fd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    struct uffdio_api api = {};
    api.api = UFFD_API;
    if (fd < 0 || ioctl((int)fd, UFFDIO_API, &api) != 0) {
      printf("userfaultfd: not available (%s)\n", strerror(errno));
    } else {
      for (int t : {4, threads}) {
        char *p = fresh(bytes, 0);
        struct uffdio_register reg = {};
        reg.range.start = (unsigned long)p;
        reg.range.len = bytes;
        reg.mode = UFFDIO_REGISTER_MODE_MISSING;
        if (ioctl((int)fd, UFFDIO_REGISTER, &reg) != 0) {
          printf("UFFDIO_REGISTER failed: %s\n", strerror(errno));
          munmap(p, bytes);
          break;
        }
        std::atomic_int next{0}, failures{0};
        double s = parallel(bytes, t, [&](size_t off, size_t n) {
          thread_local int me = next++;
          for (size_t done = 0; done < n;) {
            struct uffdio_copy c = {};
            c.dst = (unsigned long)(p + off + done);
            c.src = (unsigned long)(sources[me % threads] + done);
            c.len = n - done;
            c.mode = UFFDIO_COPY_MODE_DONTWAKE;
            if (ioctl((int)fd, UFFDIO_COPY, &c) != 0 && c.copy <= 0) {
              if (c.copy != -EAGAIN) { failures++; break; }
              continue;
            }
            done += (size_t)c.copy;
          }
        });
        char what[96];
        snprintf(what, sizeof what, "UFFDIO_COPY into fresh pages (no zeroing), %d threads%s", t,
                 failures ? " FAILED" : "");
        report(what, bytes, s);
        bool right = p[0] == 7 && p[bytes - 1] == 7;
        if (!right) printf("UFFDIO_COPY: wrong contents\n");
        munmap(p, bytes);
      }
      close((int)fd);
    }
  }
  for (auto s : sources) free(s);

  // Register an image for direct DMA (no staging copy), and the DMA rate into it.
  char *p = fresh(bytes, 1);
  parallel(bytes, threads, [&](size_t off, size_t n) { madvise(p + off, n, MADV_POPULATE_WRITE); });
  double t0 = now();
  cudaError_t reg = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
  double reg_s = now() - t0;
  if (reg != cudaSuccess) {
    printf("cudaHostRegister of %zu bytes failed: %s\n", bytes, cudaGetErrorString(reg));
  } else {
    report("cudaHostRegister of faulted pages", bytes, reg_s);
    size_t dev_bytes = std::min(bytes, (size_t)4 << 30);
    char *d;
    CUDA_CHECK(cudaMalloc(&d, dev_bytes));
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (int rep = 0; rep < 2; rep++) {
      t0 = now();
      for (size_t off = 0; off < bytes; off += 32 * MIB)
        CUDA_CHECK(cudaMemcpyAsync(p + off, d + off % dev_bytes, std::min(32 * MIB, bytes - off),
                                   cudaMemcpyDeviceToHost, st));
      CUDA_CHECK(cudaStreamSynchronize(st));
      report("D2H straight into the registered image (32 MiB copies)", bytes, now() - t0);
    }
    t0 = now();
    CUDA_CHECK(cudaHostUnregister(p));
    report("cudaHostUnregister", bytes, now() - t0);
    CUDA_CHECK(cudaFree(d));
    CUDA_CHECK(cudaStreamDestroy(st));
  }
  munmap(p, bytes);
  // Registering fresh (unfaulted) pages: the driver faults them itself.
  p = fresh(std::min(bytes, (size_t)2 << 30), 1);
  t0 = now();
  reg = cudaHostRegister(p, std::min(bytes, (size_t)2 << 30), cudaHostRegisterPortable);
  if (reg == cudaSuccess) {
    report("cudaHostRegister of fresh pages (2 GiB at most)", std::min(bytes, (size_t)2 << 30),
           now() - t0);
    cudaHostUnregister(p);
  }
  munmap(p, std::min(bytes, (size_t)2 << 30));
  void *h;
  t0 = now();
  CUDA_CHECK(cudaHostAlloc(&h, (size_t)1 << 30, cudaHostAllocPortable));
  report("cudaHostAlloc 1 GiB", (size_t)1 << 30, now() - t0);
  CUDA_CHECK(cudaFreeHost(h));
}

// ---- VMM ---------------------------------------------------------------------------------------

static void vmm(size_t chunks, size_t chunk_bytes, int threads)
{
  printf("\n-- VMM, %zu chunks of %zu MiB (one driver call sequence each)\n", chunks, chunk_bytes >> 20);
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    printf("libcuda.so.1 not found\n");
    return;
  }
  auto create = (decltype(&cuMemCreate))dlsym(lib, "cuMemCreate");
  auto release = (decltype(&cuMemRelease))dlsym(lib, "cuMemRelease");
  auto map = (decltype(&cuMemMap))dlsym(lib, "cuMemMap");
  auto unmap = (decltype(&cuMemUnmap))dlsym(lib, "cuMemUnmap");
  auto access = (decltype(&cuMemSetAccess))dlsym(lib, "cuMemSetAccess");
  auto reserve = (decltype(&cuMemAddressReserve))dlsym(lib, "cuMemAddressReserve");
  auto address_free = (decltype(&cuMemAddressFree))dlsym(lib, "cuMemAddressFree");
  CUDA_CHECK(cudaFree(nullptr));
  size_t total = chunks * chunk_bytes;
  CUdeviceptr base;
  if (reserve(&base, total, 0, 0, 0) != CUDA_SUCCESS) {
    printf("reserve failed\n");
    return;
  }
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemAccessDesc desc = {};
  desc.location = prop.location;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  std::vector<CUmemGenericAllocationHandle> handles(chunks);
  auto check = [](CUresult r, const char *what) {
    if (r != CUDA_SUCCESS) {
      printf("%s failed: %d\n", what, (int)r);
      return false;
    }
    return true;
  };
  auto verify = [&](const char *what) { // the whole range is usable from the device
    cudaError_t e = cudaMemset((void *)base, 1, total);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) printf("%s: memory not usable: %s\n", what, cudaGetErrorString(e));
  };
  auto ms = [&](const char *what, double s) {
    printf("%-60s %9.2f ms %7.2f us/chunk\n", what, s * 1e3, s * 1e6 / chunks);
  };
  auto in_threads = [&](int count, auto fn) {
    std::vector<std::thread> pool;
    for (int t = 0; t < count; t++)
      pool.emplace_back([&, t] {
        for (size_t i = (size_t)t; i < chunks; i += (size_t)count) fn(i);
      });
    for (auto &th : pool) th.join();
  };
  bool ok = true;
  double t0;
  // 1. Serial, one sequence per chunk (what vmem does today).
  t0 = now();
  for (size_t i = 0; i < chunks && ok; i++)
    ok = check(create(&handles[i], chunk_bytes, &prop, 0), "create") &&
         check(map(base + i * chunk_bytes, chunk_bytes, 0, handles[i], 0), "map") &&
         check(access(base + i * chunk_bytes, chunk_bytes, &desc, 1), "set access");
  ms("serial create+map+set access per chunk", now() - t0);
  verify("serial");
  t0 = now();
  for (size_t i = 0; i < chunks && ok; i++)
    ok = check(unmap(base + i * chunk_bytes, chunk_bytes), "unmap") && check(release(handles[i]), "release");
  ms("serial unmap+release per chunk", now() - t0);
  // 2. Batched: one set access and one unmap over the adjacent mappings.
  double tc = 0, tm = 0;
  t0 = now();
  for (size_t i = 0; i < chunks && ok; i++) ok = check(create(&handles[i], chunk_bytes, &prop, 0), "create");
  tc = now() - t0;
  t0 = now();
  for (size_t i = 0; i < chunks && ok; i++) ok = check(map(base + i * chunk_bytes, chunk_bytes, 0, handles[i], 0), "map");
  tm = now() - t0;
  t0 = now();
  bool batched_access = ok && check(access(base, total, &desc, 1), "set access over all chunks");
  double ta = now() - t0;
  ms("  create alone", tc);
  ms("  map alone", tm);
  ms("  one set access over all adjacent chunks", ta);
  if (batched_access) verify("batched set access");
  t0 = now();
  bool batched_unmap = ok && check(unmap(base, total), "unmap over all chunks");
  double tu = now() - t0;
  if (!batched_unmap)
    for (size_t i = 0; i < chunks; i++) unmap(base + i * chunk_bytes, chunk_bytes);
  t0 = now();
  for (size_t i = 0; i < chunks; i++) release(handles[i]);
  double tr = now() - t0;
  ms("  one unmap over all adjacent chunks", tu);
  ms("  release alone", tr);
  // 3. Several threads, batched access.
  for (int t : {4, threads}) {
    std::atomic_int failed{0};
    t0 = now();
    in_threads(t, [&](size_t i) {
      if (create(&handles[i], chunk_bytes, &prop, 0) || map(base + i * chunk_bytes, chunk_bytes, 0, handles[i], 0))
        failed++;
    });
    access(base, total, &desc, 1);
    char what[96];
    snprintf(what, sizeof what, "%d threads create+map, one set access", t);
    ms(what, now() - t0);
    verify(what);
    t0 = now();
    unmap(base, total);
    in_threads(t, [&](size_t i) { release(handles[i]); });
    snprintf(what, sizeof what, "one unmap, %d threads release%s", t, failed ? " (FAILURES)" : "");
    ms(what, now() - t0);
  }
  // 4. One physical allocation for all chunks, mapped piecewise.
  CUmemGenericAllocationHandle one;
  t0 = now();
  ok = check(create(&one, total, &prop, 0), "create all");
  for (size_t i = 0; i < chunks && ok; i++) ok = check(map(base + i * chunk_bytes, chunk_bytes, i * chunk_bytes, one, 0), "map piece");
  if (ok) access(base, total, &desc, 1);
  ms("one create for all, map per chunk, one set access", now() - t0);
  if (ok) verify("shared handle");
  t0 = now();
  unmap(base, total);
  release(one);
  ms("one unmap, one release", now() - t0);
  address_free(base, total);
}

int main(int argc, char **argv)
{
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    printf("skipped: no GPU\n");
    return 77;
  }
  size_t gib = argc > 1 ? strtoull(argv[1], 0, 10) : 8;
  size_t chunks = argc > 2 ? strtoull(argv[2], 0, 10) : 2048;
  int threads = (int)std::min(16L, sysconf(_SC_NPROCESSORS_ONLN));
  vmm(chunks, gib * 1024 * MIB / chunks, threads);
  host_image(gib << 30, threads);
  return 0;
}
