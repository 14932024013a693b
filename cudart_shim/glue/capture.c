/* What the stream-ordered allocator (mem_async.c) must know about streams without asking the
 * driver on every allocation: whether any stream capture may be open (then a stream's capture
 * status is asked), and whether a stream was destroyed (then a saved handle may name a new
 * stream). Both API layers report here: the runtime's begin-capture calls and cudaStreamDestroy
 * (runtime/stream.c), the driver's (driver/stream.c), the end of a capture where it is overridden
 * (runtime/graph.c, driver/graph.c), and a driver function handed out unwrapped
 * (driver/proc_address.c), which could begin a capture unseen. */
#include <stdatomic.h>

#include "shim_vmem.h"

atomic_uint shim_captures_open;
atomic_uint shim_streams_destroyed;

void shim_capture_begin(void)
{
  atomic_fetch_add_explicit(&shim_captures_open, 1, memory_order_seq_cst);
}

void shim_capture_begin_failed(void)
{
  atomic_fetch_sub_explicit(&shim_captures_open, 1, memory_order_seq_cst);
}

void shim_capture_end(int was_capturing, int capturing, int ended)
{
  if (was_capturing && !capturing && ended)
    atomic_fetch_sub_explicit(&shim_captures_open, 1, memory_order_seq_cst);
}

void shim_capture_unseen(void)
{
  static atomic_int done;
  if (atomic_exchange(&done, 1) == 0) shim_capture_begin(); /* never ended */
}

