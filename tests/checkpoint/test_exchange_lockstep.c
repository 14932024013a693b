/* Description: an exchange between two processes paced through the shared page
 * (exchange_page.h): A's releasing checkpoint and B's creating resume, each a process with its
 * own fake host over one fake device in shared memory. Both finish byte-exact and the device
 * never holds more than A's memory plus the spare. Then, with each pace check slowed down so
 * that the middle is reached surely: A killed -9 midway (B goes on without the limit and ends
 * byte-exact), B killed -9 midway (A's checkpoint ends and A resumes byte-exact), the page's
 * creator (cudawd's part) unmapping and closing it midway (nothing changes for the two), and A's
 * copy failing midway (B stops at its next step instead of creating memory A still holds; both
 * then resume byte-exact); a side refused before it began ends as failed. A's host reports
 * less memory available than its image (CUDAW_TEST_MEMINFO): an exchange needs only its window
 * up front. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exchange_page.h"
#include "fake_host.h"
#include "internal.h"
#include "test.h"

#define PIECE (64u << 10)
#define CHUNK (16u << 10)
#define WINDOW (2 * PIECE)
#define SPARE (2 * PIECE)

static const uint64_t a_sizes[] = {1u << 20, 300u << 10, 70000};
static const uint64_t b_sizes[] = {800u << 10, 500u << 10, 12345};
static struct fake_device *device; /* in shared memory */
static uint64_t *exchange_peak;     /* ... the device's peak when A's resume begins */
static _Atomic int *peak_taken;     /* ... set once A has read it */
static char meminfo[] = "/tmp/cudaw-lockstep-meminfo-XXXXXX"; /* A's host, short of memory */

enum stop { NOTHING, KILL_OUT, KILL_IN, DROP_PAGE, FAIL_OUT };

static struct engine *program(struct fake_host *h, uint32_t seed, const uint64_t *sizes) {
  fake_host_init(h, 1);
  h->piece_bytes = PIECE;
  h->device = device;
  h->device_hash = true;
  for (int i = 0; i < 3; i++) fake_host_add_region(h, sizes[i], 0, seed + (uint32_t)i);
  h->gate_closed = true;
  /* No reserve: the images in private memory, whose pages B's resume frees as it goes. */
  struct ckpt_options options = fake_host_options(CHUNK, 2, 2);
  struct engine *e = engine_new(&fake_host_ops, h, &options);
  CHECK(e != NULL && engine_prepare(e) == 0, "engine");
  return e;
}

static void verify(struct fake_host *h, const char *who) {
  uint64_t offset = 0;
  size_t bad = fake_host_verify(h, &offset);
  if (bad) test_fail("%s: region %zu differs at offset %" PRIu64, who, bad - 1, offset);
  CHECK_EQ(h->violations, 0);
}

/* A child: B swaps itself out first (so that it starts with its image on the host), then both
 * wait for `go`, run their side and check their data. Exit 0 when every byte is back. */
static void child(bool out, int page_fd, int ready, int go, uint64_t delay_ns, enum stop stop) {
  struct fake_host h;
  struct engine *e = program(&h, out ? 100 : 500, out ? a_sizes : b_sizes);
  if (out && stop == FAIL_OUT) h.copy_fail_after = 30; /* of ~90 chunks */
  struct engine_stats stats;
  char reason[512] = "";
  if (!out) {
    CHECK(engine_save(e, &stats, reason, sizeof reason) == 0, "B's checkpoint: %s", reason);
    CHECK_EQ(fake_host_ops.release_all(&h), 0);
  }
  CHECK(write(ready, "r", 1) == 1, "ready");
  char byte;
  CHECK(read(go, &byte, 1) == 1, "go");
  struct exchange_page *page;
  CHECK_EQ(exchange_page_map(page_fd, &page), 0);
  struct exchange_side side;
  CHECK_EQ(exchange_side_open(&side, page, out), 0);
  side.delay_ns = delay_ns;
  struct engine_pace pace;
  exchange_side_pace(&side, &pace);
  if (out) setenv("CUDAW_TEST_MEMINFO", meminfo, 1);
  int rc = out ? engine_save_releasing(e, &pace, &stats, reason, sizeof reason)
               : engine_restore_creating(e, &pace, &stats, reason, sizeof reason);
  if (out && rc == 0) rc = fake_host_ops.release_all(&h); /* before B may go unlimited */
  exchange_side_close(&side, rc != 0);
  if (stop == FAIL_OUT) { /* A fails midway; B stops for it, keeping what it created */
    CHECK(rc != 0, "%s should have failed", out ? "A's checkpoint" : "B's resume");
    if (!out) {
      CHECK(rc == -EPIPE && strstr(reason, "other program's checkpoint failed"),
            "B stops for A's failure: %d %s", rc, reason);
      while (!atomic_load(peak_taken)) usleep(200); /* B's own resume after A's figure */
    }
  } else {
    CHECK(rc == 0, "%s: %s", out ? "A's releasing checkpoint" : "B's creating resume", reason);
  }
  if (out) { /* A's turn comes after B's copy */
    CHECK_EQ(exchange_side_wait_peer(&side, 20000), 0);
    *exchange_peak = device->peak;
    atomic_store(peak_taken, 1);
    CHECK_EQ(fake_host_ops.recreate_all(&h, &(uint64_t){0}), 0);
    CHECK(engine_restore(e, &stats, reason, sizeof reason) == 0, "A's resume: %s", reason);
  } else {
    CHECK_EQ(fake_host_ops.recreate_all(&h, &(uint64_t){0}), 0);
    if (stop == FAIL_OUT) /* the rest of its image, the way a later resume brings it */
      CHECK(engine_restore(e, &stats, reason, sizeof reason) == 0, "B's resume: %s", reason);
  }
  verify(&h, out ? "A" : "B");
  engine_free(e);
  fake_host_free(&h);
  exchange_page_unmap(page);
  exit(0);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static void run(enum stop stop) {
  static const char *names[] = {"undisturbed", "A killed", "B killed", "page dropped",
                                "A failed"};
  *device = (struct fake_device){0};
  *exchange_peak = 0;
  atomic_store(peak_taken, 0);
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutex_init(&device->lock, &attr);
  int fd;
  CHECK_EQ(exchange_page_create(0, 0, WINDOW, SPARE, &fd), 0);
  int go[2], ready[2];
  CHECK_EQ(pipe(go), 0);
  CHECK_EQ(pipe(ready), 0);
  uint64_t delay = stop == NOTHING ? 0 : 3000000; /* 3 ms a chunk: ~0.3 s each side */
  fflush(stdout); /* or the children print it again */
  pid_t a = fork();
  if (a == 0) child(true, fd, ready[1], go[0], delay, stop);
  pid_t b = fork();
  if (b == 0) child(false, fd, ready[1], go[0], delay, stop);
  struct exchange_page *page;
  CHECK_EQ(exchange_page_map(fd, &page), 0);
  page->out_pid = a;
  page->in_pid = b;
  /* Both ready: B swapped out, A's memory alone on the device. */
  char two[2];
  CHECK(read(ready[0], two, 1) == 1 && read(ready[0], two + 1, 1) == 1, "both ready");
  double deadline = now() + 20;
  CHECK_EQ(device->used, 1425776);
  device->peak = device->used;
  CHECK(write(go[1], "gg", 2) == 2, "go");
  if (stop != NOTHING) { /* the middle: both sides have moved, neither has finished */
    while ((atomic_load(&page->released) < 4 * PIECE || atomic_load(&page->consumed) < 4 * PIECE) &&
           now() < deadline)
      usleep(200);
    CHECK(!atomic_load(&page->out_done) && !atomic_load(&page->in_done), "reached the middle");
    if (stop == KILL_OUT) kill(a, SIGKILL);
    if (stop == KILL_IN) kill(b, SIGKILL);
  }
  if (stop == DROP_PAGE) {
    exchange_page_unmap(page);
    page = NULL;
    close(fd);
    fd = -1;
  }
  int status_a = 0, status_b = 0;
  bool a_ended = false, b_ended = false;
  while (!(a_ended && b_ended) && now() < deadline) {
    a_ended = a_ended || waitpid(a, &status_a, WNOHANG) == a;
    b_ended = b_ended || waitpid(b, &status_b, WNOHANG) == b;
    usleep(1000);
  }
  if (!a_ended || !b_ended) {
    kill(a, SIGKILL);
    kill(b, SIGKILL);
    test_fail("%s: %s did not finish within 20 s", names[stop], a_ended ? "B" : "A");
  }
  bool a_ok = WIFEXITED(status_a) && WEXITSTATUS(status_a) == 0;
  bool b_ok = WIFEXITED(status_b) && WEXITSTATUS(status_b) == 0;
  printf("%s: A %s, B %s, device peak during the exchange %" PRIu64 "\n", names[stop],
         stop == KILL_OUT ? "killed" : a_ok ? "ok" : "FAILED",
         stop == KILL_IN ? "killed" : b_ok ? "ok" : "FAILED", *exchange_peak);
  if (stop != KILL_OUT) CHECK(a_ok, "A survives with all its data");
  if (stop != KILL_IN) CHECK(b_ok, "B survives with all its data");
  /* Until A's resume, after B's copy; a killed peer's memory is the kernel's at once. */
  if (stop == NOTHING || stop == DROP_PAGE || stop == FAIL_OUT)
    CHECK(*exchange_peak <= 1425776 + SPARE, "the device held %" PRIu64, *exchange_peak);
  exchange_page_unmap(page);
  if (fd >= 0) close(fd);
  close(go[0]);
  close(go[1]);
  close(ready[0]);
  close(ready[1]);
}

/* A side refused before it began (its process exiting): ended as failed, so that the peer stops
 * (FAIL_OUT shows how); a page naming another pid for that side is left alone. */
static void refuse(void) {
  int fd;
  struct exchange_page *page;
  CHECK_EQ(exchange_page_create(getpid() + 1, getpid(), WINDOW, SPARE, &fd), 0);
  CHECK_EQ(exchange_page_map(fd, &page), 0);
  exchange_side_refuse(page, true); /* out is another pid */
  CHECK(!atomic_load(&page->out_done) && !atomic_load(&page->out_failed), "another's side ended");
  exchange_side_refuse(page, false);
  CHECK(atomic_load(&page->in_done) && atomic_load(&page->in_failed), "our side not ended");
  exchange_page_unmap(page);
  close(fd);
  printf("refused: our side ended as failed, another's left alone\n");
}

int main(void) {
  char *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(shared != MAP_FAILED, "shared device");
  device = (struct fake_device *)shared;
  exchange_peak = (uint64_t *)(shared + 2048);
  peak_taken = (_Atomic int *)(shared + 2056);
  /* Less available than A's image (1425776 bytes), more than the window. */
  int mfd = mkstemp(meminfo);
  CHECK(mfd >= 0 && dprintf(mfd, "MemTotal: 1048576 kB\nMemAvailable: 1024 kB\n") > 0, "meminfo");
  close(mfd);
  run(NOTHING);
  run(KILL_OUT);
  run(KILL_IN);
  run(DROP_PAGE);
  run(FAIL_OUT);
  refuse();
  unlink(meminfo);
  printf("exchange lockstep: ok\n");
  return 0;
}
