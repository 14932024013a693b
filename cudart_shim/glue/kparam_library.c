/* The images of libraries and modules (cudaLibrary_t, CUlibrary, CUmodule) that both API layers
 * load: kparam parses them lazily, after the load call returned, when the caller may have freed
 * its image, so cudaw keeps its own copy (or a read-only mapping of the file) while they live. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kparam.h"
#include "shim_kparam.h"
#include "shim_profile.h"

/* One library cudaw keeps an image of. */
struct library {
  const void *handle;
  void *image;
  size_t size;
  bool mapped;
};

static pthread_mutex_t libraries_lock = PTHREAD_MUTEX_INITIALIZER;
static struct library *libraries;
static size_t library_count, library_capacity;

void shim_kparam_library_add(const void *handle, void *image, size_t size, bool mapped)
{
  int rc = kparam_register_library(handle, image, size);
  pthread_mutex_lock(&libraries_lock);
  if (rc == 0 && library_count == library_capacity) {
    size_t capacity = library_capacity ? 2 * library_capacity : 16;
    struct library *grown = realloc(libraries, capacity * sizeof *grown);
    if (grown) libraries = grown, library_capacity = capacity;
    else rc = -ENOMEM;
  }
  if (rc == 0) libraries[library_count++] = (struct library){handle, image, size, mapped};
  pthread_mutex_unlock(&libraries_lock);
  if (rc == 0) return;
  shim_warn("kparam: library %p not recorded (%s): its kernels stay opaque", (void *)handle,
            strerror(-rc));
  kparam_unregister_library(handle);
  if (mapped) munmap(image, size);
  else free(image);
}

void shim_kparam_library_remove(const void *handle)
{
  struct library found = {0};
  pthread_mutex_lock(&libraries_lock);
  for (size_t i = 0; i < library_count; i++)
    if (libraries[i].handle == handle) {
      found = libraries[i];
      libraries[i] = libraries[--library_count];
      break;
    }
  pthread_mutex_unlock(&libraries_lock);
  if (!found.image) return;
  kparam_unregister_library(handle);
  if (found.mapped) munmap(found.image, found.size);
  else free(found.image);
}

void shim_kparam_library_copy(const void *handle, const void *code)
{
  struct shim_span span;
  shim_span_begin(&span);
  const void *image = kparam_image_data(code);
  size_t size = kparam_image_extent(image);
  void *copy = size ? malloc(size) : NULL;
  if (copy) {
    memcpy(copy, image, size);
    shim_kparam_library_add(handle, copy, size, false);
  } else {
    shim_warn("kparam: library %p: image %p not recorded (%s): its kernels stay opaque", handle,
              code, size ? "out of memory" : "unknown format");
  }
  shim_span_end(&span, SHIM_PROFILE_MODULE, 1);
}

void shim_kparam_library_file(const void *handle, const char *path)
{
  struct shim_span span;
  shim_span_begin(&span);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  void *image = MAP_FAILED;
  if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0)
    image = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (fd >= 0) close(fd);
  if (image != MAP_FAILED) shim_kparam_library_add(handle, image, (size_t)st.st_size, true);
  else shim_warn("kparam: library file %s not readable: its kernels stay opaque", path);
  shim_span_end(&span, SHIM_PROFILE_MODULE, 1);
}
