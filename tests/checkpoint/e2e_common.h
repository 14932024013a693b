/* Helpers for the end-to-end checkpoint tests: programs linked against cudaw's libcudart and run
 * on the emulated device, which talk to their own control socket, signal themselves, run the
 * real cudaw-ctl, and reach the emulated runtime directly (bypassing cudaw) as "another process"
 * would reach the device. */
#ifndef CUDAW_E2E_COMMON_H
#define CUDAW_E2E_COMMON_H

#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#define CUDA_OK(call)                                                                    \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    CHECK(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorName(e_));                     \
  } while (0)

static inline double e2e_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void e2e_sleep_us(long us)
{
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* This process's control socket: $CUDAW_RUN_DIR/<pid>.sock (the tests always set the dir). */
static inline void e2e_socket_path(char *buf, size_t len)
{
  const char *dir = getenv("CUDAW_RUN_DIR");
  CHECK(dir && *dir, "CUDAW_RUN_DIR must be set for this test");
  snprintf(buf, len, "%s/%ld.sock", dir, (long)getpid());
}

/* Send one raw request (given with or without '\n') and read the one-line reply. 0 or -errno. */
static inline int e2e_ask_raw(const char *request, size_t request_len, char *reply, size_t len)
{
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  e2e_socket_path(addr.sun_path, sizeof addr.sun_path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    int rc = -errno;
    close(fd);
    return rc;
  }
  if (request_len && send(fd, request, request_len, MSG_NOSIGNAL) != (ssize_t)request_len) {
    close(fd);
    return -EIO;
  }
  size_t used = 0;
  while (used + 1 < len) {
    ssize_t n = recv(fd, reply + used, len - 1 - used, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    used += (size_t)n;
    if (memchr(reply, '\n', used)) break;
  }
  reply[used] = '\0';
  close(fd);
  return used ? 0 : -ENODATA;
}

static inline void e2e_ask(const char *command, char *reply, size_t len)
{
  char line[64];
  int n = snprintf(line, sizeof line, "%s\n", command);
  int rc = e2e_ask_raw(line, (size_t)n, reply, len);
  CHECK(rc == 0, "control socket request '%s': %s", command, strerror(-rc));
}

static inline int e2e_reply_ok(const char *reply) { return strstr(reply, "\"ok\":true") != NULL; }

/* The whole number after "key": in a reply; fails the test when the reply has none. */
static inline uint64_t e2e_json_u64(const char *reply, const char *key)
{
  char want[64];
  snprintf(want, sizeof want, "\"%s\":", key);
  const char *at = strstr(reply, want);
  CHECK(at, "no %s in %s", key, reply);
  return strtoull(at + strlen(want), NULL, 10);
}

static inline int e2e_reply_state(const char *reply, const char *state)
{
  char want[48];
  snprintf(want, sizeof want, "\"state\":\"%s\"", state);
  return strstr(reply, want) != NULL;
}

/* Wait up to `seconds` for the state reported by status. */
static inline int e2e_wait_state(const char *state, double seconds)
{
  double deadline = e2e_now() + seconds;
  char reply[4096];
  do {
    e2e_ask("status", reply, sizeof reply);
    if (e2e_reply_state(reply, state)) return 1;
    e2e_sleep_us(200);
  } while (e2e_now() < deadline);
  return 0;
}

/* Run `ctl args...` (cudaw-ctl) with stdout+stderr into out; returns its exit code. */
static inline int e2e_run_ctl(const char *ctl, const char *command, long pid, char *out, size_t len)
{
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' %s %ld 2>&1", ctl, command, pid);
  FILE *p = popen(cmd, "r");
  CHECK(p != NULL, "popen %s", cmd);
  size_t used = fread(out, 1, len - 1, p);
  out[used] = '\0';
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The whole file at path into *bytes (malloc'd, with a '\0' after its *size bytes). */
static inline void e2e_read_file(const char *path, char **bytes, size_t *size)
{
  FILE *f = fopen(path, "rb");
  CHECK(f, "open %s: %s", path, strerror(errno));
  fseek(f, 0, SEEK_END);
  *size = (size_t)ftell(f);
  rewind(f);
  *bytes = malloc(*size + 1);
  CHECK(*bytes && fread(*bytes, 1, *size, f) == *size, "read %s", path);
  (*bytes)[*size] = '\0';
  fclose(f);
}

/* The emulated runtime itself (already loaded by cudaw as the real runtime). */
static inline void *e2e_emu_symbol(const char *name)
{
  const char *path = getenv("CUDAW_REAL_CUDART");
  CHECK(path && *path, "CUDAW_REAL_CUDART must name the emulated runtime");
  void *handle = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  CHECK(handle, "the emulated runtime %s is not loaded", path);
  void *symbol = dlsym(handle, name);
  CHECK(symbol, "no %s in %s", name, path);
  return symbol;
}

/* Device memory as "another process" sees it: the emulated device's own accounting. */
static inline void e2e_emu_mem_info(size_t *free_bytes, size_t *total)
{
  cudaError_t (*mem_info)(size_t *, size_t *) =
      (cudaError_t(*)(size_t *, size_t *))e2e_emu_symbol("cudaMemGetInfo");
  CHECK(mem_info(free_bytes, total) == cudaSuccess);
}

/* Device buffers with known contents, checked after every resume. */
struct e2e_data {
  int count;
  unsigned char *device[8];
  size_t size[8];
};

static inline unsigned char e2e_pattern(int buffer, size_t i)
{
  return (unsigned char)(i * 131 + buffer * 7 + (i >> 12));
}

static inline void e2e_make_data(struct e2e_data *d)
{
  for (int b = 0; b < d->count; b++) {
    unsigned char *host = malloc(d->size[b]);
    CHECK(host);
    for (size_t i = 0; i < d->size[b]; i++) host[i] = e2e_pattern(b, i);
    CUDA_OK(cudaMalloc((void **)&d->device[b], d->size[b]));
    CUDA_OK(cudaMemcpy(d->device[b], host, d->size[b], cudaMemcpyHostToDevice));
    free(host);
  }
}

static inline void e2e_check_data(const struct e2e_data *d, const char *when)
{
  for (int b = 0; b < d->count; b++) {
    unsigned char *host = malloc(d->size[b]);
    CHECK(host);
    CUDA_OK(cudaMemcpy(host, d->device[b], d->size[b], cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < d->size[b]; i++)
      if (host[i] != e2e_pattern(b, i))
        test_fail("%s: buffer %d byte %zu is %#x, expected %#x", when, b, i, host[i],
                  e2e_pattern(b, i));
    free(host);
  }
}

/* xorshift64*: reproducible per-thread random numbers. */
static inline uint64_t e2e_random(uint64_t *state)
{
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545F4914F6CDD1Dull;
}

#endif
