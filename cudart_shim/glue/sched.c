/* Sharing a GPU through cudawd (CUDAW_SHARE=1). A thread keeps the connection: it reports the
 * device memory vmem holds when it shrinks, and runs the checkpoints and resumes cudawd asks for
 * through the checkpoint module. Allocations ask cudawd before the memory they hold grows beyond
 * what it granted. The thread also watches the gate: after CUDAW_SHARE_IDLE_MS without a CUDA
 * call it tells cudawd the program is idle (cudawd may swap it out for a waiting program and
 * leaves it out until a call waits at the gate again). If cudawd goes away, the program runs
 * unshared (one warning), re-joins when a cudawd answers again, and, if cudawd had paused it,
 * resumes itself unless a new cudawd came within SELF_RESUME_AFTER seconds (which then resumes
 * it when it fits). cudawd may send its host-memory pool (a memfd) after the hello: it is mapped
 * here and handed to the checkpoint module, which page-locks it in the background; a checkpoint
 * order that lends a range of it puts the image there. With a disk tier (cudawd --spill-dir),
 * cudawd may ask a paused program to move its image to disk (SCHED_SPILL, with the directory):
 * the program writes it itself, into a directory of its own, and removes it once a resume has
 * read it back (cudawd may have it read back into host memory ahead of the turn: SCHED_UNSPILL);
 * a new cudawd is told the image is on disk when the program re-joins. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "options.h"
#include "sched_proto.h"
#include "shim.h"
#include "shim_generated.h"
#include "shim_profile.h"
#include "shim_sched.h"
#include "shim_sched_link.h"
#include "shim_vmem.h"
#include "vmem.h"

static struct {
  bool sharing;                /* CUDAW_SHARE=1 and the thread runs */
  char path[sizeof ((struct sockaddr_un *)0)->sun_path];
  pthread_mutex_t conn_lock;   /* fd and connected */
  int fd;
  _Atomic bool connected;
  pid_t joined_by;             /* the process that joined (a child forked since did not) */
  _Atomic bool leaving;        /* the process exits: cudawd was told (shim_sched_leaving) */
  bool warned;                 /* the one "running unshared" warning was given */
  bool paused_by_sched;        /* cudawd paused us: resume ourselves if it goes away */
  time_t lost_at;              /* when the connection was lost (monotonic seconds) */
  bool ever_joined;            /* a cudawd scheduled us once: wait for the next before failing */
  unsigned generation;         /* joins so far: an answer from an earlier cudawd is no grant */
  bool admitting;              /* an allocation is between admit and allocated */
  /* The idle hint (thread only): CUDAW_SHARE_IDLE_MS, the gate's call count when last seen
   * moving, and whether cudawd was told we are idle. */
  double idle_seconds;
  uint64_t calls_seen;
  double active_at;
  bool idle_told;
  bool computing;              /* as last told to the pool (pace_pool) */
  atomic_int asking;           /* allocations waiting for cudawd's answer: not idle */
  /* The lease: what cudawd granted per device ordinal. Held across admit..allocated. */
  pthread_mutex_t lease_lock;
  uint64_t granted[SCHED_MAX_DEVICES];
  uint64_t reported[SCHED_MAX_DEVICES];
  bool described[SCHED_MAX_DEVICES];
  char key[SCHED_MAX_DEVICES][SCHED_KEY_LEN];
  uint64_t total[SCHED_MAX_DEVICES];
  /* The one allocation waiting for cudawd's answer. */
  pthread_mutex_t reply_lock;
  pthread_cond_t reply_cond;
  bool reply_ready;
  int reply_status;
  /* cudawd's host-memory pool, owned by the checkpoint module once attached (thread only). */
  uint64_t pool_size;
  /* One that could not be attached yet (an image lay in the last one, or a checkpoint ran): its
   * descriptor, tried again once a second while running. -1: none. */
  int pool_retry_fd;
  uint64_t pool_retry_size;
  bool pool_retry_huge;
  time_t pool_retry_at;
  /* The disk tier: the directory cudawd had us spill our image to ("": none), removed once a
   * resume has read it back (thread only). */
  char spilled[PATH_MAX];
} client = {.fd = -1, .pool_retry_fd = -1, .conn_lock = PTHREAD_MUTEX_INITIALIZER,
            .lease_lock = PTHREAD_MUTEX_INITIALIZER, .reply_lock = PTHREAD_MUTEX_INITIALIZER,
            .reply_cond = PTHREAD_COND_INITIALIZER};

static SHIM_TLS bool holds_lease;

static int send_flags(struct sched_msg msg, int flags)
{
  msg.version = SCHED_PROTO_VERSION;
  msg.pid = getpid();
  pthread_mutex_lock(&client.conn_lock);
  int rc = client.fd < 0 ? -ENOTCONN
           : send(client.fd, &msg, sizeof msg, MSG_NOSIGNAL | flags) == (ssize_t)sizeof msg
               ? 0 : -errno;
  pthread_mutex_unlock(&client.conn_lock);
  return rc;
}

static int send_msg(struct sched_msg msg)
{
  return send_flags(msg, 0);
}

static void answer_waiter(int status)
{
  pthread_mutex_lock(&client.reply_lock);
  client.reply_ready = true;
  client.reply_status = status;
  pthread_cond_broadcast(&client.reply_cond);
  pthread_mutex_unlock(&client.reply_lock);
}

static uint64_t held_bytes(int device)
{
  struct vmem_stats stats;
  return shim_vmem_running() && vmem_get_stats(device, &stats) == 0 ? stats.held_bytes : 0;
}

/* ---- the connection ------------------------------------------------------------------------ */

static void describe(int device)
{
  struct sched_msg msg = {.type = SCHED_DEVICE, .device = device, .bytes = client.total[device]};
  memcpy(msg.key, client.key[device], sizeof msg.key);
  send_msg(msg);
  /* Exchanges need memory that moves piece by piece: remap with pieces (never translate). vmem
   * runs by the time a device is described. */
  uint64_t piece = vmem_piece_bytes();
  if (piece && piece != VMEM_PIECE_NONE)
    send_msg((struct sched_msg){.type = SCHED_CAN_EXCHANGE, .bytes = piece,
                                .value = SCHED_EXCHANGE_HANDOVER});
}

/* Connect, check that cudawd is ours (same user or root), say hello, describe our devices and
 * what we hold. Called with lease_lock held. */
static int join(void)
{
  uid_t peer_uid;
  int fd = shim_sched_connect(client.path, 0, &peer_uid);
  if (fd < 0) return fd;
  if (peer_uid != geteuid() && peer_uid != 0) {
    shim_warn("sched: %s belongs to uid %u, not to us: not joining it", client.path,
              (unsigned)peer_uid);
    close(fd);
    return -EACCES;
  }
  pthread_mutex_lock(&client.conn_lock);
  client.fd = fd;
  pthread_mutex_unlock(&client.conn_lock);
  bool paused = client.paused_by_sched && ckpt_state() == CKPT_PAUSED;
  int rc = send_msg((struct sched_msg){.type = SCHED_HELLO, .value = paused});
  char on_disk[PATH_MAX];
  uint64_t disk_bytes = 0;
  if (rc == 0 && paused && ckpt_image_on_disk(on_disk, sizeof on_disk, &disk_bytes))
    rc = send_msg((struct sched_msg){.type = SCHED_ON_DISK, .bytes = disk_bytes});
  if (rc == 0 && client.idle_told) rc = send_msg((struct sched_msg){.type = SCHED_GPU_IDLE, .value = 1});
  for (int d = 0; rc == 0 && d < SCHED_MAX_DEVICES; d++) {
    if (!client.described[d]) continue;
    describe(d);
    client.granted[d] = client.reported[d] = held_bytes(d);
    rc = send_msg((struct sched_msg){.type = SCHED_USAGE, .device = d,
                                     .bytes = client.granted[d]});
  }
  if (rc == 0) {
    client.generation++;
    client.joined_by = getpid();
    atomic_store(&client.connected, true);
    client.ever_joined = true;
  }
  return rc;
}

/* A cudawd that went away is usually started again at once: one that paused us waits this long
 * for the next to resume it when memory allows, before resuming on its own. */
#define SELF_RESUME_AFTER 5

static void lost(void)
{
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  client.lost_at = now.tv_sec;
  atomic_store(&client.connected, false);
  pthread_mutex_lock(&client.conn_lock);
  if (client.fd >= 0) close(client.fd);
  client.fd = -1;
  pthread_mutex_unlock(&client.conn_lock);
  if (!client.warned)
    shim_warn("sched: cudawd on %s went away: running unshared; re-joining when a cudawd "
              "answers again", client.path);
  client.warned = true;
  if (client.pool_retry_fd >= 0) close(client.pool_retry_fd); /* the pool of a cudawd gone */
  client.pool_retry_fd = -1;
  answer_waiter(-ENOTCONN); /* a waiting allocation goes ahead */
}

/* cudawd would not have us: another user's (-EACCES), or this user already has as many
 * connections or programs there as cudawd allows one user (-EUSERS). Say so once, and ask again
 * no more than once a second. */
static void refused(int status)
{
  if (!client.warned)
    shim_warn("sched: cudawd on %s refused us: %s; running unshared, asking again every second",
              client.path, status == -EUSERS ? "this user has as many programs or connections "
              "there as cudawd allows one user (cudaw-ctl sched shows them)" : "it belongs to "
              "another user");
  client.warned = true;
  lost();
  sleep(1);
}

/* client.spilled, between this thread and the exit handler below; the process it is ours in (a
 * child forked meanwhile inherits the name, never the image, and never takes the lock: it may
 * have been forked while this thread held it). */
static pthread_mutex_t spilled_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic pid_t spilled_by;

static double seconds_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Removing an image's files can take seconds (each file's extents, and the page cache a read
 * left): this thread serves cudawd's orders, and in notebook_bench a resume it had ordered began
 * 7.9 s after the read-back's word, with only the removal of 20 GiB of files in between (H200 as
 * an H100, session 30). So the files go on a thread of their own (a spill into the same
 * directory, and the exit, wait for it: remove_wait). */
struct removal {
  char dir[PATH_MAX];
  const char *after;
};
static pthread_mutex_t removing_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t removed_cond = PTHREAD_COND_INITIALIZER;
static int removing; /* removals under way, in the process spilled_by names */

static void remove_files(const char *dir, const char *after)
{
  double t0 = seconds_now();
  long delay_ms = strtol(cudaw_option("CUDAW_TEST_REMOVE_DELAY_MS"), NULL, 10);
  if (delay_ms > 0) nanosleep(&(struct timespec){delay_ms / 1000, delay_ms % 1000 * 1000000}, NULL);
  int rc = ckpt_remove_image(dir);
  if (rc)
    shim_warn("sched: cannot remove the spilled image in %s after %s: %s", dir, after,
              strerror(-rc));
  else
    shim_info("sched: the image we spilled is read no more (%s): its files on disk removed in "
              "%.3f s", after, seconds_now() - t0);
}

static void *remove_thread(void *arg)
{
  struct removal *job = arg;
  remove_files(job->dir, job->after);
  free(job);
  pthread_mutex_lock(&removing_lock);
  removing--;
  pthread_cond_broadcast(&removed_cond);
  pthread_mutex_unlock(&removing_lock);
  return NULL;
}

/* Wait until no removal runs: before a spill writes into the directory again, and at exit. */
static void remove_wait(void)
{
  if (atomic_load(&spilled_by) != getpid()) return; /* a child's count is its parent's */
  pthread_mutex_lock(&removing_lock);
  while (removing > 0) pthread_cond_wait(&removed_cond, &removing_lock);
  pthread_mutex_unlock(&removing_lock);
}

/* Remove the image cudawd had us spill once nobody reads it again: read back into host memory
 * ahead of our turn, or running again (a resume, the coming-in side of an exchange, a resume
 * that streamed it). `after` says which, for the log. In the background unless `now` (or no
 * thread can be had). Whether there were files to remove. */
static bool remove_spilled(const char *after, bool now)
{
  if (atomic_load(&spilled_by) != getpid()) return false;
  pthread_mutex_lock(&spilled_lock);
  bool had = client.spilled[0] != '\0';
  struct removal *job = had && !now ? malloc(sizeof *job) : NULL;
  if (job) {
    snprintf(job->dir, sizeof job->dir, "%s", client.spilled);
    job->after = after;
    pthread_mutex_lock(&removing_lock);
    removing++;
    pthread_mutex_unlock(&removing_lock);
    if (shim_sched_start_thread_arg(remove_thread, job) != 0) {
      pthread_mutex_lock(&removing_lock);
      removing--;
      pthread_mutex_unlock(&removing_lock);
      free(job);
      job = NULL;
    }
  }
  if (had && !job) remove_files(client.spilled, after);
  client.spilled[0] = '\0';
  pthread_mutex_unlock(&spilled_lock);
  return had;
}

/* At exit: a program that ends has no use for the image cudawd had us spill. Its resume may have
 * let the program run on to its end before this thread removed the files (the tier soak caught
 * one in CI, with some of its files gone and one left behind). */
__attribute__((destructor)) static void shim_sched_exit(void)
{
  remove_spilled("its program's end", true);
  remove_wait();
}

void shim_sched_leaving(void)
{
  if (!atomic_load(&client.connected) || client.joined_by != getpid()) return;
  atomic_store(&client.leaving, true);
  /* Never blocking the exit: a cudawd that stopped reading (SIGSTOP) misses the word, no more. */
  send_flags((struct sched_msg){.type = SCHED_LEAVING}, MSG_DONTWAIT);
}

static int resume(void)
{
  int rc = ckpt_request_resume();
  if (rc == 0) remove_spilled("resuming from it", false);
  return rc;
}

/* cudawd asks us (paused) to move our image to disk under the directory it sent: into a
 * directory of our own there (cudaw-<uid>-<pid>, 0700), written as our own user, checksummed;
 * the host memory it held is freed. Answered with SCHED_DONE value 3. */
static void spill(int dir_fd)
{
  char link[64], base[PATH_MAX], dir[PATH_MAX];
  struct stat by_fd, by_name;
  int rc = 0;
  snprintf(link, sizeof link, "/proc/self/fd/%d", dir_fd);
  ssize_t n = readlink(link, base, sizeof base - 1);
  base[n > 0 ? n : 0] = '\0';
  if (n <= 0 || base[0] != '/') {
    rc = -EINVAL;
  } else {
    /* The name must still lead to the directory sent (not moved or replaced since). */
    if (fstat(dir_fd, &by_fd) != 0 || !S_ISDIR(by_fd.st_mode) || stat(base, &by_name) != 0 ||
        by_fd.st_dev != by_name.st_dev || by_fd.st_ino != by_name.st_ino)
      rc = -ESTALE;
    else if ((size_t)snprintf(dir, sizeof dir, "%s/cudaw-%u-%ld", base, (unsigned)geteuid(),
                              (long)getpid()) >= sizeof dir)
      rc = -ENAMETOOLONG;
  }
  struct ckpt_result result = {0};
  remove_wait(); /* the last image's files, in the same directory, go first */
  if (rc == 0) rc = ckpt_request_spill(dir, &result);
  uint64_t disk_bytes = result.disk_bytes;
  char where[PATH_MAX];
  bool ours = rc == 0;
  if (rc == -EALREADY && ckpt_image_on_disk(where, sizeof where, &disk_bytes)) {
    rc = 0; /* on disk already: written for an earlier order, or by a user's cudaw-ctl spill */
    ours = strcmp(where, dir) == 0; /* a user's directory is theirs: never removed here */
    snprintf(dir, sizeof dir, "%s", where);
  }
  if (rc == 0) {
    pthread_mutex_lock(&spilled_lock);
    if (ours) {
      snprintf(client.spilled, sizeof client.spilled, "%s", dir);
      atomic_store(&spilled_by, getpid());
    }
    pthread_mutex_unlock(&spilled_lock);
    shim_info("sched: cudawd moved our image to disk: %s (%llu bytes, %.3f s)", dir,
              (unsigned long long)disk_bytes, result.disk_seconds);
  } else {
    shim_warn("sched: cudawd asked us to move our image to disk under %s: %s; it stays in host "
              "memory", n > 0 ? base : "(a directory we cannot name)",
              rc == -ESTALE ? "that directory was moved or replaced" : strerror(-rc));
  }
  send_msg((struct sched_msg){.type = SCHED_DONE, .value = 3, .status = rc, .bytes = disk_bytes,
                              .seconds = rc == 0 ? result.disk_seconds : 0});
}

/* cudawd asks us (paused, image on disk) to read our image back into host memory ahead of our
 * turn. Read back and checked, its files serve nothing more (a later spill writes anew), so they
 * go at once: they used to stay until the resume, and on notebook_bench's 64 GiB disk (session
 * 29) such files left a spill without room. Answered with SCHED_DONE value 4. */
static void unspill(void)
{
  struct ckpt_result result = {0};
  int rc = ckpt_request_unspill(&result);
  if (rc)
    shim_warn("sched: cudawd asked us to read our image back from disk: %s; the resume reads it "
              "from there", rc == -EALREADY ? "it is not on disk" : strerror(-rc));
  /* cudawd hears first that the image is in host memory, then the files go: its word that an
   * image is on disk stays true but for the moment its message is on its way. */
  send_msg((struct sched_msg){.type = SCHED_DONE, .value = 4, .status = rc,
                              .bytes = rc == 0 ? result.disk_bytes : 0,
                              .seconds = rc == 0 ? result.disk_seconds : 0});
  if (rc == 0) {
    shim_info("sched: cudawd had our image read back from disk ahead of our turn (%llu bytes, "
              "%.3f s)", (unsigned long long)result.disk_bytes, result.disk_seconds);
    remove_spilled("read back", false);
  }
}

/* Run the checkpoint (op 1) or resume (op 2) cudawd asked for and tell it how it went. A
 * checkpoint may come with a range of the pool lent for its image (length 0: none). */
static void transition(int op, uint64_t loan_offset, uint64_t loan_length)
{
  bool lent = op == 1 && loan_length && client.pool_size;
  if (op == 1 && loan_length && !client.pool_size)
    shim_info("sched: cudawd lent a range of a host-memory pool we do not have: not used");
  if (lent && (loan_offset > client.pool_size || loan_length > client.pool_size - loan_offset)) {
    shim_warn("sched: cudawd lent a range (%llu+%llu) outside its pool (%llu bytes): not used",
              (unsigned long long)loan_offset, (unsigned long long)loan_length,
              (unsigned long long)client.pool_size);
    lent = false;
  }
  if (lent) ckpt_pool_lend(loan_offset, loan_length);
  int rc = op == 1 ? ckpt_request_checkpoint() : resume();
  if (lent) ckpt_pool_lend(0, 0); /* only for this checkpoint */
  if (rc == -EALREADY) rc = 0; /* already paused (or running): what cudawd wanted */
  if (rc == 0) client.paused_by_sched = op == 1;
  if (rc && atomic_load(&client.leaving))
    shim_info("sched: cudawd's order to %s came as we exit: not done (%s)",
              op == 1 ? "checkpoint" : "resume", strerror(-rc));
  struct ckpt_result result = {0};
  ckpt_last_result(&result);
  /* held: the image bytes straight into the range lent, and at least 1 whenever the image lies
   * there, staged where the range was not page-locked yet: cudawd (any version) takes back a
   * range reported with held 0, and lends it again under the image. */
  uint64_t held = result.pool_bytes;
  if (!held && result.pool_image_bytes) held = 1;
  send_msg((struct sched_msg){.type = SCHED_DONE, .value = op, .status = rc,
                              .bytes = result.bytes, .seconds = result.total_seconds,
                              .held = op == 1 && rc == 0 ? held : 0,
                              .device_free = op == 1 && rc == 0 ? result.reserve_bytes : 0});
}

/* One side of an exchange cudawd ordered (value 1: going out, 2: coming in), paced through the
 * page it sent (page_fd, closed here); answered as a checkpoint or resume. A handover lends the
 * side going out a range of the pool (loan_offset, loan_length) for its image, as a checkpoint
 * order does. */
static void exchange(int value, int page_fd, uint64_t loan_offset, uint64_t loan_length)
{
  bool out = value == 1;
  bool lent = out && loan_length && client.pool_size && loan_offset <= client.pool_size &&
              loan_length <= client.pool_size - loan_offset;
  if (out && loan_length && !lent)
    shim_warn("sched: cudawd lent a range (%llu+%llu) outside the pool we have (%llu bytes) for "
              "an exchange: not used", (unsigned long long)loan_offset,
              (unsigned long long)loan_length, (unsigned long long)client.pool_size);
  if (lent) ckpt_pool_lend(loan_offset, loan_length);
  struct ckpt_result result = {0};
  int rc = value == 1 || value == 2 ? ckpt_request_exchange(page_fd, out, &result) : -EINVAL;
  if (lent) ckpt_pool_lend(0, 0); /* only for this checkpoint */
  close(page_fd);
  /* A checkpoint that failed after giving memory back leaves us paused with our image (see
   * ckpt_request_exchange): swapped out as far as cudawd is concerned, resumed on our turn. */
  if (rc && out && ckpt_state() == CKPT_PAUSED) {
    shim_warn("sched: the exchange's checkpoint failed midway (%s); paused with our image, "
              "resumed on our turn", result.reason);
    rc = 0;
  }
  if (rc == 0) client.paused_by_sched = out;
  if (rc == 0 && !out) remove_spilled("come in through an exchange", false);
  if (rc && atomic_load(&client.leaving))
    shim_info("sched: the exchange cudawd ordered (%s) came as we exit: not done (%s)",
              out ? "going out" : "coming in", strerror(-rc));
  else if (rc)
    shim_warn("sched: the exchange cudawd ordered (%s) failed: %s", out ? "going out"
              : "coming in", result.reason[0] ? result.reason : strerror(-rc));
  else
    shim_info("sched: exchange %s: %llu bytes %s, %llu %s, %.3f s", out ? "out" : "in",
              (unsigned long long)result.exchange_moved, out ? "into the image" : "created",
              (unsigned long long)result.exchange_given, out ? "released" : "image bytes freed",
              result.total_seconds);
  send_msg((struct sched_msg){.type = SCHED_DONE, .value = out ? 1 : 2, .status = rc,
                              .bytes = result.bytes, .seconds = result.total_seconds,
                              .held = result.exchange_given,
                              .device_free = out && rc == 0 ? result.reserve_bytes : 0});
}

/* cudawd schedules no other program and we are idle on the GPU (or, 0, another joined): the
 * pool's page-locking serves no swap, and at exit the driver would unpin it first. */
static void alone(bool alone)
{
  shim_info("sched: %s", alone ? "cudawd schedules no other program and we are idle: giving "
            "back our page-locking of its host-memory pool in the background" : "another "
            "program joined cudawd: page-locking its host-memory pool again");
  ckpt_pool_alone(alone);
}

/* cudawd sent its host-memory pool: map it and hand it to the checkpoint module, which
 * page-locks it in the background; tell cudawd whether it may lend us ranges of it. */
static void take_pool(int fd, uint64_t size, bool huge)
{
  const char *why = NULL;
  int rc = shim_sched_attach_pool(fd, size, &why);
  if (rc == -EBUSY) { /* try again once running with no image in the last pool */
    if (client.pool_retry_fd < 0)
      shim_info("sched: cudawd's host-memory pool arrived while a checkpoint or its image holds "
                "the last one: taking it once running");
    if (client.pool_retry_fd >= 0 && client.pool_retry_fd != fd) close(client.pool_retry_fd);
    client.pool_retry_fd = fd;
    client.pool_retry_size = size;
    client.pool_retry_huge = huge;
    client.pool_retry_at = time(NULL);
    return;
  }
  if (client.pool_retry_fd == fd) client.pool_retry_fd = -1;
  close(fd); /* the mapping keeps the memory */
  char bytes[32];
  ckpt_format_bytes(size, bytes, sizeof bytes);
  if (rc) {
    shim_info("sched: not using cudawd's host-memory pool (%s): %s; swap-outs copy the old way",
              bytes, why);
  } else {
    client.pool_size = size;
    shim_info("sched: mapped cudawd's host-memory pool (%s, huge pages %s); page-locking it in "
              "the background", bytes, huge ? "yes" : "no");
  }
  /* the window: cudawd sends a new one as it moves (each larger one at once: it grows in place) */
  send_msg((struct sched_msg){.type = SCHED_POOL_MAPPED, .value = rc ? 0 : 1, .bytes = size,
                              .held = SCHED_POOL_GROWS});
}

/* Tell cudawd when what we hold changed without an allocation (frees, arenas given back). */
static void report_usage(void)
{
  if (pthread_mutex_trylock(&client.lease_lock) != 0) return; /* an allocation is under way */
  if (client.admitting) { /* its grant is booked until it reports what it allocated */
    pthread_mutex_unlock(&client.lease_lock);
    return;
  }
  for (int d = 0; d < SCHED_MAX_DEVICES; d++) {
    if (!client.described[d]) continue;
    uint64_t held = held_bytes(d);
    if (held == client.reported[d]) continue;
    client.granted[d] = client.reported[d] = held;
    send_msg((struct sched_msg){.type = SCHED_USAGE, .device = d, .bytes = held});
  }
  pthread_mutex_unlock(&client.lease_lock);
}

/* The idle hint: any counted call begun, in flight, or waiting at a closed gate is activity, and
 * so is a thread inside a synchronisation (waiting for the device's work). cudaw's own threads
 * call the real runtime directly and do not count. */
static void watch_idle(void)
{
  if (client.idle_seconds <= 0) return;
  double now = seconds_now();
  uint64_t calls = shim_gate_calls_begun();
  unsigned in_flight = shim_gate_calls_in_flight(), waiters = shim_gate_waiters();
  unsigned blocking = shim_gate_calls_blocking();
  int asking = atomic_load(&client.asking);
  if (calls != client.calls_seen || in_flight || waiters || blocking || asking ||
      !client.active_at) {
    /* Which sign ended the idleness (debug): what the pool's pace and cudawd's swaps follow,
     * to tell a program's own call from anything else that counts as activity. */
    if (client.idle_told)
      shim_debug("sched: busy again after %.3f s idle: %llu calls begun, %u in flight, %u waiting "
                 "at the gate, %u waiting for the device, %d allocations asking cudawd",
                 now - client.active_at, (unsigned long long)(calls - client.calls_seen),
                 in_flight, waiters, blocking, asking);
    client.calls_seen = calls;
    client.active_at = now;
    if (client.idle_told && send_msg((struct sched_msg){.type = SCHED_GPU_IDLE, .value = 0}) == 0)
      client.idle_told = false;
    return;
  }
  if (!client.idle_told && now - client.active_at >= client.idle_seconds &&
      send_msg((struct sched_msg){.type = SCHED_GPU_IDLE, .value = 1}) == 0) {
    client.idle_told = true;
    shim_debug("sched: no CUDA call for %.3f s: told cudawd we are idle", now - client.active_at);
  }
}

/* While the program computes, cudawd's pool is page-locked one piece at a time (ckpt_pool_quiet):
 * computing is calling CUDA (not idle by the hint) with no call waiting for the GPU's turn. With
 * the hint off (CUDAW_SHARE_IDLE_MS=0) an idle program counts as computing: its pool still gets
 * page-locked, only more slowly. */
static void pace_pool(void)
{
  bool computing = !client.idle_told && !shim_gate_waiters() && !atomic_load(&client.asking);
  if (computing == client.computing) return;
  client.computing = computing;
  ckpt_pool_quiet(computing);
  shim_debug("sched: %s: cudawd's pool is page-locked %s",
             computing ? "computing" : "not computing",
             computing ? "one piece at a time" : "by every reserve thread");
}

static void *run(void *unused)
{
  (void)unused;
  time_t last_resume_try = 0;
  for (;;) {
    if (!atomic_load(&client.connected)) {
      /* Unshared: come back ourselves if cudawd had paused us (once a second while memory is
       * short), then look for a cudawd. */
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      if (client.paused_by_sched && ckpt_state() == CKPT_PAUSED && now.tv_sec != last_resume_try &&
          now.tv_sec - client.lost_at >= SELF_RESUME_AFTER) {
        last_resume_try = now.tv_sec;
        if (resume() == 0) client.paused_by_sched = false;
      }
      /* Never wait for the lease here: an allocation holding it may be waiting for an answer
       * that only this thread reads (it joined a cudawd itself, in shim_sched_retry). */
      if (pthread_mutex_trylock(&client.lease_lock) != 0) {
        if (!atomic_load(&client.connected)) usleep(20000);
        continue;
      }
      int rc = atomic_load(&client.connected) ? 0 : join();
      pthread_mutex_unlock(&client.lease_lock);
      if (rc == 0) {
        shim_info("sched: joined cudawd on %s", client.path);
      } else {
        if (!client.warned)
          shim_warn("sched: CUDAW_SHARE=1 but no cudawd answers on %s (%s): running unshared "
                    "until one does", client.path, strerror(-rc));
        client.warned = true;
        sleep(1);
        continue;
      }
    }
    struct pollfd pfd = {client.fd, POLLIN, 0};
    int rc = poll(&pfd, 1, 50);
    if (rc > 0) {
      struct sched_msg msg;
      int fd;
      ssize_t n = shim_sched_receive(client.fd, &msg, &fd);
      if (n != (ssize_t)sizeof msg || msg.version != SCHED_PROTO_VERSION) {
        if (fd >= 0) close(fd);
        lost();
        continue;
      }
      if (msg.type == SCHED_POOL && fd >= 0) {
        take_pool(fd, msg.bytes, msg.value == 1);
        fd = -1;
      }
      if (msg.type == SCHED_SPILL && fd >= 0) spill(fd);
      if (msg.type == SCHED_EXCHANGE && fd >= 0) {
        exchange(msg.value, fd, msg.held, msg.bytes);
        fd = -1;
      }
      if (fd >= 0) close(fd); /* a descriptor with any other message is not ours to keep */
      if (msg.type == SCHED_GRANT) answer_waiter(msg.status);
      else if (msg.type == SCHED_CHECKPOINT) transition(1, msg.held, msg.bytes);
      else if (msg.type == SCHED_RESUME) transition(2, 0, 0);
      else if (msg.type == SCHED_UNSPILL) unspill();
      else if (msg.type == SCHED_POOL_ALONE) alone(msg.value == 1);
      else if (msg.type == SCHED_REPLY && (msg.status == -EACCES || msg.status == -EUSERS))
        refused(msg.status);
    }
    report_usage();
    watch_idle();
    pace_pool();
    if (client.pool_retry_fd >= 0 && ckpt_state() == CKPT_RUNNING &&
        time(NULL) != client.pool_retry_at)
      take_pool(client.pool_retry_fd, client.pool_retry_size, client.pool_retry_huge);
  }
  return NULL;
}

static void start_sched(void)
{
  if (strcmp(cudaw_option("CUDAW_SHARE"), "1") != 0) return;
  /* Checked against its row (0-3600000): an invalid value was refused by name at start, and
   * its default stands here. */
  long idle_ms = strtol(cudaw_option("CUDAW_SHARE_IDLE_MS"), NULL, 10);
  client.idle_seconds = (double)idle_ms * 1e-3;
  struct ckpt_options options;
  ckpt_options_from_env(&options, NULL, 0);
  if (!options.sched_socket[0]) {
    shim_warn("sched: run dir %s too long for a socket path: not sharing", options.run_dir);
    return;
  }
  snprintf(client.path, sizeof client.path, "%s", options.sched_socket);
  /* Join now, so that the first allocation already asks cudawd (the thread re-joins later). */
  pthread_mutex_lock(&client.lease_lock);
  int joined = join();
  pthread_mutex_unlock(&client.lease_lock);
  if (joined == 0) shim_info("sched: joined cudawd on %s", client.path);
  int rc = shim_sched_start_thread(run);
  if (rc) {
    shim_warn("sched: cannot start its thread (%s): not sharing", strerror(rc));
    return;
  }
  client.sharing = true;
}
SHIM_START_STEP(SHIM_START_SCHED, SHIM_PROFILE_SCHED, start_sched);

/* ---- allocations --------------------------------------------------------------------------- */

/* The device's identity (UUID) and size, once per ordinal. Called inside an API call. */
static void learn_device(int device)
{
  struct cudaDeviceProp prop;
  memset(&prop, 0, sizeof prop);
  if (SHIM_REAL(cudaGetDeviceProperties)(&prop, device) == cudaSuccess) {
    for (int i = 0; i < 16; i++)
      snprintf(client.key[device] + 2 * i, 3, "%02x", (unsigned char)prop.uuid.bytes[i]);
    client.total[device] = prop.totalGlobalMem;
  } else {
    snprintf(client.key[device], SCHED_KEY_LEN, "ordinal-%d", device);
  }
  client.described[device] = true;
  describe(device);
}

/* An allocation that has waited this long for its turn says so, once (and again when it goes on):
 * a program that sits in cudaMalloc while others hold the GPU is sharing, not hung. */
#define WAIT_NOTE_SECONDS 10

/* When the last answer came, and how long coming back through the gate took: a granted
 * allocation that takes long to make after it says so (debug). Such grants took 0.95 and 1.6 s
 * once, each at the moment cudawd's pool window grew and the program mapped the new one (H200 as
 * an H100, share_bench host); with the window whole from the start, none took 0.1 s. */
static SHIM_TLS double answered_at, gate_seconds;
#define SLOW_GRANT_SECONDS 0.1

/* Wait for cudawd's answer to the allocation of `need` bytes on device without counting as a
 * call in flight, so that cudawd may pause us meanwhile; come back through the gate. Called with
 * lease_lock held, which is let go while the gate holds us: paused, and cudawd gone, the
 * connection thread must be able to join the next one (the caller sees the generation change and
 * asks again). */
static int wait_answer(uint64_t need, int device)
{
  atomic_fetch_add(&client.asking, 1);
  int stepped_out = shim_gate_step_out();
  double started = seconds_now();
  struct timespec note_at;
  clock_gettime(CLOCK_REALTIME, &note_at); /* the condition's clock */
  note_at.tv_sec += WAIT_NOTE_SECONDS;
  bool noted = false;
  pthread_mutex_lock(&client.reply_lock);
  while (!client.reply_ready) {
    if (noted) {
      pthread_cond_wait(&client.reply_cond, &client.reply_lock);
    } else if (pthread_cond_timedwait(&client.reply_cond, &client.reply_lock, &note_at) ==
                   ETIMEDOUT && !client.reply_ready) {
      noted = true;
      pthread_mutex_unlock(&client.reply_lock);
      shim_info("sched: an allocation on device %d (to hold %.2f GiB there) has waited %d s for "
                "its turn on the GPU: cudawd on %s makes room when another program's turn ends "
                "(`cudaw-ctl sched` shows the queue)", device, (double)need / (1u << 30),
                WAIT_NOTE_SECONDS, client.path);
      pthread_mutex_lock(&client.reply_lock);
    }
  }
  client.reply_ready = false;
  int status = client.reply_status;
  pthread_mutex_unlock(&client.reply_lock);
  if (noted)
    shim_info("sched: cudawd answered the allocation after %.1f s", seconds_now() - started);
  pthread_mutex_unlock(&client.lease_lock);
  answered_at = seconds_now();
  shim_gate_step_in(stepped_out);
  gate_seconds = seconds_now() - answered_at;
  atomic_fetch_sub(&client.asking, 1);
  pthread_mutex_lock(&client.lease_lock);
  return status;
}

static SHIM_TLS bool lease_granted; /* this admit got a grant: report what was allocated */

/* Ask cudawd for `size` more bytes on device (flags: SCHED_ALLOC_*), with what the device says is
 * free so that cudawd counts memory outside its books. Called with lease_lock held. 0: allocate
 * (granted); 1: allocate unscheduled (cudawd does not schedule this device: said on stderr);
 * 2: the same, cudawd went away (the connection thread said so); -ENOMEM: it can never fit. */
static int ask(int device, uint64_t size, int flags)
{
  uint64_t granule = vmem_granule(), held = held_bytes(device);
  uint64_t need = held + (size + granule - 1) / granule * granule; /* at most one new chunk */
  if (!flags && need <= client.granted[device]) return 0;
  struct sched_msg msg = {.type = SCHED_ALLOC, .device = device, .bytes = need, .held = held,
                          .value = flags};
  int current;
  size_t free_bytes, total;
  if (SHIM_REAL(cudaGetDevice)(&current) == cudaSuccess && current == device &&
      SHIM_REAL(cudaMemGetInfo)(&free_bytes, &total) == cudaSuccess) {
    msg.value |= SCHED_ALLOC_FREE_KNOWN;
    msg.device_free = free_bytes;
  }
  SHIM_REAL(cudaGetLastError)();
  pthread_mutex_lock(&client.reply_lock);
  client.reply_ready = false;
  pthread_mutex_unlock(&client.reply_lock);
  unsigned generation = client.generation;
  if (send_msg(msg) != 0) return 2; /* cudawd is gone: the thread notices and warns */
  int status = wait_answer(need, device);
  if (client.generation != generation && atomic_load(&client.connected)) {
    /* The answer came from (or for the loss of) a cudawd that has gone since: ask the new one,
     * which knows what we hold from our hello. */
    return ask(device, size, flags);
  }
  if (status == 0) {
    client.granted[device] = need;
    client.reported[device] = held;
    lease_granted = true;
    return 0;
  }
  if (status == -ENOMEM) {
    shim_info("sched: %llu bytes on device %d can never fit in what cudawd hands out",
              (unsigned long long)need, device);
    return -ENOMEM;
  }
  if (status == -ENOTCONN) return 2; /* lost(): it said we run unshared */
  /* Any other answer (cudawd does not schedule this device: -ENODEV) is no grant: say so. */
  shim_warn("sched: cudawd did not grant %llu bytes on device %d (%s): allocating UNSCHEDULED",
            (unsigned long long)need, device, strerror(-status));
  return 1;
}

int shim_sched_admit(int device, uint64_t size)
{
  if (!client.sharing || device < 0 || device >= SCHED_MAX_DEVICES) return 0;
  pthread_mutex_lock(&client.lease_lock);
  holds_lease = true;
  lease_granted = false;
  client.admitting = true;
  if (!atomic_load(&client.connected)) return 0;
  if (!client.described[device]) learn_device(device);
  int rc = ask(device, size, 0);
  if (rc > 0) return 0;
  if (rc != 0) {
    holds_lease = false;
    client.admitting = false;
    pthread_mutex_unlock(&client.lease_lock);
  }
  return rc;
}

int shim_sched_retry(int device, uint64_t size, int attempt)
{
  /* Bounded in time too: each attempt may wait seconds for cudawd's answer (a program that can
   * never fit, with memory outside the books in the way, is let try once per 2 s). */
  static _Thread_local struct timespec first;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (attempt == 0) first = now;
  if (!holds_lease || attempt >= SHIM_SCHED_RETRIES ||
      now.tv_sec - first.tv_sec >= SHIM_SCHED_RETRY_SECONDS)
    return -ENOMEM;
  SHIM_REAL(cudaGetLastError)(); /* the failed attempt's error is not the program's */
  if (!atomic_load(&client.connected)) {
    /* cudawd went away (killed, restarted): while a new one may come and make room, try the
     * allocation again every 100 ms and look for it, rather than fail the program. */
    if (!client.ever_joined && access(client.path, F_OK) != 0) return -ENOMEM; /* no cudawd */
    if (attempt == 0)
      shim_warn("sched: an allocation of %llu bytes on device %d failed while no cudawd "
                "schedules us: waiting for one (up to %d s)", (unsigned long long)size, device,
                SHIM_SCHED_RETRIES / 10);
    usleep(100000);
    if (join() != 0) return 0; /* memory may have freed meanwhile: the caller tries again */
    shim_info("sched: joined cudawd on %s again", client.path);
  } else if (attempt > 0) {
    usleep(100000); /* cudawd granted, yet it still failed: give frees time */
  }
  if (attempt == 0)
    shim_info("sched: a granted allocation of %llu bytes on device %d failed: asking cudawd "
              "to make room", (unsigned long long)size, device);
  if (!client.described[device]) learn_device(device); /* admitted while no cudawd answered */
  int rc = ask(device, size, SCHED_ALLOC_FAILED);
  return rc == 0 || rc == 2 ? 0 : -ENOMEM; /* 2: cudawd went away: wait for the next one */
}

void shim_sched_failed(int device, uint64_t size, int rc)
{
  if (!client.sharing || device < 0 || device >= SCHED_MAX_DEVICES) return;
  if (!atomic_load(&client.connected)) return;
  shim_warn("sched: an allocation of %llu bytes on device %d failed (%s) while sharing: the "
            "program gets the error", (unsigned long long)size, device, strerror(-rc));
  send_msg((struct sched_msg){.type = SCHED_FAILED, .device = device, .bytes = size,
                              .status = rc});
}

void shim_sched_allocated(int device)
{
  if (!holds_lease) return;
  if (atomic_load(&client.connected) && device >= 0 && device < SCHED_MAX_DEVICES &&
      client.described[device]) {
    uint64_t held = held_bytes(device);
    double made = lease_granted ? seconds_now() - answered_at : 0;
    if (made > SLOW_GRANT_SECONDS)
      shim_debug("sched: the allocation cudawd granted was made %.3f s after its answer (%.3f s "
                 "of it back through the gate)", made, gate_seconds);
    /* After a grant cudawd counts it in flight until told what was allocated. */
    if (held > client.granted[device] || lease_granted) {
      if (held > client.granted[device]) client.granted[device] = held;
      send_msg((struct sched_msg){.type = SCHED_USAGE, .device = device, .bytes = held});
    }
    client.reported[device] = held;
  }
  holds_lease = false;
  client.admitting = false;
  pthread_mutex_unlock(&client.lease_lock);
}
