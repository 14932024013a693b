/* Description: suspend mode (CUDAW_SUSPEND=release) as Slurm drives it: SIGTSTP checkpoints and
 * releases the device memory, SIGCONT restores it byte for byte; a SIGCONT that arrives while the
 * release still runs (the job was stopped in the middle) resumes once it is done; a pause that
 * cudaw-ctl asked for is not ended by SIGCONT; the program's own handlers are still called and
 * come back at shutdown; a terminal's Ctrl-Z (no SIGSTOP follows it) releases, then stops the
 * process itself, and the shell's SIGCONT brings it back. */
#define _GNU_SOURCE
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_host.h"
#include "test.h"

static struct fake_host host;
static volatile sig_atomic_t program_tstp_calls;

static void program_tstp(int signo) {
  (void)signo;
  program_tstp_calls++;
}

static void check_data(void) {
  uint64_t offset = 0;
  CHECK_EQ(fake_host_verify(&host, &offset), 0);
}

/* The child of the Ctrl-Z case: SIGTSTP as a terminal sends it (si_code SI_KERNEL, which a
 * process may only forge for itself), then running again after the parent's SIGCONT. */
static int ctrl_z_child(void) {
  fake_host_init(&host, 1);
  fake_host_add_region(&host, 2 << 20, 0, 7);
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);
  siginfo_t info;
  memset(&info, 0, sizeof info);
  info.si_signo = SIGTSTP;
  info.si_code = SI_KERNEL;
  CHECK_EQ(syscall(SYS_rt_sigqueueinfo, getpid(), SIGTSTP, &info), 0);
  for (int i = 0; i < 400 && !(host.recreate_calls == 1 && ckpt_state() == CKPT_RUNNING); i++)
    usleep(50000);
  CHECK_EQ(host.release_calls, 1);
  CHECK_EQ(ckpt_state(), CKPT_RUNNING);
  check_data();
  ckpt_shutdown();
  return 0;
}

static void check_ctrl_z(void) {
  pid_t child = fork();
  CHECK(child >= 0, "fork");
  if (child == 0) _exit(ctrl_z_child());
  int status = 0;
  alarm(30);
  CHECK_EQ(waitpid(child, &status, WUNTRACED), child);
  CHECK(WIFSTOPPED(status) && WSTOPSIG(status) == SIGSTOP, "Ctrl-Z stopped the process itself");
  kill(child, SIGCONT);
  CHECK_EQ(waitpid(child, &status, 0), child);
  alarm(0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "running again after SIGCONT, verified");
}

int main(void) {
  char dir[64];
  test_make_run_dir(dir, sizeof dir);
  setenv("CUDAW_SUSPEND", "release", 1);
  setenv("CUDAW_SIGNAL", "none", 1);
  fake_host_init(&host, 1);
  fake_host_add_region(&host, 3 << 20, 0, 5);
  fake_host_add_region(&host, 1 << 20, 0, 6);
  signal(SIGTSTP, program_tstp);
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);

  /* Suspend and resume. */
  kill(getpid(), SIGTSTP);
  CHECK(test_wait_state(CKPT_PAUSED, 10), "paused after SIGTSTP");
  CHECK(host.released, "device memory released");
  CHECK_EQ(program_tstp_calls, 1);
  kill(getpid(), SIGCONT);
  CHECK(test_wait_state(CKPT_RUNNING, 10), "running after SIGCONT");
  CHECK(!host.released, "device memory back");
  check_data();

  /* SIGCONT before the release finished: it finishes, then the program resumes. */
  host.drain_block = true;
  kill(getpid(), SIGTSTP);
  CHECK(fake_host_wait_drain_entered(&host, 10), "checkpoint under way");
  kill(getpid(), SIGCONT);
  usleep(50000);
  CHECK_EQ(ckpt_state(), CKPT_PAUSING);
  fake_host_unblock_drain(&host);
  usleep(100000);
  CHECK(test_wait_state(CKPT_RUNNING, 10), "running once the late release was undone");
  CHECK_EQ(host.release_calls, 2);
  CHECK(!host.released, "device memory back after the late release");
  check_data();

  /* A pause asked for through the API is not ended by SIGCONT, and SIGTSTP leaves it alone. */
  CHECK_EQ(ckpt_request_checkpoint(), 0);
  kill(getpid(), SIGTSTP);
  kill(getpid(), SIGCONT);
  usleep(200000);
  CHECK_EQ(ckpt_state(), CKPT_PAUSED);
  CHECK_EQ(ckpt_request_resume(), 0);
  check_data();
  /* A SIGCONT with no suspend before it (a plain stop and continue) changes nothing. */
  kill(getpid(), SIGCONT);
  usleep(100000);
  CHECK_EQ(ckpt_state(), CKPT_RUNNING);

  ckpt_shutdown();
  struct sigaction now;
  sigaction(SIGTSTP, NULL, &now);
  CHECK(now.sa_handler == program_tstp, "the program's SIGTSTP handler is back");
  sigaction(SIGCONT, NULL, &now);
  CHECK(now.sa_handler == SIG_DFL, "SIGCONT back to its default");
  CHECK_EQ(host.violations, 0);
  fake_host_free(&host);
  check_ctrl_z();
  test_remove_run_dir(dir);
  return 0;
}
