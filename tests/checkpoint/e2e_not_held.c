/* Description: no false success when cudaw does not hold the program's memory (issue 33: with
 * vmem off, `cudaw-ctl checkpoint` said "paused: saved 0 B of 0 regions", exit 0, while every
 * byte stayed on the device). Under CUDAW_VMEM=off (set by ctest), on the emulated device:
 * cudaw-ctl checkpoint is refused with exit status 7, naming the cause ("vmem off") and the
 * bytes that stay; the program keeps running with its data; cudaw-ctl status says the same and
 * exits 7, and so does --json; a SIGUSR1 checkpoint is refused the same way.
 * usage: e2e_not_held <cudaw-ctl> */
#include "e2e_common.h"

#include <signal.h>

#define MIB ((size_t)1 << 20)

static struct e2e_data data = {2, {0}, {48 * MIB, 16 * MIB}};

/* The figure after "stay" in cudaw-ctl's line: "...: N bytes (...) stay on the device". */
static unsigned long long bytes_said(const char *out)
{
  const char *at = strstr(out, " bytes (");
  CHECK(at, "no byte count in: %s", out);
  while (at > out && at[-1] >= '0' && at[-1] <= '9') at--;
  return strtoull(at, NULL, 10);
}

int main(int argc, char **argv)
{
  CHECK(argc == 2, "usage: e2e_not_held <cudaw-ctl>");
  const char *ctl = argv[1];
  const char *vmem = getenv("CUDAW_VMEM");
  CHECK(vmem && strcmp(vmem, "off") == 0, "ctest runs this with CUDAW_VMEM=off");
  e2e_make_data(&data);
  long pid = (long)getpid();
  char out[4096], reply[4096];

  int code = e2e_run_ctl(ctl, "checkpoint", pid, out, sizeof out);
  CHECK(code == 7, "checkpoint of a program whose memory cudaw does not hold: exit %d, not 7:\n%s",
        code, out);
  CHECK(strstr(out, "vmem off (CUDAW_VMEM=off)") && strstr(out, "stay on the device") &&
            !strstr(out, "saved"),
        "the refusal does not name its cause:\n%s", out);
  CHECK(bytes_said(out) >= 64 * MIB, "it says %llu bytes stay; the program holds 64 MiB:\n%s",
        bytes_said(out), out);
  e2e_ask("status", reply, sizeof reply);
  CHECK(e2e_reply_state(reply, "running"), "not running after the refusal: %s", reply);
  e2e_check_data(&data, "after the refused checkpoint");

  code = e2e_run_ctl(ctl, "status", pid, out, sizeof out);
  CHECK(code == 7 && strstr(out, "running") && strstr(out, "vmem off (CUDAW_VMEM=off): ") &&
            strstr(out, "stay on the device"),
        "status: exit %d, not 7 with the cause:\n%s", code, out);
  code = e2e_run_ctl(ctl, "--json checkpoint", pid, out, sizeof out);
  CHECK(code == 7 && strstr(out, "\"error\":\"not_held\""), "--json: exit %d:\n%s", code, out);

  /* By signal: refused as well (the log says why), the program runs on. */
  kill(getpid(), SIGUSR1);
  double deadline = e2e_now() + 10;
  do {
    e2e_sleep_us(20000);
    e2e_ask("status", reply, sizeof reply);
  } while (!strstr(reply, "\"last_ok\":false") && e2e_now() < deadline);
  CHECK(strstr(reply, "\"last_ok\":false") && strstr(reply, "vmem off") &&
            e2e_reply_state(reply, "running"),
        "a SIGUSR1 checkpoint was not refused: %s", reply);
  e2e_check_data(&data, "after the signal");
  printf("not held: refused, %llu bytes stay on the device; status exit 7\n", bytes_said(out));
  return 0;
}
