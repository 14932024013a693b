/* Test helper: map a file and find one of its ELF sections with libelf. */
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Returns the mapped file (or NULL if it cannot be opened); *section and *section_size point at the
 * named section inside it, or NULL/0 if there is none. */
static inline void *map_section(const char *path, const char *name, size_t *file_size,
                                const unsigned char **section, size_t *section_size) {
  *section = NULL;
  *section_size = 0;
  int fd = open(path, O_RDONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
    if (fd >= 0) close(fd);
    return NULL;
  }
  void *bytes = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (bytes == MAP_FAILED) return NULL;
  *file_size = (size_t)st.st_size;
  elf_version(EV_CURRENT);
  Elf *elf = elf_memory((char *)bytes, *file_size);
  size_t shstrndx;
  if (elf && elf_getshdrstrndx(elf, &shstrndx) == 0) {
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn)) != NULL;) {
      GElf_Shdr sh;
      const char *n;
      if (gelf_getshdr(scn, &sh) && (n = elf_strptr(elf, shstrndx, sh.sh_name)) &&
          strcmp(n, name) == 0 && sh.sh_offset + sh.sh_size <= *file_size) {
        *section = (const unsigned char *)bytes + sh.sh_offset;
        *section_size = sh.sh_size;
        break;
      }
    }
  }
  if (elf) elf_end(elf);
  return bytes;
}
