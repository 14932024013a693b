/* cudaw-gen-exports: print a shared library's SONAME, its version node and every exported
 * function with its version, one per line, for the generator (gen/cudaw_gen.py).
 *
 *   soname libcudart.so.13
 *   node libcudart.so.13
 *   func cudaMalloc libcudart.so.13
 *
 * Build-time tool: links Debian's libelf.a as is (an executable may use its local-exec TLS). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fail(const char *path, const char *what)
{
  fprintf(stderr, "cudaw-gen-exports: %s: %s: %s\n", path, what, elf_errmsg(-1));
  return 1;
}

/* Version names indexed by version index, from SHT_GNU_verdef. */
struct verdefs {
  const char *name[256];
};

static void read_verdefs(Elf *elf, Elf_Scn *scn, GElf_Shdr *sh, struct verdefs *v)
{
  Elf_Data *data = elf_getdata(scn, NULL);
  size_t off = 0;
  for (unsigned i = 0; data && i < sh->sh_info; i++) {
    GElf_Verdef def;
    GElf_Verdaux aux;
    if (!gelf_getverdef(data, (int)off, &def)) break;
    if (gelf_getverdaux(data, (int)(off + def.vd_aux), &aux) && def.vd_ndx < 256)
      v->name[def.vd_ndx] = elf_strptr(elf, sh->sh_link, aux.vda_name);
    if (!def.vd_next) break;
    off += def.vd_next;
  }
}

int main(int argc, char **argv)
{
  if (argc == 4 && strcmp(argv[2], "-o") == 0) {
    if (!freopen(argv[3], "w", stdout)) {
      fprintf(stderr, "cudaw-gen-exports: %s: %s\n", argv[3], strerror(errno));
      return 1;
    }
  } else if (argc != 2) {
    fprintf(stderr, "usage: cudaw-gen-exports <shared library> [-o <output>]\n");
    return 2;
  }
  const char *path = argv[1];
  elf_version(EV_CURRENT);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "cudaw-gen-exports: %s: %s\n", path, strerror(errno));
    return 1;
  }
  Elf *elf = elf_begin(fd, ELF_C_READ, NULL);
  if (!elf || elf_kind(elf) != ELF_K_ELF) return fail(path, "not an ELF file");

  struct verdefs vd = {0};
  Elf_Scn *scn = NULL, *dynsym = NULL, *versym = NULL, *dynamic = NULL;
  GElf_Shdr dynsym_sh = {0};
  while ((scn = elf_nextscn(elf, scn))) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) return fail(path, "bad section header");
    if (sh.sh_type == SHT_DYNSYM) {
      dynsym = scn;
      dynsym_sh = sh;
    } else if (sh.sh_type == SHT_GNU_versym) {
      versym = scn;
    } else if (sh.sh_type == SHT_GNU_verdef) {
      read_verdefs(elf, scn, &sh, &vd);
    } else if (sh.sh_type == SHT_DYNAMIC) {
      dynamic = scn;
    }
  }
  if (!dynsym) return fail(path, "no .dynsym");

  if (dynamic) {
    GElf_Shdr sh;
    gelf_getshdr(dynamic, &sh);
    Elf_Data *data = elf_getdata(dynamic, NULL);
    for (size_t i = 0; data && i < sh.sh_size / sh.sh_entsize; i++) {
      GElf_Dyn dyn;
      if (gelf_getdyn(data, (int)i, &dyn) && dyn.d_tag == DT_SONAME)
        printf("soname %s\n", elf_strptr(elf, sh.sh_link, dyn.d_un.d_val));
    }
  }
  /* Version index 1 is the file's own name (the base definition); the node is index 2. */
  if (vd.name[2]) printf("node %s\n", vd.name[2]);

  Elf_Data *syms = elf_getdata(dynsym, NULL);
  Elf_Data *vers = versym ? elf_getdata(versym, NULL) : NULL;
  size_t count = dynsym_sh.sh_size / dynsym_sh.sh_entsize;
  for (size_t i = 0; syms && i < count; i++) {
    GElf_Sym sym;
    if (!gelf_getsym(syms, (int)i, &sym)) return fail(path, "bad symbol");
    if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF) continue;
    if (GELF_ST_BIND(sym.st_info) == STB_LOCAL) continue;
    const char *name = elf_strptr(elf, dynsym_sh.sh_link, sym.st_name);
    GElf_Versym ver = 0;
    if (vers) gelf_getversym(vers, (int)i, &ver);
    const char *vname = vd.name[ver & 0x7fff];
    printf("func %s %s\n", name, vname ? vname : "-");
  }
  elf_end(elf);
  close(fd);
  return 0;
}
