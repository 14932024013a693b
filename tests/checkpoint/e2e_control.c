/* Description: controlling a program under cudaw (emulated device) end to end, one mode per run:
 *   shortfall: while paused another allocator takes the device memory; resume fails, says how
 *              much is missing, stays paused; once the memory is free again a retry succeeds
 *              and every byte is back. The emulated device is per process, so "another
 *              process" is this process calling the emulated runtime directly, past cudaw.
 *   timeout:   a thread stuck inside a counted API call (a host function that waits) makes a
 *              checkpoint give up after CUDAW_PAUSE_TIMEOUT; the program keeps running, and
 *              once the call returns a checkpoint succeeds.
 *   commands:  every wrong command (wrong state, unknown, empty, overlong, unterminated), two
 *              controllers at once, cudaw-ctl's exit codes, and another uid refused.
 *   other:     managed memory and a CUDA array (memory vmem does not hold): a checkpoint moves
 *              the managed memory to the host and keeps the array; status and cudaw-ctl say so;
 *              both hold their data after the resume.
 *   reset:     cudaDeviceReset in the middle of a program that was checkpointed before: the
 *              old allocations are gone (freeing one fails as it would natively), the device's
 *              memory is all free again, new allocations work, and a checkpoint/resume after
 *              the reset keeps every byte (cudaw started over: new range, new staging).
 * usage: e2e_control <cudaw-ctl> shortfall|timeout|commands|other|reset */
#include "e2e_common.h"

#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <stdatomic.h>

#define MIB ((size_t)1 << 20)

static const char *ctl;

/* A few buffers with known contents, checked after every resume. */
static struct e2e_data data = {4, {0}, {16 * MIB, 16 * MIB, 3 * MIB + 17, 4096}};

static void make_data(void) { e2e_make_data(&data); }
static void check_data(const char *when) { e2e_check_data(&data, when); }

static void expect_reply(const char *command, int ok, const char *state, const char *fragment)
{
  char reply[4096];
  e2e_ask(command, reply, sizeof reply);
  CHECK(e2e_reply_ok(reply) == ok && e2e_reply_state(reply, state) &&
            (!fragment || strstr(reply, fragment)),
        "'%s': expected ok=%d, state %s%s%s; got %s", command, ok, state,
        fragment ? ", containing " : "", fragment ? fragment : "", reply);
}

static void expect_ctl(const char *command, long pid, int code, const char *fragment)
{
  char out[4096];
  int got = e2e_run_ctl(ctl, command, pid, out, sizeof out);
  CHECK(got == code && (!fragment || strstr(out, fragment)),
        "cudaw-ctl %s %ld: expected exit %d%s%s; got %d: %s", command, pid, code,
        fragment ? " and " : "", fragment ? fragment : "", got, out);
}

/* ---- shortfall ---- */

static void run_shortfall(void)
{
  make_data();
  /* The context's stack reservation goes with the memory and comes back at its limit. */
  CUDA_OK(cudaDeviceSetLimit(cudaLimitStackSize, 2048));
  size_t free_before, total;
  e2e_emu_mem_info(&free_before, &total);
  expect_reply("checkpoint", 1, "paused", NULL);
  size_t free_paused;
  e2e_emu_mem_info(&free_paused, &total);
  CHECK(free_paused == total, "%zu bytes still held while paused (the context's stack "
        "reservation included)", total - free_paused);

  /* Another allocator takes all but 8 MiB: far less than the ~36 MiB the program had. */
  cudaError_t (*emu_malloc)(void **, size_t) =
      (cudaError_t(*)(void **, size_t))e2e_emu_symbol("cudaMalloc");
  cudaError_t (*emu_free)(void *) = (cudaError_t(*)(void *))e2e_emu_symbol("cudaFree");
  void *hog = NULL;
  CHECK(emu_malloc(&hog, free_paused - 8 * MIB) == cudaSuccess);

  for (int attempt = 0; attempt < 3; attempt++) {
    char reply[4096];
    e2e_ask("resume", reply, sizeof reply);
    CHECK(!e2e_reply_ok(reply) && e2e_reply_state(reply, "paused") && strstr(reply, " short (") &&
              !strstr(reply, "\"shortfall\":0"),
          "resume without memory: %s", reply);
    e2e_ask("status", reply, sizeof reply);
    CHECK(e2e_reply_state(reply, "paused") && strstr(reply, "\"last_ok\":false"), "%s", reply);
  }
  expect_ctl("resume", (long)getpid(), 1, "still paused, retry when memory is free");
  expect_ctl("status", (long)getpid(), 0, "paused");

  CHECK(emu_free(hog) == cudaSuccess);
  expect_ctl("resume", (long)getpid(), 0, "running: restored and verified");
  check_data("after the retried resume");
  size_t stack = 0;
  CUDA_OK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
  CHECK(stack == 2048, "stack limit after the resume: %zu, not the program's 2048", stack);
  size_t free_resumed;
  e2e_emu_mem_info(&free_resumed, &total);
  /* Exact, except that under translate the resume maps memory at the old addresses in whole
   * 2 MiB granules (vmem's homes) where cudaMalloc had charged pages. */
  const char *policy = getenv("CUDAW_VMEM");
  size_t slack = policy && strcmp(policy, "translate") == 0 ? 4 * MIB : 0;
  CHECK(free_resumed <= free_before && free_resumed + slack >= free_before,
        "device memory in use after the resume differs from before the checkpoint: %zu free, "
        "was %zu", free_resumed, free_before);
  /* And the cycle works again afterwards. */
  expect_reply("checkpoint", 1, "paused", NULL);
  expect_reply("resume", 1, "running", NULL);
  check_data("after another cycle");
  printf("shortfall: resume failed 4 times while the memory was taken, succeeded once it was "
         "free; data intact; ok\n");
}

/* ---- other: managed memory and arrays ---- */

static void run_other(void)
{
  const size_t managed_bytes = 3 * MIB + 123;
  unsigned char *managed = NULL;
  CUDA_OK(cudaMallocManaged((void **)&managed, managed_bytes, cudaMemAttachGlobal));
  for (size_t i = 0; i < managed_bytes; i++) managed[i] = (unsigned char)(i * 7 + 3);
  struct cudaChannelFormatDesc format = {32, 0, 0, 0, cudaChannelFormatKindFloat};
  cudaArray_t array = NULL;
  CUDA_OK(cudaMallocArray(&array, &format, 256, 64, 0));
  expect_reply("checkpoint", 1, "paused", NULL);
  char reply[4096];
  e2e_ask("status", reply, sizeof reply);
  char expected[160];
  snprintf(expected, sizeof expected,
           "\"managed_moved\":1,\"managed_moved_bytes\":%zu,\"arrays_held\":1,"
           "\"array_held_bytes\":%d", managed_bytes, 256 * 64 * 4);
  CHECK(strstr(reply, expected), "status while paused: %s (expected %s)", reply, expected);
  expect_ctl("status", (long)getpid(), 0, "still on the device: 1 CUDA arrays (64.00 KiB)");
  expect_ctl("status", (long)getpid(), 0, "managed memory moved to host: 3.00 MiB");
  expect_reply("resume", 1, "running", NULL);
  e2e_ask("status", reply, sizeof reply);
  CHECK(strstr(reply, "\"managed_moved\":0,\"managed_moved_bytes\":0,\"arrays_held\":0"),
        "status after resume: %s", reply);
  for (size_t i = 0; i < managed_bytes; i++)
    CHECK(managed[i] == (unsigned char)(i * 7 + 3), "managed byte %zu changed", i);
  CUDA_OK(cudaFreeArray(array));
  CUDA_OK(cudaFree(managed));
  printf("other: managed memory moved and back, array kept and reported; ok\n");
}

/* ---- reset ---- */

static void run_reset(void)
{
  size_t free0, total;
  e2e_emu_mem_info(&free0, &total);
  make_data();
  expect_reply("checkpoint", 1, "paused", NULL);
  expect_reply("resume", 1, "running", NULL);
  check_data("before the reset");
  unsigned char *old = data.device[0];

  CUDA_OK(cudaDeviceReset());
  size_t free_after;
  e2e_emu_mem_info(&free_after, &total);
  CHECK(free_after == free0, "after the reset the device holds %zu bytes of cudaw's",
        free0 - free_after);
  CHECK(cudaFree(old) == cudaErrorInvalidValue, "freeing an allocation the reset destroyed");
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);

  make_data(); /* vmem starts over */
  check_data("after the reset");
  expect_reply("checkpoint", 1, "paused", NULL);
  e2e_emu_mem_info(&free_after, &total);
  CHECK(free_after == total, "paused after the reset, yet %zu bytes held", total - free_after);
  expect_reply("resume", 1, "running", NULL);
  check_data("after a checkpoint that followed the reset");
  for (int b = 0; b < data.count; b++) CUDA_OK(cudaFree(data.device[b]));
  printf("reset: cudaw's memory given back and started over; checkpoint after it ok\n");
}

/* ---- timeout ---- */

static atomic_int blocker_entered, blocker_release;

static void CUDART_CB blocker(void *arg)
{
  (void)arg;
  atomic_store(&blocker_entered, 1);
  while (!atomic_load(&blocker_release)) e2e_sleep_us(1000);
}

static void *stuck_thread(void *arg)
{
  cudaStream_t stream = arg;
  /* The emulated device runs host functions inside the call: this thread stays in a counted
   * API call until released. */
  CUDA_OK(cudaLaunchHostFunc(stream, blocker, NULL));
  return NULL;
}

static void run_timeout(void)
{
  make_data();
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, stuck_thread, stream) == 0);
  while (!atomic_load(&blocker_entered)) e2e_sleep_us(1000);

  double t0 = e2e_now();
  char reply[4096];
  e2e_ask("checkpoint", reply, sizeof reply);
  double waited = e2e_now() - t0;
  CHECK(!e2e_reply_ok(reply) && e2e_reply_state(reply, "running") &&
            strstr(reply, "CUDAW_PAUSE_TIMEOUT"),
        "checkpoint with a stuck call: %s", reply);
  CHECK(waited >= 0.25 && waited < 10, "gave up after %.3f s (CUDAW_PAUSE_TIMEOUT=300)", waited);
  /* The gate is open again: the program runs on. */
  void *p;
  CUDA_OK(cudaMalloc(&p, 1000));
  CUDA_OK(cudaFree(p));
  check_data("after the abandoned checkpoint");
  expect_ctl("checkpoint", (long)getpid(), 1, "CUDAW_PAUSE_TIMEOUT");

  atomic_store(&blocker_release, 1);
  pthread_join(thread, NULL);
  expect_reply("checkpoint", 1, "paused", NULL);
  expect_reply("resume", 1, "running", NULL);
  check_data("after a checkpoint once the call returned");
  CUDA_OK(cudaStreamDestroy(stream));
  printf("timeout: checkpoint abandoned after %.3f s with a call stuck in flight, program kept "
         "running, later checkpoint fine; ok\n", waited);
}

/* ---- commands ---- */

struct concurrent {
  const char *command;
  char reply[4096];
};

static void *ask_thread(void *arg)
{
  struct concurrent *c = arg;
  e2e_ask(c->command, c->reply, sizeof c->reply);
  return NULL;
}

/* Two controllers at once: exactly one wins, the other is told the state is wrong. */
static void race(const char *command, const char *end_state)
{
  for (int round = 0; round < 2; round++) {
    struct concurrent c[2] = {{command, ""}, {command, ""}};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&threads[i], NULL, ask_thread, &c[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
    int wins = e2e_reply_ok(c[0].reply) + e2e_reply_ok(c[1].reply);
    CHECK(wins == 1, "two '%s' at once: %s / %s", command, c[0].reply, c[1].reply);
    const char *loser = e2e_reply_ok(c[0].reply) ? c[1].reply : c[0].reply;
    CHECK(strstr(loser, "\"error\":\"wrong_state\""), "the second '%s': %s", command, loser);
    CHECK(e2e_wait_state(end_state, 10), "not %s after two '%s'", end_state, command);
    if (round == 0) { /* undo, and race again */
      expect_reply(strcmp(command, "checkpoint") == 0 ? "resume" : "checkpoint", 1,
                   strcmp(command, "checkpoint") == 0 ? "running" : "paused", NULL);
    }
  }
}

static void raw_request(const char *bytes, size_t n, const char *what)
{
  char reply[4096];
  int rc = e2e_ask_raw(bytes, n, reply, sizeof reply);
  CHECK(rc == 0 && strstr(reply, "\"error\":\"bad_request\"") && e2e_reply_state(reply, "running"),
        "%s: rc %d, reply %s", what, rc, reply);
}

static void other_uid(void)
{
  if (geteuid() != 0) {
    printf("commands: another uid: not checked (needs root to switch uid)\n");
    return;
  }
  struct passwd *nobody = getpwnam("nobody");
  uid_t uid = nobody ? nobody->pw_uid : 65534;
  gid_t gid = nobody ? nobody->pw_gid : 65534;
  char pid_text[24];
  snprintf(pid_text, sizeof pid_text, "%ld", (long)getpid());
  pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    if (setgid(gid) != 0 || setuid(uid) != 0) _exit(100);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, 1);
    execl(ctl, ctl, "checkpoint", pid_text, (char *)NULL);
    _exit(101);
  }
  int status;
  CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 5, "cudaw-ctl as uid %u: exit %d, expected 5 (permission)",
        (unsigned)uid, WEXITSTATUS(status));
  expect_reply("status", 1, "running", NULL);
  printf("commands: uid %u refused (cudaw-ctl exit 5), state unchanged\n", (unsigned)uid);
}

static void run_commands(void)
{
  make_data();
  long pid = (long)getpid();
  char reply[4096];
  e2e_ask("status", reply, sizeof reply);
  CHECK(e2e_reply_state(reply, "running") && strstr(reply, "\"held_bytes\":["), "%s", reply);

  expect_reply("resume", 0, "running", "\"error\":\"wrong_state\"");
  expect_ctl("resume", pid, 6, "wrong state: resume: not paused");
  raw_request("bogus\n", 6, "unknown command");
  raw_request("\n", 1, "empty line");
  raw_request("STATUS\n", 7, "wrong case");
  raw_request("status extra\n", 13, "trailing words");
  char long_line[600];
  memset(long_line, 'x', sizeof long_line - 1);
  long_line[sizeof long_line - 1] = '\n';
  raw_request(long_line, sizeof long_line, "overlong line");
  {
    /* No newline, then the controller stops writing: refused, nothing started. */
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    e2e_socket_path(addr.sun_path, sizeof addr.sun_path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0);
    CHECK(send(fd, "checkpoint", 10, 0) == 10 && shutdown(fd, SHUT_WR) == 0);
    ssize_t n = recv(fd, reply, sizeof reply - 1, 0);
    reply[n > 0 ? n : 0] = '\0';
    close(fd);
    CHECK(strstr(reply, "bad_request"), "unterminated request: %s", reply);
  }
  expect_reply("status", 1, "running", NULL);

  expect_ctl("checkpoint", pid, 0, "paused: saved");
  expect_ctl("checkpoint", pid, 6, "already paused");
  expect_reply("checkpoint", 0, "paused", "\"error\":\"wrong_state\"");
  CHECK(e2e_ask_raw("bogus\n", 6, reply, sizeof reply) == 0 && strstr(reply, "bad_request") &&
            e2e_reply_state(reply, "paused"),
        "unknown command while paused: %s", reply);
  expect_ctl("status", pid, 0, "paused");

  race("resume", "running");
  race("checkpoint", "paused");
  expect_reply("resume", 1, "running", NULL);
  check_data("after the races");

  char out[512];
  CHECK(e2e_run_ctl(ctl, "status", 1, out, sizeof out) == 4, "pid 1 is no cudaw process: %s", out);
  CHECK(e2e_run_ctl(ctl, "status", 2147483646, out, sizeof out) == 3, "no such pid: %s", out);
  CHECK(e2e_run_ctl(ctl, "bogus", pid, out, sizeof out) == 2, "unknown command: %s", out);
  CHECK(e2e_run_ctl(ctl, "status", -5, out, sizeof out) == 2, "bad pid: %s", out);
  other_uid();
  check_data("at the end");
  printf("commands: wrong states, bad requests, two controllers at once and cudaw-ctl exit codes "
         "refused cleanly, no state change; ok\n");
}

int main(int argc, char **argv)
{
  CHECK(argc >= 3, "usage: e2e_control <cudaw-ctl> shortfall|timeout|commands");
  ctl = argv[1];
  CUDA_OK(cudaFree(NULL));
  if (strcmp(argv[2], "shortfall") == 0) run_shortfall();
  else if (strcmp(argv[2], "timeout") == 0) run_timeout();
  else if (strcmp(argv[2], "commands") == 0) run_commands();
  else if (strcmp(argv[2], "other") == 0) run_other();
  else if (strcmp(argv[2], "reset") == 0) run_reset();
  else test_fail("unknown mode %s", argv[2]);
  return 0;
}
