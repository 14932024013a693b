/* The host image's memory: where a checkpoint's bytes land, and how they get there cheaply.
 *
 * A first checkpoint writes into memory the process never touched, and the kernel must fault and
 * zero every page before the copy from staging overwrites it: on the H100 machine that zeroing is
 * a whole extra pass of memory traffic beside the DMA's write, the staging read and the image's
 * write (bench_host_image). Two things here make that cheaper:
 * - one mapping for all fresh regions, each at a huge-page boundary, so that thousands of small
 *   regions fault huge pages like one large one (and take one mmap, not thousands);
 * - a userfaultfd over that mapping, whose UFFDIO_COPY has the kernel allocate each page and fill
 *   it from the staging buffer directly, never zeroing it. Nothing ever faults in the registered
 *   range (only our copy threads write it, and only through the ioctl); it is unregistered before
 *   anything else may touch the image, so a page never filled faults in as zeroes as usual.
 *   Where userfaultfd is refused (seccomp, vm.unprivileged_userfaultfd, an old kernel) the
 *   copies go through memcpy as before. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

uint64_t image_span(uint64_t size) {
  return (size + IMAGE_ALIGN - 1) & ~(uint64_t)(IMAGE_ALIGN - 1);
}

uint8_t *image_arena_map(uint64_t bytes) {
  if (bytes == 0 || bytes > SIZE_MAX - IMAGE_ALIGN) return NULL;
  size_t length = (size_t)bytes + IMAGE_ALIGN;
  uint8_t *p = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  uintptr_t start = ((uintptr_t)p + IMAGE_ALIGN - 1) & ~(uintptr_t)(IMAGE_ALIGN - 1);
  size_t head = start - (uintptr_t)p, tail = length - head - (size_t)bytes;
  if (head) munmap(p, head);
  if (tail) munmap((uint8_t *)start + bytes, tail);
  madvise((void *)start, (size_t)bytes, MADV_HUGEPAGE); /* fewer faults where memcpy fills it */
  return (uint8_t *)start;
}

int image_filler_open(struct image_filler *f) {
  if (f->fd > 0) return 0;
  if (f->refused) return -ENOSYS;
  /* User-mode-only faults are allowed without privilege; we take no faults at all anyway. */
  long fd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
  if (fd < 0) fd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
  int rc = fd < 0 ? -errno : 0;
  struct uffdio_api api = {.api = UFFD_API};
  if (rc == 0 && ioctl((int)fd, UFFDIO_API, &api) != 0) {
    rc = -errno;
    close((int)fd);
  }
  if (rc) {
    f->refused = true;
    ckpt_logf(CKPT_LOG_DEBUG, "userfaultfd refused (%s): fresh image pages are zeroed by the "
              "kernel, then copied into", strerror(-rc));
    return rc;
  }
  f->fd = (int)fd;
  return 0;
}

void image_filler_close(struct image_filler *f) {
  if (f->fd > 0) close(f->fd);
  f->fd = 0;
}

int image_filler_register(struct image_filler *f, uint8_t *data, uint64_t bytes) {
  if (f->fd <= 0) return -EBADF;
  struct uffdio_register reg = {.range = {(uintptr_t)data, bytes},
                                .mode = UFFDIO_REGISTER_MODE_MISSING};
  if (ioctl(f->fd, UFFDIO_REGISTER, &reg) != 0) {
    int rc = -errno;
    ckpt_logf(CKPT_LOG_DEBUG, "userfaultfd: registering the image failed (%s): copying into it",
              strerror(-rc));
    return rc;
  }
  return 0;
}

int image_filler_unregister(struct image_filler *f, uint8_t *data, uint64_t bytes) {
  struct uffdio_range range = {(uintptr_t)data, bytes};
  return ioctl(f->fd, UFFDIO_UNREGISTER, &range) == 0 ? 0 : -errno;
}

int image_filler_copy(struct image_filler *f, uint8_t *dst, const uint8_t *src, size_t n) {
  /* Whole pages only: the range is page-aligned (regions start at huge-page boundaries, chunks
   * are page multiples) except a region's last bytes, which carry a part of a page. */
  size_t page = 4096, whole = n & ~(page - 1);
  size_t done = 0;
  while (done < whole) {
    struct uffdio_copy copy = {.dst = (uintptr_t)(dst + done), .src = (uintptr_t)(src + done),
                               .len = whole - done, .mode = UFFDIO_COPY_MODE_DONTWAKE};
    if (ioctl(f->fd, UFFDIO_COPY, &copy) == 0) {
      done = whole;
    } else if (copy.copy > 0) {
      done += (size_t)copy.copy;
    } else if (copy.copy != -EAGAIN && errno != EAGAIN) {
      return copy.copy < 0 ? (int)copy.copy : -errno;
    }
  }
  if (done < n) { /* the part page: fill a page-sized copy of it */
    uint8_t last[4096];
    memcpy(last, src + done, n - done);
    memset(last + (n - done), 0, page - (n - done));
    for (;;) {
      struct uffdio_copy copy = {.dst = (uintptr_t)(dst + done), .src = (uintptr_t)last,
                                 .len = page, .mode = UFFDIO_COPY_MODE_DONTWAKE};
      if (ioctl(f->fd, UFFDIO_COPY, &copy) == 0) break;
      if (copy.copy != -EAGAIN && errno != EAGAIN) return copy.copy < 0 ? (int)copy.copy : -errno;
    }
  }
  return 0;
}
