/* Detect a program whose CUDA runtime is linked statically (nvcc's default): its kernels are in
 * its own .nv_fatbin section, but it does not import __cudaRegisterFatBinary from a shared
 * runtime, so none of its CUDA calls can reach cudaw. Reads the ELF file's section headers and
 * dynamic symbols with bounds checks; any oddity means "cannot tell", never a crash. */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shim.h"

struct image {
  const unsigned char *data;
  size_t size;
};

static const void *at(const struct image *im, uint64_t off, uint64_t len)
{
  if (off > im->size || len > im->size - off) return NULL;
  return im->data + off;
}

static const Elf64_Shdr *section(const struct image *im, const Elf64_Ehdr *eh, unsigned i)
{
  if (i >= eh->e_shnum || eh->e_shentsize != sizeof(Elf64_Shdr)) return NULL;
  return at(im, eh->e_shoff + (uint64_t)i * sizeof(Elf64_Shdr), sizeof(Elf64_Shdr));
}

static const char *string_at(const struct image *im, const Elf64_Shdr *strtab, uint32_t off)
{
  if (!strtab || off >= strtab->sh_size) return NULL;
  const char *s = at(im, strtab->sh_offset + off, strtab->sh_size - off);
  return s && memchr(s, 0, strtab->sh_size - off) ? s : NULL;
}

/* 1: static runtime with kernels; 0: not; -1: cannot tell. */
static int classify(const struct image *im)
{
  const Elf64_Ehdr *eh = at(im, 0, sizeof *eh);
  if (!eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64)
    return -1;
  const Elf64_Shdr *names = section(im, eh, eh->e_shstrndx);
  int has_fatbin = 0, imports_register = 0;
  for (unsigned i = 0; i < eh->e_shnum; i++) {
    const Elf64_Shdr *sh = section(im, eh, i);
    if (!sh) return -1;
    const char *name = string_at(im, names, sh->sh_name);
    if (name && strcmp(name, ".nv_fatbin") == 0 && sh->sh_size > 0) has_fatbin = 1;
    if (sh->sh_type != SHT_DYNSYM || sh->sh_entsize != sizeof(Elf64_Sym)) continue;
    const Elf64_Shdr *strtab = section(im, eh, sh->sh_link);
    for (uint64_t k = 0; k < sh->sh_size / sizeof(Elf64_Sym); k++) {
      const Elf64_Sym *sym = at(im, sh->sh_offset + k * sizeof(Elf64_Sym), sizeof(Elf64_Sym));
      if (!sym) return -1;
      if (sym->st_shndx != SHN_UNDEF) continue;
      const char *s = string_at(im, strtab, sym->st_name);
      if (s && strcmp(s, "__cudaRegisterFatBinary") == 0) imports_register = 1;
    }
  }
  return has_fatbin && !imports_register;
}

int shim_check_static_runtime(const char *exe_path)
{
  int fd = open(exe_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st;
  int verdict = -1;
  if (fstat(fd, &st) == 0 && st.st_size > 0) {
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map != MAP_FAILED) {
      struct image im = {map, (size_t)st.st_size};
      verdict = classify(&im);
      munmap(map, (size_t)st.st_size);
    }
  }
  close(fd);
  if (verdict != 1) return 0;
  char exe[512];
  ssize_t n = readlink(exe_path, exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = 0;
  shim_warn("%s has CUDA kernels but its CUDA runtime is linked statically (nvcc's default), so "
            "cudaw cannot see its CUDA calls: nothing is virtualized or checkpointed. Rebuild it "
            "with `nvcc -cudart shared` (CMake: CUDA_RUNTIME_LIBRARY Shared).",
            n > 0 ? exe : exe_path);
  return 1;
}
