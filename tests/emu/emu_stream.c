/* emu_stream.c: streams and events. Everything the emu does completes before the call returns,
 * so streams only need to exist and events only need a host timestamp. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "emu_internal.h"

#define HANDLE_MAGIC_STREAM 0x5354524du
#define HANDLE_MAGIC_EVENT 0x4556454eu

struct emu_stream {
  unsigned magic;
  unsigned flags;
  int priority;
};

struct emu_event {
  unsigned magic;
  unsigned flags;
  bool recorded;
  struct timespec time;
  cudaStream_t held_on; /* recorded on a held stream (cudaw_emu_hold_stream): not complete yet */
  cudaStream_t stream;  /* where it was recorded, and the reads in flight it follows (mark) */
  uint64_t mark;
};

/* Live handles, so a destroyed or made-up handle is refused without being dereferenced. */
static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static void **handles;
static size_t handle_count, handle_capacity;

static int handle_add(void *handle) {
  pthread_mutex_lock(&handles_lock);
  int err = 0;
  if (handle_count == handle_capacity) {
    size_t capacity = handle_capacity ? handle_capacity * 2 : 32;
    void **grown = realloc(handles, capacity * sizeof *grown);
    if (!grown) err = -ENOMEM;
    else {
      handles = grown;
      handle_capacity = capacity;
    }
  }
  if (!err) handles[handle_count++] = handle;
  pthread_mutex_unlock(&handles_lock);
  return err;
}

/* Whether handle is live with this magic; removes it when remove is set. */
static bool handle_live(const void *handle, unsigned magic, bool remove) {
  bool live = false;
  pthread_mutex_lock(&handles_lock);
  for (size_t i = 0; i < handle_count; i++) {
    if (handles[i] != handle || *(const unsigned *)handle != magic) continue;
    live = true;
    if (remove) handles[i] = handles[--handle_count];
    break;
  }
  pthread_mutex_unlock(&handles_lock);
  return live;
}

int emu_stream_check(cudaStream_t stream) {
  if (!stream || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return 0;
  return handle_live(stream, HANDLE_MAGIC_STREAM, false) ? 0 : -EBADF;
}

static struct emu_event *live_event(cudaEvent_t event) {
  return event && handle_live(event, HANDLE_MAGIC_EVENT, false) ? (struct emu_event *)event : NULL;
}

EMU_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *stream, unsigned int flags,
                                                    int priority) {
  emu_init();
  if (!stream || (flags & ~(unsigned)cudaStreamNonBlocking)) return emu_result(cudaErrorInvalidValue);
  struct emu_stream *s = malloc(sizeof *s);
  if (!s) return emu_result(cudaErrorMemoryAllocation);
  /* Priorities clamp into [greatest, least] = [-5, 0] like the real runtime does. */
  *s = (struct emu_stream){HANDLE_MAGIC_STREAM, flags, priority > 0 ? 0 : priority < -5 ? -5 : priority};
  if (handle_add(s)) {
    free(s);
    return emu_result(cudaErrorMemoryAllocation);
  }
  *stream = (cudaStream_t)s;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
  return cudaStreamCreateWithPriority(stream, flags, 0);
}

EMU_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *stream) {
  return cudaStreamCreateWithPriority(stream, 0, 0);
}

EMU_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!stream || !handle_live(stream, HANDLE_MAGIC_STREAM, true))
    return emu_result(cudaErrorInvalidResourceHandle);
  emu_memory_reads_done(stream, false, UINT64_MAX); /* its work completes */
  ((struct emu_stream *)stream)->magic = 0;
  free(stream);
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}

cudaError_t emu_stream_get_priority(cudaStream_t stream, int *priority) {
  if (!priority) return emu_result(cudaErrorInvalidValue);
  if (emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  *priority = stream && stream != cudaStreamLegacy && stream != cudaStreamPerThread
                  ? ((struct emu_stream *)stream)->priority : 0;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t stream, int *priority) {
  return emu_stream_get_priority(stream, priority);
}

cudaError_t emu_stream_get_flags(cudaStream_t stream, unsigned *flags) {
  if (!flags) return emu_result(cudaErrorInvalidValue);
  if (emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  *flags = stream && stream != cudaStreamLegacy && stream != cudaStreamPerThread
               ? ((struct emu_stream *)stream)->flags : 0;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int *flags) {
  return emu_stream_get_flags(stream, flags);
}

/* Deferred work (emu_work.c) belongs to a device, not a stream: every stream of the current
 * device waits for it, which is stricter than a GPU and enough for the tests that defer. */
cudaError_t emu_stream_query(cudaStream_t stream) {
  if (emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  return emu_work_pending(emu_current_device()) ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t emu_stream_sync(cudaStream_t stream) {
  if (emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  emu_work_wait(emu_current_device());
  emu_pool_synchronized(emu_current_device());
  return emu_memory_reads_done(stream, false, UINT64_MAX) ? emu_result(cudaErrorIllegalAddress)
                                                   : cudaSuccess;
}

EMU_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return emu_stream_sync(stream); }
EMU_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream) { return emu_stream_query(stream); }

cudaError_t emu_stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  (void)flags;
  if (emu_stream_check(stream) || !live_event(event))
    return emu_result(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                           unsigned int flags) {
  return emu_stream_wait_event(stream, event, flags);
}

cudaError_t emu_launch_host_func(cudaStream_t stream, cudaHostFn_t fn, void *user_data) {
  if (!fn) return emu_result(cudaErrorInvalidValue);
  if (emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  fn(user_data);
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *user_data) {
  return emu_launch_host_func(stream, fn, user_data);
}

cudaError_t emu_stream_add_callback(cudaStream_t stream, cudaStreamCallback_t callback,
                                    void *user_data, unsigned flags) {
  if (!callback || flags) return emu_result(cudaErrorInvalidValue);
  if (emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  callback(stream, cudaSuccess, user_data);
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                             void *user_data, unsigned int flags) {
  return emu_stream_add_callback(stream, callback, user_data, flags);
}

EMU_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  emu_init();
  unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!event || (flags & ~known)) return emu_result(cudaErrorInvalidValue);
  struct emu_event *e = calloc(1, sizeof *e);
  if (!e) return emu_result(cudaErrorMemoryAllocation);
  e->magic = HANDLE_MAGIC_EVENT;
  e->flags = flags;
  if (handle_add(e)) {
    free(e);
    return emu_result(cudaErrorMemoryAllocation);
  }
  *event = (cudaEvent_t)e;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *event) {
  return cudaEventCreateWithFlags(event, 0);
}

EMU_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event || !handle_live(event, HANDLE_MAGIC_EVENT, true))
    return emu_result(cudaErrorInvalidResourceHandle);
  ((struct emu_event *)event)->magic = 0;
  free(event);
  return cudaSuccess;
}

cudaError_t emu_event_record(cudaEvent_t event, cudaStream_t stream) {
  struct emu_event *e = live_event(event);
  if (!e || emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  clock_gettime(CLOCK_MONOTONIC, &e->time);
  e->recorded = true;
  e->held_on = emu_stream_held(stream) ? stream : NULL;
  e->stream = stream;
  e->mark = emu_memory_read_mark();
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return emu_event_record(event, stream);
}

EMU_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                                unsigned int flags) {
  if (flags & ~(unsigned)cudaEventRecordExternal) return emu_result(cudaErrorInvalidValue);
  return emu_event_record(event, stream);
}

EMU_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  struct emu_event *e = live_event(event);
  if (e && e->held_on) emu_stream_release(e->held_on); /* waiting lets the stream catch up */
  if (e) emu_pool_synchronized(emu_current_device());
  if (e && e->recorded && emu_memory_reads_done(e->stream, false, e->mark))
    return emu_result(cudaErrorIllegalAddress);
  return emu_result(e ? cudaSuccess : cudaErrorInvalidResourceHandle);
}

EMU_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event) {
  struct emu_event *e = live_event(event);
  if (e && e->held_on && emu_stream_held(e->held_on)) return cudaErrorNotReady;
  return emu_result(e ? cudaSuccess : cudaErrorInvalidResourceHandle);
}

EMU_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  struct emu_event *s = live_event(start), *e = live_event(end);
  if (!ms) return emu_result(cudaErrorInvalidValue);
  if (!s || !e || ((s->flags | e->flags) & cudaEventDisableTiming))
    return emu_result(cudaErrorInvalidResourceHandle);
  if (!s->recorded || !e->recorded) return emu_result(cudaErrorInvalidResourceHandle);
  double seconds = (double)(e->time.tv_sec - s->time.tv_sec) +
                   (double)(e->time.tv_nsec - s->time.tv_nsec) * 1e-9;
  *ms = (float)(seconds * 1e3);
  return cudaSuccess;
}
