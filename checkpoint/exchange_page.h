/* The page two programs share during an exchange (docs/sharing.md): cudawd creates it (a memfd
 * of one page) and hands it to both with their orders; each program then paces its copy by the
 * other's counter alone, so that cudawd's death changes nothing for them. Counters only grow. */
#ifndef CUDAW_EXCHANGE_PAGE_H
#define CUDAW_EXCHANGE_PAGE_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#define EXCHANGE_PAGE_MAGIC 0x50587763u /* "cwXP" */
#define EXCHANGE_PAGE_VERSION 1u

struct exchange_page {
  uint32_t magic, version;
  int32_t out_pid, in_pid;   /* the program going out (A) and the one coming in (B) */
  uint64_t window;           /* A's image may run this far ahead of what B consumed */
  uint64_t spare;            /* B's device memory may run this far ahead of what A released */
  _Atomic uint64_t released; /* A: device bytes given back so far */
  _Atomic uint64_t consumed; /* B: image bytes consumed (host memory freed) so far */
  _Atomic uint32_t out_done, in_done; /* 1: that side's copy ended (either way) */
  _Atomic uint64_t written;  /* A: image bytes admitted so far */
  _Atomic uint64_t created;  /* B: device bytes created so far */
  _Atomic uint64_t peak_ahead; /* the most A's image ran ahead of B's consumption: the extra host
                                * memory the exchange took at its peak (chunks in flight aside) */
  /* A handover (docs/sharing.md): B's image lies in [in_from, in_end) of cudawd's pool, and A's
   * image goes into the range cudawd lent A over it. A writes a chunk there only where B needs
   * nothing any more: below needed_from, or past in_end. Appended within version 1: cudawd
   * orders a handover only to programs that said they pace by it (SCHED_CAN_EXCHANGE value 1),
   * and a page without one reads 0 here. */
  uint32_t handover;
  uint32_t pad;
  uint64_t in_from, in_end;
  _Atomic uint64_t needed_from; /* B: the lowest pool offset its image still needs (UINT64_MAX:
                                 * none); only grows */
  /* 1: that side's copy ended in failure (set before its *_done): what it did not move stays
   * where it is (A's device memory not released, B's image not consumed), so the other side
   * stops instead of going on without a limit. Appended within version 1: 0 from older pages. */
  _Atomic uint32_t out_failed, in_failed;
};

/* A new page for an exchange between out_pid and in_pid: *fd is a memfd (close-on-exec) of one
 * page, initialised. 0 or -errno. */
int exchange_page_create(pid_t out_pid, pid_t in_pid, uint64_t window, uint64_t spare, int *fd);
/* Map the page behind fd (which the caller may close afterwards): -EINVAL when it is no exchange
 * page of this version, -errno else. */
int exchange_page_map(int fd, struct exchange_page **page);
void exchange_page_unmap(struct exchange_page *page);

#endif
