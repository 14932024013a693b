/* Description: the idle hint in cudawd's policy (sched/schedule.c, SCHED_GPU_IDLE) without
 * sockets: a program that says it makes no CUDA call is swapped out for a waiting one before its
 * turn and before min-run are over; once out it is not brought back while idle, even when it
 * fits and the other's turn is over; when it calls again it is (the other is swapped out). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon.h"
#include "test.h"

static pid_t sent_pid;
static uint32_t sent_type;
static int sent_count;

int sched_send(struct program *p, const struct sched_msg *msg)
{
  sent_pid = p->pid;
  sent_type = msg->type;
  sent_count++;
  return 0;
}

/* The one message sent by a step (type 0 if none). */
static uint32_t step(struct daemon *d, pid_t *pid)
{
  sent_count = 0;
  sent_type = 0;
  sched_step(d);
  CHECK(sent_count <= 1, "%d messages sent at once", sent_count);
  *pid = sent_pid;
  return sent_type;
}

static struct program programs[2];

static struct program *join(struct daemon *d, int index, int slot, uint64_t bytes)
{
  struct program *p = &programs[index];
  memset(p, 0, sizeof *p);
  p->pid = 200 + index;
  p->joined = true;
  p->priority = 1;
  p->state = SCHED_RUNNING;
  p->bytes[slot] = bytes;
  p->state_since = p->accounted_at = p->resident_since = p->wanting_since = sched_now();
  p->next = d->programs;
  d->programs = p;
  return p;
}

int main(void)
{
  static struct daemon d;
  d.config = (struct sched_config){.quantum = 30, .min_run = 5, .idle_cpu = 0.02,
                                   .device_memory = 100};
  int dev = sched_device_slot(&d, "00112233445566778899aabbccddeeff", 1000);
  CHECK(dev == 0);
  pid_t pid = 0;
  struct program *a = join(&d, 0, dev, 80), *w = join(&d, 1, dev, 0);
  w->wants = true;
  w->want_slot = dev;
  w->want_bytes = 50;
  /* a's turn has just begun: w waits. */
  CHECK_EQ(step(&d, &pid), 0);
  CHECK_EQ(w->state, SCHED_WAITING);
  /* a says it is idle: swapped out at once, w granted. */
  sched_idle_hint(&d, a, true);
  CHECK(step(&d, &pid) == SCHED_CHECKPOINT && pid == a->pid, "checkpoint to %d", pid);
  sched_done(&d, a, 1, 0, 80, 0.1);
  CHECK(step(&d, &pid) == SCHED_GRANT && pid == w->pid);
  /* w's turn is over, but a is idle: it stays out. */
  w->resident_since = sched_now() - 100;
  CHECK_EQ(step(&d, &pid), 0);
  CHECK_EQ(a->state, SCHED_SWAPPED_OUT);
  /* a calls again: w (turn over) is swapped out and a comes back. */
  sched_idle_hint(&d, a, false);
  CHECK(step(&d, &pid) == SCHED_CHECKPOINT && pid == w->pid, "checkpoint to %d", pid);
  sched_done(&d, w, 1, 0, 50, 0.1);
  CHECK(step(&d, &pid) == SCHED_RESUME && pid == a->pid);
  sched_done(&d, a, 2, 0, 80, 0.1);
  CHECK_EQ(a->state, SCHED_RUNNING);
  /* Swapped out and idle, but an allocation of its waits: it is wanted back. */
  w->gpu_idle = true;
  w->wants = true;
  w->want_bytes = 60;
  a->resident_since = sched_now() - 100;
  CHECK(step(&d, &pid) == SCHED_CHECKPOINT && pid == a->pid, "checkpoint to %d", pid);
  printf("ok\n");
  return 0;
}
