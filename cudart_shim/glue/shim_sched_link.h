/* What the library's two clients of cudawd share (glue/sched.c: sharing a GPU; glue/borrow.c:
 * borrowing cudawd's host-memory pool without sharing): the connection, one message with the
 * descriptor that may come with it, and mapping the pool cudawd sends. */
#ifndef CUDAW_SHIM_SCHED_LINK_H
#define CUDAW_SHIM_SCHED_LINK_H

#include <stdint.h>
#include <sys/types.h>

#include "sched_proto.h"

/* Connect to cudawd's socket at path (SOCK_SEQPACKET, close-on-exec; `nonblocking`: the socket
 * and the connect do not wait, so a full backlog is -EAGAIN, not a stall). The descriptor, with
 * the peer's uid (SO_PEERCRED) in *peer_uid, or -errno. The caller decides whose cudawd it may
 * use. */
int shim_sched_connect(const char *path, int nonblocking, uid_t *peer_uid);

/* One message from fd into *msg, and the descriptor that came with it (SCM_RIGHTS, close-on-exec)
 * in *passed_fd (-1: none): recvmsg's result. */
ssize_t shim_sched_receive(int fd, struct sched_msg *msg, int *passed_fd);

/* Hand the first `size` bytes (cudawd's window) of its pool (the memfd fd) to the checkpoint
 * module, which page-locks them in the background: a larger window of the pool attached last
 * grows it in place (ckpt_pool_grow), else the whole file is mapped shared and attached
 * (ckpt_pool_attach; nothing past the window is touched). 0: attached;
 * -EBUSY: an image lies in the pool attached before (nothing changed: try again once running);
 * else -errno with the reason, in words, in *why. fd stays open either way (the caller keeps it
 * for a retry or closes it: the mapping keeps the memory). */
int shim_sched_attach_pool(int fd, uint64_t size, const char **why);
/* Let go of the pool (ckpt_pool_attach(NULL, ...)): 0, or -EBUSY while an image lies in it. */
int shim_sched_detach_pool(void);

/* Start the client's thread, detached (it runs for the program's life). 0 or an errno number. */
int shim_sched_start_thread(void *(*run)(void *));
/* The same with an argument, for a thread that ends by itself (a spilled image's removal). */
int shim_sched_start_thread_arg(void *(*run)(void *), void *arg);

#endif
