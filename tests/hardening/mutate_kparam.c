/* Description: cudaw-kparam on thousands of mutated ELF files (issue 10 hardening). Each case
 * mutates one seed (an executable with a raw, LZ4 or zstd fatbin) in one to eight places: bytes
 * inside its .nv_fatbin section (headers, sizes, offsets, payload), ELF and section header
 * fields, or a truncation, and runs the tool on it with a 20 s limit. Built with sanitizers, a
 * report ends the tool with exit code 99 (ASAN_OPTIONS/UBSAN_OPTIONS set here). A crash, a
 * sanitizer report or a hang fails the test, and the input is kept for the repro.
 * Usage: mutate_kparam <cudaw-kparam> <cases> <keep dir> <seed ELF>... */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

struct seed {
  unsigned char *data;
  size_t size;
  size_t fatbin_offset, fatbin_size; /* the .nv_fatbin section (0, 0 if none) */
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_random(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static size_t below(size_t n) { return n ? (size_t)(next_random() % n) : 0; }

static void load_seed(const char *path, struct seed *s)
{
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL, "open %s: %s", path, strerror(errno));
  fseek(f, 0, SEEK_END);
  s->size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  s->data = malloc(s->size);
  CHECK(s->data && fread(s->data, 1, s->size, f) == s->size, "read %s", path);
  fclose(f);
  s->fatbin_offset = s->fatbin_size = 0;
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)s->data;
  CHECK(s->size > sizeof *eh && memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0, "%s: not ELF", path);
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(s->data + eh->e_shoff);
  const char *names = (const char *)s->data + sh[eh->e_shstrndx].sh_offset;
  for (unsigned i = 0; i < eh->e_shnum; i++)
    if (strcmp(names + sh[i].sh_name, ".nv_fatbin") == 0) {
      s->fatbin_offset = sh[i].sh_offset;
      s->fatbin_size = sh[i].sh_size;
    }
  CHECK(s->fatbin_size > 0, "%s has no .nv_fatbin", path);
}

static const uint64_t interesting[] = {0, 1, 0x7f, 0x80, 0xff, 0xffff, 0x7fffffff, 0x80000000,
                                       0xffffffff, 0x100000000ull, 0x7fffffffffffffffull,
                                       0xffffffffffffffffull, 16, 64, 80};

static void put(unsigned char *data, size_t size, size_t at, uint64_t value, unsigned bytes)
{
  if (at + bytes <= size) memcpy(data + at, &value, bytes);
}

/* Apply one mutation; may shorten *size (truncation). */
static void mutate(unsigned char *data, size_t *size, const struct seed *s)
{
  size_t at;
  switch (below(8)) {
  case 0: case 1: case 2: /* inside the fatbin, most often near its headers */
    at = s->fatbin_offset + (below(2) ? below(256) : below(s->fatbin_size));
    if (below(2)) put(data, *size, at & ~(size_t)3, interesting[below(15)], below(2) ? 4 : 8);
    else if (at < *size) data[at] ^= (unsigned char)(1u << below(8));
    break;
  case 3: { /* an ELF header field */
    static const size_t fields[] = {offsetof(Elf64_Ehdr, e_shoff), offsetof(Elf64_Ehdr, e_shnum),
                                    offsetof(Elf64_Ehdr, e_shstrndx),
                                    offsetof(Elf64_Ehdr, e_shentsize),
                                    offsetof(Elf64_Ehdr, e_phoff), offsetof(Elf64_Ehdr, e_phnum)};
    size_t field = fields[below(6)];
    unsigned width = field == offsetof(Elf64_Ehdr, e_shoff) || field == offsetof(Elf64_Ehdr, e_phoff) ? 8 : 2;
    put(data, *size, field, interesting[below(15)] + below(3), width);
    break;
  }
  case 4: case 5: { /* a section header field */
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)s->data;
    size_t header = eh->e_shoff + below(eh->e_shnum) * sizeof(Elf64_Shdr);
    static const size_t fields[] = {offsetof(Elf64_Shdr, sh_offset), offsetof(Elf64_Shdr, sh_size),
                                    offsetof(Elf64_Shdr, sh_link), offsetof(Elf64_Shdr, sh_entsize),
                                    offsetof(Elf64_Shdr, sh_type), offsetof(Elf64_Shdr, sh_name)};
    size_t field = fields[below(6)];
    unsigned width = field == offsetof(Elf64_Shdr, sh_link) || field == offsetof(Elf64_Shdr, sh_type) ||
                             field == offsetof(Elf64_Shdr, sh_name) ? 4 : 8;
    put(data, *size, header + field, interesting[below(15)] + below(5), width);
    break;
  }
  case 6: /* random bytes anywhere */
    at = below(*size);
    data[at] = (unsigned char)next_random();
    break;
  default: /* truncation, often inside the fatbin */
    *size = below(2) ? s->fatbin_offset + below(s->fatbin_size) : below(*size);
    break;
  }
}

/* Run the tool on path: 0 normal exit, 1 crash or sanitizer report, 2 hang. */
static int run_tool(const char *tool, const char *path, int *status_out)
{
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execl(tool, tool, path, "--json", (char *)NULL);
    _exit(127);
  }
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    int status;
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      *status_out = status;
      if (WIFSIGNALED(status)) return 1;
      return WEXITSTATUS(status) == 99 || WEXITSTATUS(status) == 127 ? 1 : 0;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec > 20) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      *status_out = status;
      return 2;
    }
    struct timespec pause_ts = {0, 2000000};
    nanosleep(&pause_ts, NULL);
  }
}

int main(int argc, char **argv)
{
  if (argc < 5) test_fail("usage: %s <cudaw-kparam> <cases> <keep dir> <seed ELF>...", argv[0]);
  const char *tool = argv[1], *keep = argv[3];
  long cases = atol(argv[2]);
  int seed_count = argc - 4;
  struct seed *seeds = calloc((size_t)seed_count, sizeof *seeds);
  CHECK(seeds != NULL);
  for (int i = 0; i < seed_count; i++) load_seed(argv[4 + i], &seeds[i]);
  setenv("ASAN_OPTIONS", "exitcode=99:detect_leaks=1", 1);
  setenv("UBSAN_OPTIONS", "halt_on_error=1:exitcode=99:print_stacktrace=1", 1);
  mkdir(keep, 0700);
  char path[512];
  snprintf(path, sizeof path, "%s/case.elf", keep);
  long crashes = 0, hangs = 0, exits[3] = {0, 0, 0};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long c = 0; c < cases; c++) {
    const struct seed *s = &seeds[c % seed_count];
    unsigned char *data = malloc(s->size);
    CHECK(data != NULL);
    memcpy(data, s->data, s->size);
    size_t size = s->size;
    for (size_t m = 1 + below(8); m > 0; m--) mutate(data, &size, s);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, size, f) == size, "write %s", path);
    fclose(f);
    int status = 0, verdict = run_tool(tool, path, &status);
    if (verdict) {
      char kept[512];
      snprintf(kept, sizeof kept, "%s/%s-%ld.elf", keep, verdict == 2 ? "hang" : "crash", c);
      rename(path, kept);
      fprintf(stderr, "case %ld: %s (status %#x), input kept as %s\n", c,
              verdict == 2 ? "hang" : "crash", status, kept);
      if (verdict == 2) hangs++;
      else crashes++;
    } else if (WEXITSTATUS(status) < 3) {
      exits[WEXITSTATUS(status)]++;
    }
    free(data);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  unlink(path);
  printf("mutated ELF files: %ld cases from %d seeds in %.1f s: exit 0 (parsed) %ld, exit 1 "
         "(refused with an error) %ld, exit 2 %ld; crashes %ld, hangs %ld\n", cases, seed_count,
         (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9, exits[0],
         exits[1], exits[2], crashes, hangs);
  return crashes || hangs ? 1 : 0;
}
