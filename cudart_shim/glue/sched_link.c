/* The connection to cudawd and the pool it sends, as both of its clients in the library use
 * them (shim_sched_link.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ckpt.h"
#include "shim_sched_link.h"

int shim_sched_connect(const char *path, int nonblocking, uid_t *peer_uid)
{
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return -errno;
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
  struct ucred peer;
  socklen_t len = sizeof peer;
  int rc = 0;
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) rc = -errno;
  else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0) rc = -errno;
  if (rc) {
    close(fd);
    return rc;
  }
  *peer_uid = peer.uid;
  return fd;
}

ssize_t shim_sched_receive(int fd, struct sched_msg *msg, int *passed_fd)
{
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } control;
  struct iovec iov = {msg, sizeof *msg};
  struct msghdr hdr = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                       .msg_controllen = sizeof control.buf};
  *passed_fd = -1;
  ssize_t n = recvmsg(fd, &hdr, MSG_CMSG_CLOEXEC);
  for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&hdr) : NULL; c; c = CMSG_NXTHDR(&hdr, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int))) {
      if (*passed_fd >= 0) close(*passed_fd);
      memcpy(passed_fd, CMSG_DATA(c), sizeof(int));
    }
  return n;
}

/* The pool attached last (the caller's thread only): a window of the same pool that grew is
 * page-locked from where the last one ended, not from its start again. */
static struct attached_pool {
  dev_t dev;
  ino_t ino;
  void *base;
  uint64_t size;
} attached;

int shim_sched_attach_pool(int fd, uint64_t size, const char **why)
{
  struct stat st;
  if (fstat(fd, &st) != 0 || !size || (uint64_t)st.st_size < size) {
    *why = "not the size it says";
    return -EINVAL;
  }
  /* The whole pool is mapped (cudawd sized its memfd to the most it may hold), so that a larger
   * window needs no new mapping. Nothing past the window is touched: no memory is taken for it.
   * A window that grew took 4 s more to page-lock again from its start (94 GiB on the H100),
   * while a handover into it failed at once (issue 30). */
  if (attached.base && attached.dev == st.st_dev && attached.ino == st.st_ino &&
      size > attached.size && ckpt_pool_grow(attached.base, size) == 0) {
    attached.size = size;
    return 0;
  }
  void *base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    int rc = -errno;
    *why = strerror(-rc);
    return rc;
  }
  /* As cudawd's own mapping (sched/pool.c): 2 MiB pages where the kernel gives shared memory
   * huge pages on request (shmem_enabled advise), whoever faults a page in first. A hugetlb
   * file refuses the advice, and needs none. */
  madvise(base, (size_t)st.st_size, MADV_HUGEPAGE);
  int rc = ckpt_pool_attach(base, size, (uint64_t)st.st_size);
  if (rc) munmap(base, (size_t)st.st_size);
  else attached = (struct attached_pool){st.st_dev, st.st_ino, base, size};
  *why = rc == -ENOSYS ? "this runtime cannot page-lock host memory" : strerror(-rc);
  return rc;
}

int shim_sched_detach_pool(void)
{
  int rc = ckpt_pool_attach(NULL, 0, 0);
  if (rc == 0) attached.base = NULL;
  return rc;
}

int shim_sched_start_thread_arg(void *(*run)(void *), void *arg)
{
  pthread_t thread;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&thread, &attr, run, arg);
  pthread_attr_destroy(&attr);
  return rc;
}

int shim_sched_start_thread(void *(*run)(void *)) { return shim_sched_start_thread_arg(run, NULL); }
