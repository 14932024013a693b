/* Detect a program whose CUDA runtime is linked statically (nvcc's default): none of its CUDA
 * calls can reach cudaw. Evidence, read from the executable through libelf: it does not NEED a
 * shared libcudart.so.* nor import __cudaRegisterFatBinary, and either its .nv_fatbin holds
 * kernels (nvcc leaves a kernel-less fatbin in every program it links, so a fatbin alone proves
 * nothing) or its symbol table defines the runtime's entry points itself. Any oddity in the file
 * means "cannot tell", never a crash and never a warning. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <string.h>
#include <unistd.h>

#include "kparam.h"
#include "shim.h"

enum verdict {
  RUNTIME_SHARED,          /* NEEDs libcudart.so.* or imports the registration: cudaw sees it */
  RUNTIME_UNKNOWN,         /* no CUDA evidence either way (or an unreadable file) */
  RUNTIME_STATIC,          /* defines the runtime itself, no kernels of its own */
  RUNTIME_STATIC_KERNELS,  /* defines the runtime itself and has kernels */
};

struct evidence {
  int needs_shared_cudart;
  int imports_register;
  int defines_runtime;
  Elf_Data *fatbin;
};

static void scan_dynamic(Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh, struct evidence *ev)
{
  Elf_Data *data = elf_getdata(scn, NULL);
  if (!data || sh->sh_entsize == 0) return;
  for (size_t i = 0; i < sh->sh_size / sh->sh_entsize; i++) {
    GElf_Dyn dyn;
    if (!gelf_getdyn(data, (int)i, &dyn)) break;
    if (dyn.d_tag == DT_NULL) break;
    if (dyn.d_tag != DT_NEEDED) continue;
    const char *name = elf_strptr(elf, sh->sh_link, dyn.d_un.d_val);
    if (name && strncmp(name, "libcudart.so", 12) == 0) ev->needs_shared_cudart = 1;
  }
}

/* Dynamic symbols: an undefined __cudaRegisterFatBinary is an import from a shared runtime.
 * Either table: a defined one (or cudaMalloc) is the static runtime's own copy. */
static void scan_symbols(Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh, struct evidence *ev)
{
  Elf_Data *data = elf_getdata(scn, NULL);
  if (!data || sh->sh_entsize == 0) return;
  for (size_t i = 0; i < sh->sh_size / sh->sh_entsize; i++) {
    GElf_Sym sym;
    if (!gelf_getsym(data, (int)i, &sym)) break;
    const char *name = elf_strptr(elf, sh->sh_link, sym.st_name);
    if (!name) continue;
    int registration = strcmp(name, "__cudaRegisterFatBinary") == 0;
    if (!registration && strcmp(name, "cudaMalloc") != 0) continue;
    if (sym.st_shndx == SHN_UNDEF) {
      if (registration && sh->sh_type == SHT_DYNSYM) ev->imports_register = 1;
    } else {
      ev->defines_runtime = 1;
    }
  }
}

/* Nonzero when the .nv_fatbin section holds at least one kernel. */
static int fatbin_has_kernels(Elf_Data *fatbin, const char *label)
{
  if (!fatbin || !fatbin->d_buf || fatbin->d_size == 0) return 0;
  struct kparam_image *image = NULL;
  if (kparam_image_parse(fatbin->d_buf, fatbin->d_size, label, 0, &image) != 0) return 0;
  size_t kernels = kparam_image_kernel_count(image);
  kparam_image_free(image);
  return kernels > 0;
}

static enum verdict classify(int fd, const char *label)
{
  if (elf_version(EV_CURRENT) == EV_NONE) return RUNTIME_UNKNOWN;
  Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
  if (!elf) return RUNTIME_UNKNOWN;
  struct evidence ev = {0};
  size_t names;
  if (elf_kind(elf) == ELF_K_ELF && elf_getshdrstrndx(elf, &names) == 0) {
    for (Elf_Scn *scn = elf_nextscn(elf, NULL); scn; scn = elf_nextscn(elf, scn)) {
      GElf_Shdr sh;
      if (!gelf_getshdr(scn, &sh)) continue;
      const char *name = elf_strptr(elf, names, sh.sh_name);
      if (sh.sh_type == SHT_DYNAMIC) scan_dynamic(elf, scn, &sh, &ev);
      else if (sh.sh_type == SHT_DYNSYM || sh.sh_type == SHT_SYMTAB)
        scan_symbols(elf, scn, &sh, &ev);
      else if (name && strcmp(name, ".nv_fatbin") == 0 && sh.sh_type != SHT_NOBITS)
        ev.fatbin = elf_getdata(scn, NULL);
    }
  }
  enum verdict verdict = RUNTIME_UNKNOWN;
  if (ev.needs_shared_cudart || ev.imports_register) verdict = RUNTIME_SHARED;
  else if (fatbin_has_kernels(ev.fatbin, label)) verdict = RUNTIME_STATIC_KERNELS;
  else if (ev.defines_runtime) verdict = RUNTIME_STATIC;
  elf_end(elf);
  return verdict;
}

int shim_check_static_runtime(const char *exe_path)
{
  char exe[512];
  ssize_t n = readlink(exe_path, exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = 0;
  const char *label = n > 0 ? exe : exe_path;
  int fd = open(exe_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  enum verdict verdict = classify(fd, label);
  close(fd);
  if (verdict != RUNTIME_STATIC && verdict != RUNTIME_STATIC_KERNELS) return 0;
  /* A static runtime opens the driver through dlopen: with cudaw's dlopen in force it reaches
   * the driver layer, which holds, virtualises and checkpoints it like a shared runtime. */
  if (shim_drv_routing()) {
    shim_info("%s: the CUDA runtime is linked statically into it (nvcc's default); cudaw sees it "
              "through its driver layer", label);
    return 0;
  }
  shim_warn("%s: the CUDA runtime is linked statically into it (nvcc's default)%s, and cudaw's "
            "driver layer does not see it (CUDAW_DRIVER=0, or cudaw not preloaded): nothing is "
            "virtualized or checkpointed. Run it with `cudaw run`, or rebuild it with "
            "`nvcc -cudart shared` (CMake: CUDA_RUNTIME_LIBRARY Shared).",
            label, verdict == RUNTIME_STATIC_KERNELS ? " with its CUDA kernels" : "");
  return 1;
}
