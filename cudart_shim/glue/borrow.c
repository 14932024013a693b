/* Borrowing cudawd's host-memory pool without sharing (CUDAW_BORROW_POOL=auto, CUDAW_SHARE not
 * 1). A program paused by a signal, cudaw-ctl or Slurm puts its image into its own reserve, which
 * it must page-lock first: a pause soon after a large allocation finds the reserve not ready and
 * copies at a fraction of the link's speed. If its user's cudawd answers, the program borrows
 * from cudawd's pool instead: it says hello as a borrower (cudawd never schedules it), maps the
 * pool as a sharing program does, tells cudawd how large its image would be, and holds a standing
 * loan of that size for every checkpoint while its reserve stands by. Where cudawd cannot lend
 * enough, or goes away, the reserve takes the images again. Without a cudawd nothing changes:
 * one connect that fails at start, then one every BORROW_RETRY seconds from a thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "options.h"
#include "sched_proto.h"
#include "shim.h"
#include "shim_ckpt.h"
#include "shim_profile.h"
#include "shim_sched_link.h"

#define BORROW_RETRY 10    /* seconds between connects while no cudawd answers */
#define REFUSED_RETRY 60   /* ... after one refused us (an older cudawd, or none of its pool for us) */
#define POLL_MS 100        /* how soon a change of the program's memory reaches cudawd */
#define REGION_ALIGN 4096u /* each image region starts on a page of the pool */

/* Everything below is the thread's, but for the first connect made before it starts. */
static struct {
  char path[sizeof ((struct ckpt_options *)0)->sched_socket];
  int fd;                  /* -1: not connected */
  bool accepted;           /* cudawd answered our hello: we borrow */
  time_t next_try;         /* not connected: when to connect again (monotonic seconds) */
  uint64_t pool_size;      /* the window attached (0: none) */
  bool detach;             /* cudawd went away while our image lay in its pool: let go of that
                            * pool once the image is dropped */
  int retry_fd;            /* a pool that came while an image held the last one (-1: none) */
  uint64_t retry_size;
  uint64_t loan_offset, loan_length; /* the standing loan (length 0: none) */
  bool loan_asked;         /* none held: cudawd lends one when the pool has room */
  uint64_t image;          /* what our image would take, as last told to cudawd */
  int covered;             /* the loan holds the image: 1, 0, -1 unknown */
  bool standing_by;        /* ... and is page-locked: the image reserve stands by */
  bool said_covered;       /* the lines apply_loan said last */
  char said_why[96];
} borrow = {.fd = -1, .retry_fd = -1, .covered = -1};

static time_t now_seconds(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec;
}

static int send_msg(struct sched_msg msg)
{
  msg.version = SCHED_PROTO_VERSION;
  msg.pid = getpid();
  return send(borrow.fd, &msg, sizeof msg, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof msg
             ? 0 : -errno;
}

/* What our image would take now: the device memory a checkpoint saves, each region starting on a
 * page of the pool (0: none yet). */
static uint64_t image_now(void)
{
  uint64_t bytes = 0, regions = 0;
  shim_ckpt_device_bytes(&bytes, &regions);
  return bytes ? bytes + regions * REGION_ALIGN : 0;
}

/* Tell the checkpoint module the loan, and whether it holds the image (the reserve stands by
 * then). Said in one line when the loan starts to hold the image, and in one when the reserve
 * takes over for a reason (why; NULL: none worth a line, such as a larger loan still to come). */
static void apply_loan(const char *why)
{
  uint64_t image = image_now();
  bool covers = borrow.pool_size && borrow.loan_length && borrow.loan_length >= image;
  borrow.standing_by = ckpt_pool_lend_standing(borrow.loan_offset,
                                               borrow.pool_size ? borrow.loan_length : 0, covers);
  borrow.covered = covers;
  char lent[32], need[32];
  ckpt_format_bytes(borrow.loan_length, lent, sizeof lent);
  ckpt_format_bytes(image, need, sizeof need);
  if (covers && !borrow.said_covered)
    shim_info("borrow: cudawd lends us %s of its host-memory pool (%s): a checkpoint of our %s "
              "goes there; the image reserve stands by once that range is page-locked", lent,
              borrow.path, need);
  else if (!covers && why && strcmp(why, borrow.said_why) != 0)
    shim_info("borrow: %s: the image reserve (CUDAW_CKPT_RESERVE) takes our checkpoint images "
              "(%s) again", why, need);
  borrow.said_covered = covers;
  snprintf(borrow.said_why, sizeof borrow.said_why, "%s", covers || !why ? "" : why);
}

/* Leave cudawd (it went away, refused us, or broke the protocol): no loan, the reserve takes the
 * images, and the pool goes once no image lies in it (its memory is the dead cudawd's). */
static void leave(const char *why, int retry_after)
{
  if (borrow.fd >= 0) close(borrow.fd);
  borrow.fd = -1;
  if (borrow.retry_fd >= 0) close(borrow.retry_fd);
  borrow.retry_fd = -1;
  borrow.loan_offset = borrow.loan_length = 0;
  borrow.loan_asked = false;
  borrow.next_try = now_seconds() + retry_after;
  if (borrow.accepted) {
    apply_loan(why);
    borrow.detach = borrow.pool_size > 0;
  }
  borrow.accepted = false;
}

/* One connect (not waiting: a missing or busy socket costs one failed call), then the hello. */
static void join(void)
{
  uid_t peer = 0;
  int fd = shim_sched_connect(borrow.path, 1, &peer);
  borrow.next_try = now_seconds() + BORROW_RETRY;
  if (fd < 0) {
    shim_debug("borrow: no cudawd on %s (%s)", borrow.path, strerror(-fd));
    return;
  }
  if (peer != geteuid()) { /* cudawd lends its pool to its own user's programs only */
    shim_debug("borrow: the cudawd on %s is uid %u's, not ours: not borrowing", borrow.path,
               (unsigned)peer);
    close(fd);
    borrow.next_try = now_seconds() + REFUSED_RETRY;
    return;
  }
  borrow.fd = fd;
  if (send_msg((struct sched_msg){.type = SCHED_HELLO, .value = SCHED_HELLO_BORROWER}) != 0)
    leave(NULL, BORROW_RETRY); /* an older cudawd answers by closing: receive() sees that */
}

/* cudawd sent its pool (again: a window of another size). */
static void take_pool(int fd, uint64_t size)
{
  const char *why = NULL;
  int rc = shim_sched_attach_pool(fd, size, &why);
  if (rc == -EBUSY) { /* our image lies in the last one: once it is dropped */
    if (borrow.retry_fd >= 0 && borrow.retry_fd != fd) close(borrow.retry_fd);
    borrow.retry_fd = fd;
    borrow.retry_size = size;
    return;
  }
  if (borrow.retry_fd == fd) borrow.retry_fd = -1;
  close(fd); /* the mapping keeps the memory */
  if (rc) { /* it would fail again: leave, so that cudawd keeps no room for our image */
    shim_info("borrow: cannot use cudawd's host-memory pool (%s): not borrowing it", why);
    leave(NULL, REFUSED_RETRY);
    return;
  }
  borrow.pool_size = size;
  borrow.detach = false;
  send_msg((struct sched_msg){.type = SCHED_POOL_MAPPED, .value = 1, .bytes = size,
                              .held = SCHED_POOL_GROWS});
  apply_loan(NULL); /* attaching put the reserve on standby */
}

static void take_loan(const struct sched_msg *msg)
{
  borrow.loan_asked = false;
  bool inside = msg->bytes && msg->held <= borrow.pool_size &&
                msg->bytes <= borrow.pool_size - msg->held;
  borrow.loan_offset = inside ? msg->held : 0;
  borrow.loan_length = inside ? msg->bytes : 0;
  if (msg->bytes && !inside)
    shim_warn("borrow: cudawd lent a range (%llu+%llu) outside the pool we mapped (%llu bytes): "
              "not used", (unsigned long long)msg->held, (unsigned long long)msg->bytes,
              (unsigned long long)borrow.pool_size);
  apply_loan(msg->status == -ENOSPC ? "cudawd's host-memory pool has no room for our image"
             : msg->bytes && !inside ? "cudawd lent a range outside its pool" : NULL);
}

/* One message from cudawd; false when the connection is over (left). */
static bool receive(void)
{
  struct sched_msg msg;
  int fd = -1;
  ssize_t n = shim_sched_receive(borrow.fd, &msg, &fd);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  if (n != (ssize_t)sizeof msg || msg.version != SCHED_PROTO_VERSION) {
    if (fd >= 0) close(fd);
    /* Closed at our hello: an older cudawd, which knows no borrowers. */
    if (!borrow.accepted) shim_debug("borrow: the cudawd on %s does not lend to programs that "
                                     "do not share (an older one)", borrow.path);
    leave(n == 0 ? "cudawd went away" : "cudawd's message was malformed",
          borrow.accepted ? BORROW_RETRY : REFUSED_RETRY);
    return false;
  }
  if (msg.type == SCHED_POOL && fd >= 0) {
    take_pool(fd, msg.bytes);
    return borrow.fd >= 0;
  }
  if (fd >= 0) close(fd); /* a descriptor with any other message is not ours to keep */
  if (msg.type == SCHED_REPLY && !borrow.accepted) {
    if (msg.status == 0) {
      borrow.accepted = true;
      borrow.image = image_now();
      send_msg((struct sched_msg){.type = SCHED_BORROW, .bytes = borrow.image});
      shim_info("borrow: borrowing the host-memory pool of the cudawd on %s for our checkpoint "
                "images (not sharing: cudawd never schedules us)", borrow.path);
    } else {
      shim_debug("borrow: the cudawd on %s lends us nothing: %s", borrow.path,
                 msg.status == -EOPNOTSUPP ? "it has no pool for our user" : strerror(-msg.status));
      leave(NULL, REFUSED_RETRY);
      return false;
    }
  } else if (msg.type == SCHED_LOAN && borrow.accepted) {
    take_loan(&msg);
  } else if (msg.type == SCHED_CHECKPOINT || msg.type == SCHED_RESUME ||
             msg.type == SCHED_EXCHANGE || msg.type == SCHED_SPILL) {
    /* Not ours to obey: we do not share, and cudawd knows it (a bug, or a cudawd that is not) */
    shim_warn("borrow: cudawd sent an order (message %u) to a program that does not share: "
              "ignored", msg.type);
  }
  return true;
}

/* While running: tell cudawd what our image would take, and trade a loan it outgrew for a larger
 * one once no checkpoint can use the old one. */
static void follow_image(void)
{
  if (ckpt_state() != CKPT_RUNNING) return;
  if (borrow.retry_fd >= 0) take_pool(borrow.retry_fd, borrow.retry_size);
  if (borrow.fd < 0) return; /* that pool could not be used: left */
  uint64_t image = image_now();
  bool outgrown = borrow.loan_length && image > borrow.loan_length;
  if (outgrown && !borrow.loan_asked && ckpt_pool_unlend() == 0) {
    borrow.loan_offset = borrow.loan_length = 0;
    borrow.loan_asked = true;
    borrow.image = image;
    send_msg((struct sched_msg){.type = SCHED_BORROW, .bytes = image, .value = 1});
  } else if (image != borrow.image) {
    borrow.image = image;
    send_msg((struct sched_msg){.type = SCHED_BORROW, .bytes = image});
  }
  bool covers = borrow.pool_size && borrow.loan_length && borrow.loan_length >= image;
  /* The reserve leaves standby at once; it takes it once the range is page-locked (asked again
   * each round until then). A line comes with cudawd's answer. */
  if (borrow.covered != covers || (covers && !borrow.standing_by)) apply_loan(NULL);
}

static void *run(void *unused)
{
  (void)unused;
  for (;;) {
    if (borrow.fd < 0) {
      /* A dead cudawd's pool holds its memory as long as we map it. */
      if (borrow.detach && ckpt_state() == CKPT_RUNNING && shim_sched_detach_pool() == 0) {
        borrow.detach = false;
        borrow.pool_size = 0;
      }
      if (now_seconds() >= borrow.next_try) join();
      if (borrow.fd < 0) sleep(1);
      continue;
    }
    struct pollfd pfd = {borrow.fd, POLLIN, 0};
    if (poll(&pfd, 1, POLL_MS) > 0 && !receive()) continue;
    if (borrow.accepted) follow_image();
  }
  return NULL;
}

/* A child forked from the program has no borrowing thread, and its copy of the connection
 * would keep our loan from cudawd after we exit. */
static void forget_in_child(void)
{
  if (borrow.fd >= 0) close(borrow.fd);
  borrow.fd = -1;
}

static void start_borrow(void)
{
  if (strcmp(cudaw_option("CUDAW_SHARE"), "1") == 0 ||
      strcmp(cudaw_option("CUDAW_BORROW_POOL"), "auto") != 0)
    return;
  struct ckpt_options options;
  ckpt_options_from_env(&options, NULL, 0);
  if (!options.sched_socket[0]) return; /* a run dir too long for a socket: nobody listens */
  snprintf(borrow.path, sizeof borrow.path, "%s", options.sched_socket);
  pthread_atfork(NULL, NULL, forget_in_child);
  join();
  int rc = shim_sched_start_thread(run);
  if (rc) {
    shim_debug("borrow: cannot start its thread (%s): not borrowing", strerror(rc));
    if (borrow.fd >= 0) close(borrow.fd);
    borrow.fd = -1;
  }
}
SHIM_START_STEP(SHIM_START_SCHED, SHIM_PROFILE_SCHED, start_borrow);
