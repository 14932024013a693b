/* Description: a buggy or hostile client cannot break sharing (issues 24, 31). A fuzzer with a
 * fixed seed, bounded, with a real job beside it: 3,000 connections to
 * cudawd, up to 48 at once, send malformed, out-of-range and out-of-turn messages: datagrams of
 * the wrong size or version, second hellos, results nobody asked for, sizes of 2^64, device
 * ordinals out of range, keys with control characters or without a terminator, UUIDs of no GPU
 * of this machine (cudawd's --gpu-list is a fake driver directory naming the emulated device),
 * the real device's key with a junk size, status requests never read. Then:
 *   - the real job that ran beside the junk (32 MiB) finished with its data verified;
 *   - cudawd still answers status, and answered it all along;
 *   - no program is left and no device slot is held (users 0) once the junk clients left;
 *   - cudaw-ctl sched --json is valid JSON and the table and the log hold no control characters;
 *   - two real jobs that do not fit together still run scheduled: they join, hold memory on the
 *     emulated device's slot, are swapped in turns (swaps > 0), finish with their data verified
 *     and never say they allocate unscheduled.
 *   usage: sched_test_abuse CUDAWD CUDAW_CTL JOB */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client.h"

#define MIB (1024ull * 1024)
#define CONNECTIONS 3000
#define AT_ONCE 48
/* The emulated device's UUID ("cudaw-emu-device") as its hex digits and as the driver says it. */
#define EMU_KEY "63756461772d656d752d646576696365"
#define EMU_UUID "GPU-63756461-772d-656d-752d-646576696365"

static char run_dir[64];
static const char *ctl_path;

static bool snapshot(struct sched_snapshot *out) { return client_snapshot(run_dir, out); }

/* One junk message of kind k (the menu below), sent as it is. */
static void send_junk(int fd, unsigned k, unsigned r)
{
  struct sched_msg m = {.version = SCHED_PROTO_VERSION, .pid = (int32_t)r};
  char raw[sizeof m + 64];
  memset(raw, 'x', sizeof raw);
  switch (k) {
  case 0: send(fd, raw, 3, MSG_NOSIGNAL | MSG_DONTWAIT); return;          /* too short */
  case 1: send(fd, raw, sizeof raw, MSG_NOSIGNAL | MSG_DONTWAIT); return; /* too long */
  case 2: m.version = 99; m.type = SCHED_HELLO; break;                    /* another version */
  case 3: m.type = SCHED_HELLO; m.value = (int32_t)r; break;             /* hello, maybe junk */
  case 4: m.type = SCHED_HELLO; break;                                    /* a plain hello */
  case 5: /* a key with control characters */
    m.type = SCHED_DEVICE;
    for (int i = 0; i < 32; i++) m.key[i] = "\x1b[2J\x1b]0;owned\x07\n\r\t\"\\\x7f\xff"[i % 19];
    m.bytes = 1ull << 30;
    break;
  case 6: m.type = SCHED_DEVICE; memset(m.key, 'a', sizeof m.key); m.bytes = 1; break; /* no NUL */
  case 7: /* a well-formed UUID of no GPU of this machine */
    m.type = SCHED_DEVICE;
    snprintf(m.key, sizeof m.key, "%08x%08x%08x%08x", r, r * 7u, r * 13u, r * 31u);
    m.bytes = 80ull << 30;
    m.device = (int32_t)(r % SCHED_MAX_DEVICES);
    break;
  case 8: /* the real device with a junk size */
    m.type = SCHED_DEVICE;
    snprintf(m.key, sizeof m.key, "%s", EMU_KEY);
    m.bytes = (r & 1) ? UINT64_MAX : (uint64_t)(r % 4096 + 1) << 20;
    m.device = (int32_t)(r % 3);
    break;
  case 9: m.type = SCHED_DEVICE; m.device = (int32_t)(r | 0x80000000u); snprintf(m.key, sizeof m.key, "%s", EMU_KEY); break;
  case 10: m.type = SCHED_ALLOC; m.device = (int32_t)(r % 3); m.bytes = UINT64_MAX; m.held = UINT64_MAX - r; m.value = -1; m.device_free = UINT64_MAX; break;
  case 11: m.type = SCHED_ALLOC; m.device = (int32_t)(r % 3); m.bytes = (uint64_t)r << 20; m.held = (uint64_t)r << 21; m.value = SCHED_ALLOC_FREE_KNOWN; m.device_free = 0; break;
  case 12: m.type = SCHED_USAGE; m.device = (int32_t)(r % 3); m.bytes = UINT64_MAX / (r | 1); break;
  case 13: m.type = SCHED_DONE; m.value = (int32_t)(r % 3); m.status = (int32_t)r; m.bytes = UINT64_MAX; m.seconds = -1e300; break;
  case 14: m.type = SCHED_FAILED; m.device = (int32_t)r; m.status = (int32_t)r; m.bytes = UINT64_MAX; break;
  case 15: m.type = SCHED_STATUS; break; /* never read */
  case 16: m.type = SCHED_PRIORITY; m.pid = (int32_t)r; m.value = (int32_t)(r * 2654435761u); break;
  case 17: m.type = 1000 + r; break; /* unknown type */
  default: m.type = SCHED_GRANT; m.status = -ENOMEM; break; /* a daemon's message, from a client */
  }
  send(fd, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* No byte below 0x20 but newlines and tabs that separate lines and columns, none above 0x7e. */
static void check_plain(const char *path, bool tabs)
{
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL, "cannot read %s", path);
  long offset = 0;
  for (int c; (c = fgetc(f)) != EOF; offset++)
    CHECK(c == '\n' || (tabs && c == '\t') || (c >= 0x20 && c < 0x7f), "%s: byte %#x at offset "
          "%ld: a peer's text printed raw", path, c, offset);
  fclose(f);
}

/* The JSON cudaw-ctl printed parses: python3's json module when present; always a minimal check
 * here (strings closed, brackets balanced, no control characters). */
static void check_json(const char *path)
{
  check_plain(path, false);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  int depth = 0, c;
  bool in_string = false, escaped = false;
  while ((c = fgetc(f)) != EOF) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      depth++;
    } else if (c == '}' || c == ']') {
      CHECK(--depth >= 0, "%s: unbalanced brackets", path);
    }
  }
  fclose(f);
  CHECK(!in_string && depth == 0, "%s: an open string or bracket at the end", path);
  if (system("command -v python3 >/dev/null 2>&1") == 0) {
    char command[512];
    snprintf(command, sizeof command,
             "python3 -c 'import json,sys; json.load(open(sys.argv[1]))' '%s'", path);
    CHECK(system(command) == 0, "%s is not valid JSON (python3)", path);
  }
}

static int run_ctl_to(const char *path, const char *a, const char *b)
{
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 1) < 0) _exit(127);
    execl(ctl_path, ctl_path, a, b, (char *)NULL);
    _exit(127);
  }
  int status;
  CHECK(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void end_children(void)
{
  signal(SIGTERM, SIG_IGN);
  kill(0, SIGTERM);
}

int main(int argc, char **argv)
{
  setpgid(0, 0);
  atexit(end_children);
  signal(SIGPIPE, SIG_IGN);
  CHECK(argc == 4, "usage: %s CUDAWD CUDAW_CTL JOB", argv[0]);
  ctl_path = argv[2];
  snprintf(run_dir, sizeof run_dir, "/tmp/cudaw-abuse-XXXXXX");
  CHECK(mkdtemp(run_dir) != NULL, "mkdtemp: %s", strerror(errno));
  setenv("CUDAW_RUN_DIR", run_dir, 1);
  setenv("CUDAW_SHARE", "1", 1);
  /* A driver directory that names the emulated device, as /proc/driver/nvidia/gpus would. */
  char gpus[128], path[256], log[128];
  snprintf(gpus, sizeof gpus, "%s/gpus", run_dir);
  snprintf(path, sizeof path, "%s/0000:17:00.0", gpus);
  CHECK(mkdir(gpus, 0700) == 0 && mkdir(path, 0700) == 0);
  snprintf(path, sizeof path, "%s/0000:17:00.0/information", gpus);
  FILE *info = fopen(path, "w");
  CHECK(info != NULL);
  fprintf(info, "Model: \t\t cudaw emulated device\nIRQ:   \t\t 0\nGPU UUID: \t %s\n", EMU_UUID);
  fclose(info);
  snprintf(log, sizeof log, "%s/cudawd.log", run_dir);
  const char *dargv[] = {argv[1], "--device-memory", "96M", "--quantum", "0.5", "--min-run",
                         "0.2", "--swap-timeout", "5", "--gpu-list", gpus, NULL};
  pid_t daemon = client_spawn(dargv, log, false);
  struct sched_snapshot s;
  bool up = false;
  for (int i = 0; i < 200 && !up; i++) {
    up = snapshot(&s);
    if (!up) client_sleep_ms(25);
  }
  CHECK(up, "cudawd did not answer on %s", run_dir);

  /* A real job runs beside the junk (32 MiB, fits): it must finish with its data verified. */
  char beside_log[160];
  snprintf(beside_log, sizeof beside_log, "%s/beside.log", run_dir);
  const char *bargv[] = {argv[3], "33554432", "600", NULL};
  pid_t beside = client_spawn(bargv, beside_log, false);

  /* The junk: 3,000 connections, AT_ONCE at a time, 1-8 messages each; most close at once, the
   * others stay until the end of their batch. */
  srand(24);
  int open_fds[AT_ONCE], open_count = 0, refused = 0, statuses = 0;
  for (int c = 0; c < CONNECTIONS; c++) {
    int fd = client_connect(run_dir);
    if (fd < 0) {
      refused++;
      client_sleep_ms(5);
      continue;
    }
    int messages = 1 + rand() % 8;
    for (int i = 0; i < messages; i++) send_junk(fd, (unsigned)rand() % 19, (unsigned)rand());
    if (rand() % 4 == 0) open_fds[open_count++] = fd;
    else close(fd);
    if (open_count == AT_ONCE || c == CONNECTIONS - 1) {
      client_sleep_ms(20);
      while (open_count) close(open_fds[--open_count]);
    }
    if (c % 500 == 499) {
      CHECK(snapshot(&s), "cudawd did not answer status after %d junk connections", c + 1);
      statuses++;
    }
  }
  int status;
  CHECK(waitpid(daemon, &status, WNOHANG) == 0, "cudawd died under the junk (status %#x)", status);
  printf("%d junk connections (%d refused at connect), status answered %d times meanwhile\n",
         CONNECTIONS, refused, statuses);
  CHECK(waitpid(beside, &status, 0) == beside && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "the job beside the junk failed (status %#x, log %s)", status, beside_log);
  CHECK(!client_file_has(beside_log, "UNSCHEDULED") && !client_file_has(beside_log, "unshared"),
        "the job beside the junk ran unscheduled (%s)", beside_log);
  printf("the job beside the junk finished verified\n");

  /* Once the junk left: no program, no slot held. */
  bool clean = false;
  for (int i = 0; i < 200 && !clean; i++) {
    CHECK(snapshot(&s), "cudawd does not answer status after the junk");
    clean = true;
    for (int k = 0; k < s.programs; k++) clean &= s.program[k].state == SCHED_EXITED;
    for (int k = 0; k < s.devices; k++) clean &= s.device[k].users == 0 && s.device[k].resident == 0;
    if (!clean) client_sleep_ms(25);
  }
  CHECK(clean, "junk programs or device slots are still held after the junk clients left");
  char out[160];
  snprintf(out, sizeof out, "%s/sched.json", run_dir);
  CHECK_EQ(run_ctl_to(out, "--json", "sched"), 0);
  check_json(out);
  snprintf(out, sizeof out, "%s/sched.txt", run_dir);
  CHECK_EQ(run_ctl_to(out, "sched", NULL), 0);
  check_plain(out, false);

  /* Two real jobs of 72 MiB in 96 MiB: they must be scheduled (turns), not run unscheduled. */
  char job_log[2][160];
  pid_t jobs[2];
  for (int i = 0; i < 2; i++) {
    snprintf(job_log[i], sizeof job_log[i], "%s/job%d.log", run_dir, i);
    const char *jargv[] = {argv[3], "75497472", "20", NULL};
    jobs[i] = client_spawn(jargv, job_log[i], false);
  }
  bool seen_on_device = false;
  for (int done = 0; done < 2;) {
    for (int i = 0; i < 2; i++)
      if (jobs[i] && waitpid(jobs[i], &status, WNOHANG) == jobs[i]) {
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "job %d failed (status %#x, log %s)",
              i, status, job_log[i]);
        jobs[i] = 0;
        done++;
      }
    if (snapshot(&s))
      for (int k = 0; k < s.devices; k++)
        seen_on_device |= !strncmp(s.device[k].key, EMU_KEY, 32) && s.device[k].users > 0 &&
                          s.device[k].resident >= 72 * MIB && s.device[k].capacity == 96 * MIB;
    client_sleep_ms(50);
  }
  CHECK(snapshot(&s));
  uint64_t swaps = 0;
  for (int k = 0; k < s.devices; k++)
    if (!strncmp(s.device[k].key, EMU_KEY, 32)) swaps += s.device[k].swaps;
  CHECK(seen_on_device, "the real jobs never held memory on the emulated device's slot");
  CHECK(swaps > 0, "the real jobs never took turns: they ran unscheduled");
  for (int i = 0; i < 2; i++)
    CHECK(!client_file_has(job_log[i], "UNSCHEDULED") && !client_file_has(job_log[i], "unshared"),
          "job %d ran unscheduled after the junk (%s)", i, job_log[i]);
  CHECK(waitpid(daemon, &status, WNOHANG) == 0, "cudawd died");
  kill(daemon, SIGTERM);
  waitpid(daemon, NULL, 0);
  check_plain(log, false);
  CHECK(client_file_has(log, "not the UUID of a GPU of this machine"),
        "cudawd never refused a UUID that is no GPU of this machine");
  printf("after the junk: status, JSON and the table clean, slots free; two real jobs shared "
         "the device with %llu swaps\n", (unsigned long long)swaps);
  char command[128];
  snprintf(command, sizeof command, "rm -rf '%s'", run_dir);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", run_dir);
  printf("ok\n");
  return 0;
}
