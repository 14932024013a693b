// Shared by the corpus programs: each checks its own answer against a host computation and
// exits 0 (right answer), 1 (wrong answer), 2 (a CUDA call failed: the error is printed), or
// 3 (a refusal the program expects from cudaw, e.g. IPC: printed as such).
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#include <cuda_runtime.h>

#define CK(call)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::printf("ERROR %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, __LINE__, #call); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

// Library status codes: 0 is success for cuBLAS, cuFFT, cuRAND and cuSPARSE alike. With
// corpus_lax set, a failed library call is only counted (like programs that never check).
inline bool corpus_lax = false;
inline int corpus_ignored = 0;
#define CKL(call)                                                                      \
  do {                                                                                 \
    int s_ = (int)(call);                                                              \
    if (s_ != 0 && corpus_lax) corpus_ignored++;                                       \
    else if (s_ != 0) {                                                                \
      std::printf("ERROR library status %d at %s:%d: %s\n", s_, __FILE__, __LINE__, #call); \
      std::exit(2);                                                                    \
    }                                                                                  \
  } while (0)

// A pause in the middle (run_corpus.sh under cudaw sets CORPUS_PAUSE_FILE): at the first
// corpus_sync the program says PAUSE_POINT and waits until that file exists, while the runner
// checkpoints and resumes it from outside (cudaw-ctl); the rest of its work, and its check, then
// run on memory and library state that went through a checkpoint.
inline void corpus_pause_point()
{
  static bool paused = false;
  const char *go = std::getenv("CORPUS_PAUSE_FILE");
  if (!go || paused) return;
  paused = true;
  std::printf("PAUSE_POINT\n");
  std::fflush(stdout);
  for (int i = 0; i < 1200 && access(go, F_OK) != 0; i++) usleep(50000);
}

// After the work: a sticky device error must not pass unnoticed.
inline void corpus_sync()
{
  CK(cudaDeviceSynchronize());
  CK(cudaGetLastError());
  corpus_pause_point();
}

inline int corpus_close(double a, double b, double tol)
{
  return std::fabs(a - b) <= tol * (1.0 + std::fabs(b));
}

#define WRONG(...)                         \
  do {                                     \
    std::printf("WRONG ");                 \
    std::printf(__VA_ARGS__);              \
    std::printf("\n");                     \
    std::exit(1);                          \
  } while (0)

inline int corpus_pass(const char *name, const char *detail = "")
{
  std::printf("PASS %s %s\n", name, detail);
  return 0;
}
