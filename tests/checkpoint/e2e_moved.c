/* Description: what a resume under translate moved, as a program under cudaw (emulated device)
 * and its controller see it. With CUDAW_EMU_ALLOC=lowest the device hands the old addresses out
 * again; by default it never reuses an address, but the resume re-creates the memory at its old
 * addresses with the VMM calls: either way status reports moved_bytes 0 (and every byte in
 * place) and nothing is said. With CUDAW_TEST_MOVE=1 (a forced move) status reports every byte
 * as moved and one warning on stderr names it (the test's PASS_REGULAR_EXPRESSION). All keep
 * every byte. Under remap nothing can move. cudaw-ctl's status line says so too.
 * usage: e2e_moved [cudaw-ctl] (CUDAW_VMEM=translate or remap) */
#include "e2e_common.h"

#define MIB ((size_t)1 << 20)

static struct e2e_data data = {4, {0}, {16 * MIB, 3 * MIB + 17, 4096, 100}};

static unsigned long long status_number(const char *reply, const char *key)
{
  const char *at = strstr(reply, key);
  CHECK(at != NULL, "status has no %s: %s", key, reply);
  return strtoull(at + strlen(key), NULL, 10);
}

int main(int argc, char **argv)
{
  const char *ctl = argc > 1 ? argv[1] : NULL; /* cudaw-ctl, to check its status line too */
  const char *move = getenv("CUDAW_TEST_MOVE");
  const char *policy = getenv("CUDAW_VMEM");
  int identity = !(move && strcmp(move, "1") == 0) || (policy && strcmp(policy, "remap") == 0);
  e2e_make_data(&data);
  char reply[8192];
  for (int round = 0; round < 2; round++) {
    e2e_ask("checkpoint", reply, sizeof reply);
    CHECK(e2e_reply_ok(reply) && e2e_reply_state(reply, "paused"), "checkpoint: %s", reply);
    e2e_ask("resume", reply, sizeof reply);
    CHECK(e2e_reply_ok(reply) && e2e_reply_state(reply, "running"), "resume: %s", reply);
    e2e_check_data(&data, "after resume");
    e2e_ask("status", reply, sizeof reply);
    unsigned long long moved = status_number(reply, "\"moved_bytes\":");
    unsigned long long chunks = status_number(reply, "\"moved_chunks\":");
    if (identity) {
      CHECK(moved == 0 && chunks == 0, "nothing should move: %s", reply);
      if (policy && strcmp(policy, "translate") == 0)
        CHECK(status_number(reply, "\"in_place_bytes\":") >= 19 * MIB, "all in place: %s", reply);
    } else {
      /* every buffer's chunk: the 16 MiB and 3 MiB ones and the arena of the small ones */
      CHECK(moved >= 19 * MIB && chunks == 3, "every chunk should move: %s", reply);
    }
    if (ctl) { /* what cudaw-ctl status says of it */
      char out[8192];
      CHECK_EQ(e2e_run_ctl(ctl, "status", (long)getpid(), out, sizeof out), 0);
      CHECK((strstr(out, "at new device addresses") != NULL) == !identity, "status: %s", out);
    }
    printf("round %d: moved_bytes %llu in %llu chunks\n", round, moved, chunks);
  }
  for (int b = 0; b < data.count; b++) CUDA_OK(cudaFree(data.device[b]));
  printf("ok: %s\n", identity ? "nothing moved" : "forced move reported");
  return 0;
}
