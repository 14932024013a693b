/* A fake implementation of the checkpoint host operations over host memory, for the tests.
 * Copies really are asynchronous (they run at stream_sync), and every contract in ckpt.h that
 * it can check (gate closed, region bounds, device of the stream, pinned host buffer) is checked:
 * a violation is counted and fails the copy. */
#ifndef CUDAW_TEST_FAKE_HOST_H
#define CUDAW_TEST_FAKE_HOST_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"

struct fake_region {
  uint64_t id, vaddr, size;
  int device;
  uint8_t *memory; /* NULL while released */
  uint32_t seed;
  bool *piece_gone; /* exchanges: per piece of fake_host.piece_bytes, released on its own */
};

/* One device that several fake hosts (programs) share: what they hold together, and its peak. */
struct fake_device {
  pthread_mutex_t lock;
  uint64_t used, peak;
};

struct fake_host {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  int devices;
  struct fake_region *regions;
  size_t region_count;
  bool released;
  /* gate */
  bool gate_closed;
  int in_flight;
  /* injected behaviour */
  int recreate_failures;       /* the next N recreate_all fail with -ENOMEM */
  uint64_t recreate_shortfall; /* ... reporting this shortfall */
  int drain_error;             /* device_drain returns this */
  bool drain_block;            /* device_drain waits until cleared (fake_host_unblock_drain) */
  bool drain_entered;
  bool recreate_block;         /* recreate_all waits until cleared */
  bool recreate_entered;
  bool device_hash;            /* offer device_hash (checksums "on the device") */
  int device_hash_calls;
  int pin_delay_us;            /* host_alloc_pinned takes this long (pinning is slow on GPUs) */
  int register_delay_us;       /* host_register takes up to this long (a random share) */
  int registering, registering_most; /* host_register calls under way now, and at most */
  double registering_s;        /* seconds spent inside host_register, all calls together */
  int register_fail_after;     /* the Nth host_register from now fails with -EIO (0: none) */
  int unregister_delay_us;     /* host_unregister takes up to this long (a random share) */
  int unregistering, unregistering_most; /* host_unregister calls under way now, and at most */
  double unregistering_s;      /* seconds spent inside host_unregister, all calls together */
  /* Exchanges: with piece_bytes set, device memory moves in pieces of that size per region
   * (release_range, recreate_range, range_missing; else they answer -ENOSYS). device_used and
   * device_peak: resident bytes now and at most. */
  uint64_t piece_bytes;
  uint64_t device_used, device_peak;
  struct fake_device *device;  /* optional: counts this host's memory too */
  int range_fail_after;        /* the Nth recreate_range from now fails with -ENOMEM (0: none) */
  int release_fail_after;      /* the Nth release_range from now fails with -EIO (0: none) */
  int copy_fail_after;         /* the Nth copy queued from now fails with -EIO (0: none) */
  int h2d_garble_after;        /* the Nth copy to the device from now lands with a byte flipped */
  int copy_delay_us;           /* each copy takes this long when it runs (at stream_sync) */
  int park_error;              /* park_other returns this (0: parks nothing, succeeds) */
  int release_all_error;       /* release_all fails with this, its memory left garbled, as a
                                  host that re-created what it had released leaves it */
  int range_calls;
  int range_releases;          /* release_range calls */
  bool report_free;            /* device_free answers free_bytes (else -ENOSYS) */
  uint64_t free_bytes;
  int range_delay_us;          /* each recreate_range that makes something takes this long */
  /* The order of events (recreate_range calls that made memory, copies queued), numbered from
   * 1: the last such recreate_range's number, and the first copy to the device's (0: none);
   * range_created: the bytes recreate_range made. The test resets them. */
  uint64_t events, last_create_event, first_h2d_event, range_created;
  uint64_t context_event;      /* restore_context's number in that order (0: not called) */
  int context_failures;        /* the next N restore_context calls fail with -ENOMEM */
  bool context_given_up;       /* release_all gave the context up, restore_context set it back */
  /* what happened */
  int gate_closes, gate_opens, release_calls, recreate_calls, copies, park_calls, unpark_calls;
  int pinned_live, streams_live, registered_live;
  int pin_calls;               /* host_alloc_pinned calls that succeeded */
  int register_calls;
  void *register_failed;       /* where the injected failure happened */
  int violations;
  char violation[256];
  int log_lines;
  char last_log[512];
};

extern const struct ckpt_host_ops fake_host_ops;

/* The options of the environment with chunks of `chunk` bytes, `threads` copy threads, `streams`
 * slots and no image reserve (images in private memory). */
struct ckpt_options fake_host_options(uint64_t chunk, uint32_t threads, uint32_t streams);

void fake_host_init(struct fake_host *host, int devices);
void fake_host_free(struct fake_host *host);
/* Add a region filled with a pattern from `seed`; returns its index. */
size_t fake_host_add_region(struct fake_host *host, uint64_t size, int device, uint32_t seed);
/* 0 if every byte of every region matches its pattern, else the first bad region index + 1. */
size_t fake_host_verify(struct fake_host *host, uint64_t *bad_offset);
/* Whether [p, p + n) lies in registered ranges (one or several adjacent ones). */
bool fake_host_registered(struct fake_host *host, const void *p, size_t n);
/* A program's API call: blocks while the gate is closed. */
void fake_host_call_enter(struct fake_host *host);
void fake_host_call_exit(struct fake_host *host);
/* Wait (up to seconds) until device_drain has been entered; then release it. */
bool fake_host_wait_drain_entered(struct fake_host *host, double seconds);
void fake_host_unblock_drain(struct fake_host *host);
bool fake_host_wait_recreate_entered(struct fake_host *host, double seconds);
void fake_host_unblock_recreate(struct fake_host *host);

/* Test helpers: a private run dir (sets CUDAW_RUN_DIR), removed by test_remove_run_dir. */
void test_make_run_dir(char *path, size_t len);
void test_remove_run_dir(const char *path);
/* Wait up to `seconds` for ckpt_state() == state. */
bool test_wait_state(enum ckpt_state_id state, double seconds);
/* Run `ctl` with args (NULL-terminated) as a child; stdout into out; returns its exit code. */
int test_run_ctl(char *out, size_t out_len, const char *ctl, ...);

#endif
