/* cudaw-kparam: list the kernels of an executable, shared library, cubin or fatbin file with
 * their parameter layouts, as cudaw's kparam module sees them. Exit 1 for unreadable input. */
#include "kparam.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define EM_CUDA_MACHINE 190

static void usage(FILE *out) {
  fprintf(out, "usage: cudaw-kparam <ELF, cubin or fatbin file> [--json] [--kernel NAME] "
               "[--arch SM]\n"
               "       cudaw-kparam --help | --version\n");
}

/* One line naming what is wrong, and where to look: exit status 2. */
static int usage_error(const char *what, const char *arg) {
  fprintf(stderr, "cudaw-kparam: %s%s%s\nTry 'cudaw-kparam --help'.\n", what, arg ? " " : "",
          arg ? arg : "");
  return 2;
}

/* The .nv_fatbin section of an ELF file, or the whole file if it is a cubin or not ELF. */
static int find_fatbin(const char *path, const unsigned char *bytes, size_t size,
                       const void **data, size_t *data_size) {
  if (size < 4 || memcmp(bytes, ELFMAG, SELFMAG) != 0) {
    *data = bytes;
    *data_size = size;
    return 0;
  }
  elf_version(EV_CURRENT);
  Elf *elf = elf_memory((char *)bytes, size);
  GElf_Ehdr eh;
  size_t shstrndx;
  if (!elf || !gelf_getehdr(elf, &eh) || elf_getshdrstrndx(elf, &shstrndx) != 0) {
    fprintf(stderr, "cudaw-kparam: %s: corrupt ELF file\n", path);
    if (elf) elf_end(elf);
    return -EBADMSG;
  }
  if (eh.e_machine == EM_CUDA_MACHINE) {
    elf_end(elf);
    *data = bytes;
    *data_size = size;
    return 0;
  }
  int rc = -ENOENT;
  for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn)) != NULL;) {
    GElf_Shdr sh;
    const char *name;
    if (!gelf_getshdr(scn, &sh) || !(name = elf_strptr(elf, shstrndx, sh.sh_name))) continue;
    if (strcmp(name, ".nv_fatbin") != 0) continue;
    if (sh.sh_type == SHT_NOBITS || sh.sh_offset > size || sh.sh_size > size - sh.sh_offset) {
      fprintf(stderr, "cudaw-kparam: %s: .nv_fatbin section out of the file's bounds\n", path);
      rc = -EBADMSG;
      break;
    }
    *data = bytes + sh.sh_offset;
    *data_size = sh.sh_size;
    rc = 0;
    break;
  }
  elf_end(elf);
  if (rc == -ENOENT) fprintf(stderr, "cudaw-kparam: %s: no .nv_fatbin section\n", path);
  return rc;
}

static void json_string(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c < 0x20) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
}

static void print_plan(const struct kparam_plan *plan, bool json, bool first) {
  if (json) {
    printf("%s\n    {\"name\": ", first ? "" : ",");
    json_string(plan->name);
    printf(", \"source\": \"%s\", \"sm\": %d, \"param_bytes\": %u, \"params\": [",
           kparam_source_name(plan->source), plan->sm_arch, plan->param_bytes);
    for (uint32_t i = 0; i < plan->param_count; i++) {
      const struct kparam_param *p = &plan->params[i];
      printf("%s{\"ordinal\": %u, \"offset\": %u, \"size\": %u, \"kind\": \"%s\"}",
             i ? ", " : "", p->ordinal, p->offset, p->size, kparam_kind_name(p->kind));
    }
    printf("], \"words\": %u}", plan->word_count);
    return;
  }
  printf("%s\n  source %s", plan->name, kparam_source_name(plan->source));
  if (plan->sm_arch) printf(" (sm_%d)", plan->sm_arch);
  printf(", %u params, %u bytes, %u words to translate\n", plan->param_count, plan->param_bytes,
         plan->word_count);
  for (uint32_t i = 0; i < plan->param_count; i++) {
    const struct kparam_param *p = &plan->params[i];
    printf("  #%-3u offset %5u size %5u %s\n", p->ordinal, p->offset, p->size,
           kparam_kind_name(p->kind));
  }
}

int main(int argc, char **argv) {
  const char *path = NULL, *only = NULL;
  bool json = false;
  int arch = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool valued = strcmp(a, "--kernel") == 0 || strcmp(a, "--arch") == 0;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return usage(stdout), 0;
    if (strcmp(a, "--version") == 0) return printf("cudaw-kparam %s\n", CUDAW_VERSION), 0;
    if (valued && i + 1 >= argc) return usage_error(a, "needs a value");
    if (strcmp(a, "--json") == 0) json = true;
    else if (strcmp(a, "--kernel") == 0) only = argv[++i];
    else if (strcmp(a, "--arch") == 0) {
      char *end;
      long sm = strtol(argv[++i], &end, 10);
      if (*end || end == argv[i] || sm <= 0 || sm > 10000)
        return usage_error("--arch: expected an SM number such as 90, not", argv[i]);
      arch = (int)sm;
    } else if (a[0] == '-') return usage_error("unknown option", a);
    else if (path) return usage_error("one file at a time; unexpected", a);
    else path = a;
  }
  if (!path) return usage_error("no file given", NULL);
  int fd = open(path, O_RDONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    fprintf(stderr, "cudaw-kparam: %s: %s\n", path, strerror(errno));
    return 1;
  }
  size_t size = (size_t)st.st_size;
  void *bytes = size ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  close(fd);
  if (bytes == MAP_FAILED) {
    fprintf(stderr, "cudaw-kparam: %s: empty or unreadable file\n", path);
    return 1;
  }
  const void *data;
  size_t data_size;
  if (find_fatbin(path, bytes, size, &data, &data_size) != 0) return 1;
  struct kparam_image *image = NULL;
  int rc = kparam_image_parse(data, data_size, path, arch, &image);
  if (rc != 0) {
    fprintf(stderr, "cudaw-kparam: %s: %s\n", path,
            rc == -EBADMSG ? "not a valid fatbin, cubin or PTX image (see the warning above)"
                           : strerror(-rc));
    kparam_image_free(image);
    return 1;
  }
  size_t entries, cubins, ptx, count = kparam_image_kernel_count(image), shown = 0;
  kparam_image_stats(image, &entries, &cubins, &ptx);
  if (json) {
    printf("{\"file\": ");
    json_string(path);
    printf(", \"entries\": %zu, \"cubins\": %zu, \"ptx\": %zu, \"kernels\": [", entries, cubins,
           ptx);
  } else {
    printf("%s: %zu entries (%zu cubins, %zu PTX), %zu kernels\n", path, entries, cubins, ptx,
           count);
  }
  for (size_t i = 0; i < count; i++) {
    const struct kparam_plan *plan = kparam_image_kernel(image, i);
    if (only && strcmp(plan->name, only) != 0) continue;
    print_plan(plan, json, shown++ == 0);
  }
  if (json) printf("\n  ]}\n");
  kparam_image_free(image);
  munmap(bytes, size);
  if (only && shown == 0) {
    fprintf(stderr, "cudaw-kparam: %s: no kernel named %s\n", path, only);
    return 1;
  }
  return 0;
}
