/* What cudawd tells: the snapshot cudaw-ctl sched prints, and the same figures in Prometheus
 * text format for node exporters (written to a temporary file, then renamed into place). */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"

void sched_fill_snapshot(const struct daemon *d, struct sched_snapshot *out)
{
  memset(out, 0, sizeof *out);
  out->version = SCHED_PROTO_VERSION;
  out->type = SCHED_STATUS;
  out->quantum = d->config.quantum;
  out->uptime = sched_now() - d->started;
  for (int s = 0; s < SCHED_MAX_DEVICES; s++) {
    const struct device *dev = &d->device[s];
    if (!dev->used) continue;
    struct sched_device_info *info = &out->device[out->devices++];
    memcpy(info->key, dev->key, sizeof info->key);
    info->capacity = dev->capacity;
    info->resident = sched_resident(d, s);
    info->max_resident = dev->max_resident;
    info->swaps = dev->swaps;
    for (const struct program *p = d->programs; p; p = p->next) {
      if (p->joined && p->bytes[s]) info->programs++;
      bool uses = false;
      for (int o = 0; p->joined && o < SCHED_MAX_DEVICES; o++) uses |= p->slot[o] == s;
      info->users += uses;
    }
  }
  for (const struct program *p = d->programs; p && out->programs < SCHED_MAX_PROGRAMS; p = p->next)
    if (p->joined && !p->borrower) {
      out->disk[out->programs] = (struct sched_program_disk){
          .on_disk = p->on_disk, .bytes = p->on_disk ? p->disk_bytes : 0, .spills = p->spills};
      sched_program_detail(d, p, &out->detail[out->programs]);
      sched_program_info(p, &out->program[out->programs++]);
    }
  double now = sched_now();
  for (int i = 0; i < d->exited_count; i++) {
    out->detail[out->programs] = d->exited_detail[i];
    out->detail[out->programs].last_grant_ago =
        d->exited_grant_at[i] > 0 ? now - d->exited_grant_at[i] : -1;
    out->program[out->programs++] = d->exited[i];
  }
  sched_pool_info(d, &out->pool);
  sched_uid_info(d, out);
  out->pool_window = d->pool.window;
  out->pool_released = d->pool.released;
  out->pool_release = d->config.pool_release;
  out->idle_exit = d->config.idle_exit;
  out->idle_for = d->idle_since > 0 ? now - d->idle_since : 0;
  sched_spill_info(d, &out->spill);
  sched_exchange_info(d, &out->exchange);
  sched_pool_borrowers(d, out);
}

void sched_program_info(const struct program *p, struct sched_program_info *info)
{
  memset(info, 0, sizeof *info);
  info->pid = p->pid;
  info->state = p->state;
  info->priority = p->priority;
  for (int s = 0; s < SCHED_MAX_DEVICES; s++) {
    info->bytes += p->bytes[s];
    if (p->bytes[s]) info->device_mask |= 1 << s;
  }
  info->swaps = p->swaps;
  info->gpu_seconds = p->gpu_seconds;
  info->swap_seconds = p->swap_seconds;
  info->wait_seconds = p->wait_seconds;
}

/* One Prometheus series: its name, type and help line. */
struct series {
  const char *name, *type, *help;
};

/* Series of one value each, without labels. */
static void write_scalars(FILE *f, const struct series *series, const uint64_t *values,
                          size_t count)
{
  for (size_t k = 0; k < count; k++)
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", series[k].name, series[k].help,
            series[k].name, series[k].type, series[k].name, values[k]);
}

int sched_write_metrics(const struct daemon *d, const char *path)
{
  struct sched_snapshot snapshot;
  sched_fill_snapshot(d, &snapshot);
  char tmp[4096];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) return -ENAMETOOLONG;
  FILE *f = fopen(tmp, "we");
  if (!f) return -errno;
  static const struct { const char *name, *type, *help; } device_series[] = {
    {"cudawd_capacity_bytes", "gauge", "Device memory cudawd may hand out."},
    {"cudawd_resident_bytes", "gauge", "Device memory the resident programs hold."},
    {"cudawd_max_resident_bytes", "gauge", "Highest resident bytes seen."},
    {"cudawd_swaps_total", "counter", "Checkpoints of programs holding memory on the device."},
  };
  for (size_t k = 0; k < sizeof device_series / sizeof device_series[0]; k++) {
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", device_series[k].name, device_series[k].help,
            device_series[k].name, device_series[k].type);
    for (int i = 0; i < snapshot.devices; i++) {
      const struct sched_device_info *dev = &snapshot.device[i];
      uint64_t values[] = {dev->capacity, dev->resident, dev->max_resident, dev->swaps};
      char key[SCHED_KEY_LEN + 1];
      fprintf(f, "%s{device=\"%s\"} %" PRIu64 "\n", device_series[k].name,
              sched_key_printable(dev->key, key), values[k]);
    }
  }
  static const struct { const char *name, *type, *help; } series[] = {
    {"cudawd_program_bytes", "gauge", "Device memory of the program, resident or not."},
    {"cudawd_program_gpu_seconds_total", "counter",
     "Time the program ran resident, not waiting, not idle by its hint."},
    {"cudawd_program_swaps_total", "counter", "Times the program was checkpointed."},
    {"cudawd_program_swap_seconds_total", "counter", "Time its checkpoints and resumes took."},
    {"cudawd_program_wait_seconds_total", "counter", "Time it waited for memory or its turn."},
  };
  for (size_t k = 0; k < sizeof series / sizeof series[0]; k++) {
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", series[k].name, series[k].help, series[k].name,
            series[k].type);
    for (int i = 0; i < snapshot.programs; i++) {
      const struct sched_program_info *p = &snapshot.program[i];
      double values[] = {(double)p->bytes, p->gpu_seconds, (double)p->swaps, p->swap_seconds,
                         p->wait_seconds};
      fprintf(f, "%s{pid=\"%d\"} %.15g\n", series[k].name, p->pid, values[k]);
    }
  }
  static const struct { const char *name, *type, *help; } detail_series[] = {
    {"cudawd_program_failed_allocations_total", "counter",
     "Allocations whose error went back to the program while it shared the GPU."},
    {"cudawd_program_alloc_retries_total", "counter",
     "Granted allocations that failed on the device and were asked again."},
    {"cudawd_program_last_grant_bytes", "gauge", "Bytes its last grant added (0: none yet)."},
    {"cudawd_program_last_grant_age_seconds", "gauge", "Seconds since its last grant (-1: none)."},
    {"cudawd_program_wait_needed_bytes", "gauge", "Memory it waits for (0: not waiting for any)."},
    {"cudawd_program_wait_free_bytes", "gauge", "What its device has free for it while it waits."},
  };
  for (size_t k = 0; k < sizeof detail_series / sizeof detail_series[0]; k++) {
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", detail_series[k].name, detail_series[k].help,
            detail_series[k].name, detail_series[k].type);
    for (int i = 0; i < snapshot.programs; i++) {
      const struct sched_program_detail *w = &snapshot.detail[i];
      double values[] = {(double)w->failed, (double)w->retries, (double)w->last_grant_bytes,
                         w->last_grant_ago, (double)w->need_bytes, (double)w->free_bytes};
      fprintf(f, "%s{pid=\"%d\"} %.15g\n", detail_series[k].name, snapshot.program[i].pid,
              values[k]);
    }
  }
  fprintf(f, "# HELP cudawd_program_wait Why the program waits: reason none, memory, queued (behind "
             "another pid), swapping_out or swapping_in.\n# TYPE cudawd_program_wait gauge\n");
  for (int i = 0; i < snapshot.programs; i++)
    fprintf(f, "cudawd_program_wait{pid=\"%d\",reason=\"%s\",behind=\"%d\"} 1\n",
            snapshot.program[i].pid, sched_wait_name(snapshot.detail[i].wait_reason),
            snapshot.detail[i].behind_pid);
  /* The state as a label of its own series, so that the others keep one series per program. */
  fprintf(f, "# HELP cudawd_program_state The program's state (running, waiting, swapped_out...).\n"
             "# TYPE cudawd_program_state gauge\n");
  for (int i = 0; i < snapshot.programs; i++)
    fprintf(f, "cudawd_program_state{pid=\"%d\",state=\"%s\"} 1\n", snapshot.program[i].pid,
            sched_state_name(snapshot.program[i].state));
  static const struct series pool_series[] = {
    {"cudawd_host_pool_bytes", "gauge", "Size of the host-memory pool (0: none)."},
    {"cudawd_host_pool_lent_bytes", "gauge", "Pool bytes lent to swapped-out programs' images."},
    {"cudawd_host_pool_free_bytes", "gauge", "Pool bytes free to lend."},
    {"cudawd_host_pool_populated_bytes", "gauge", "Pool bytes faulted in so far."},
    {"cudawd_host_pool_huge_pages", "gauge", "1 if huge pages back the pool."},
    {"cudawd_host_pool_placed_bytes_total", "counter", "Image bytes put into lent pool ranges."},
    {"cudawd_host_pool_fallbacks_total", "counter",
     "Checkpoints ordered without a loan: the pool had no room."},
    {"cudawd_host_pool_window_bytes", "gauge", "Pool bytes offered to the programs (demand)."},
    {"cudawd_host_pool_released_bytes_total", "counter", "Pool bytes given back to the kernel."},
  };
  const struct sched_pool_info *pool = &snapshot.pool;
  uint64_t pool_values[] = {pool->size, pool->lent, pool->free, pool->populated,
                            (uint64_t)pool->huge_pages, pool->placed_bytes, pool->fallbacks,
                            snapshot.pool_window, snapshot.pool_released};
  write_scalars(f, pool_series, pool_values, sizeof pool_values / sizeof pool_values[0]);
  fprintf(f, "# HELP cudawd_host_pool_resident_bytes Pool bytes the kernel holds pages for.\n"
             "# TYPE cudawd_host_pool_resident_bytes gauge\ncudawd_host_pool_resident_bytes %"
             PRIu64 "\n", pool->resident);
  static const struct series disk_series[] = {
    {"cudawd_disk_images", "gauge", "Swapped-out programs whose image is on disk (--spill-dir)."},
    {"cudawd_disk_bytes", "gauge", "Image bytes on disk now."},
    {"cudawd_spills_total", "counter", "Images moved to disk since cudawd started."},
    {"cudawd_spill_failures_total", "counter", "Spills a program answered with an error."},
    {"cudawd_spilled_bytes_total", "counter", "Image bytes moved to disk since start."},
  };
  const struct sched_spill_info *spill = &snapshot.spill;
  uint64_t disk_values[] = {(uint64_t)spill->on_disk, spill->disk_bytes, spill->spills,
                            spill->spill_failures, spill->spilled_bytes};
  if (spill->enabled)
    write_scalars(f, disk_series, disk_values, sizeof disk_values / sizeof disk_values[0]);
  static const struct { const char *name, *type, *help; } uid_series[] = {
    {"cudawd_uid_connections", "gauge", "Connections of the uid open now."},
    {"cudawd_uid_programs", "gauge", "Programs of the uid joined now."},
    {"cudawd_uid_connections_total", "counter", "Connections the uid made."},
    {"cudawd_uid_refused_total", "counter", "Connections or joins of the uid refused."},
    {"cudawd_uid_closed_total", "counter", "Connections of the uid cudawd closed."},
    {"cudawd_uid_protocol_errors_total", "counter", "Malformed or out-of-turn messages."},
    {"cudawd_uid_messages_total", "counter", "Messages the uid's clients sent."},
  };
  for (size_t k = 0; k < sizeof uid_series / sizeof uid_series[0]; k++) {
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", uid_series[k].name, uid_series[k].help,
            uid_series[k].name, uid_series[k].type);
    for (int i = 0; i < snapshot.uids; i++) {
      const struct sched_uid_info *u = &snapshot.uid[i];
      uint64_t values[] = {(uint64_t)u->connections, (uint64_t)u->programs, u->connections_total,
                           u->refused, u->closed, u->protocol_errors, u->messages};
      fprintf(f, "%s{uid=\"%u\"} %" PRIu64 "\n", uid_series[k].name, u->uid, values[k]);
    }
  }
  int rc = ferror(f) ? -EIO : 0;
  if (fclose(f) != 0 && !rc) rc = -errno;
  if (!rc && rename(tmp, path) != 0) rc = -errno;
  if (rc) unlink(tmp);
  errno = -rc;
  return rc;
}
