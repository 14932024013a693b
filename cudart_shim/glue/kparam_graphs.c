/* Graphs under the translate policy hold translated (real) kernel arguments, copied by the real
 * runtime when a node is added or a stream capture ends. A checkpoint/resume may move device
 * memory to new real addresses, so such graphs, and the executable graphs instantiated from them,
 * become stale. cudaw refuses to launch or instantiate them afterwards with a message saying why,
 * rather than letting kernels fault: the program must build (capture) the graph again. Each graph
 * or exec that holds translated arguments is recorded with the relocation epoch of its oldest
 * translated content. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "shim_kparam.h"

struct entry {
  const void *key;
  unsigned epoch;     /* epoch of the oldest translated content */
  const void *graph;  /* nodes: their graph; graphs and execs: NULL */
  bool reported;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *entries;
static size_t entry_count, entry_capacity;
static atomic_size_t tracked; /* entry_count, readable without the lock */
static atomic_uint epoch;

unsigned shim_kparam_epoch(void) { return atomic_load(&epoch); }

int shim_kparam_relocated(void)
{
  /* Under remap the real address is the virtual one again: nothing is stale. */
  if (shim_translate_end) atomic_fetch_add(&epoch, 1);
  return 0;
}

/* Lock held. Linear: graphs are few and these calls are not per launch. */
static struct entry *find(const void *key)
{
  for (size_t i = 0; i < entry_count; i++)
    if (entries[i].key == key) return &entries[i];
  return NULL;
}

static struct entry *find_or_add(const void *key, unsigned at)
{
  struct entry *e = find(key);
  if (e) return e;
  if (entry_count == entry_capacity) {
    size_t capacity = entry_capacity ? 2 * entry_capacity : 32;
    struct entry *grown = realloc(entries, capacity * sizeof *grown);
    if (!grown) return NULL;
    entries = grown;
    entry_capacity = capacity;
  }
  e = &entries[entry_count++];
  *e = (struct entry){key, at, NULL, false};
  atomic_store(&tracked, entry_count);
  return e;
}

static void forget_locked(const void *key)
{
  for (size_t i = 0; i < entry_count;) {
    if (entries[i].key == key || entries[i].graph == key) entries[i] = entries[--entry_count];
    else i++;
  }
  atomic_store(&tracked, entry_count);
}

void shim_kparam_graph_mark(const void *graph)
{
  if (!graph || !shim_translate_end) return;
  pthread_mutex_lock(&lock);
  find_or_add(graph, atomic_load(&epoch)); /* an existing entry keeps its older epoch */
  pthread_mutex_unlock(&lock);
}

void shim_kparam_node_mark(const void *node, const void *graph)
{
  if (!node || !graph || !shim_translate_end) return;
  pthread_mutex_lock(&lock);
  struct entry *e = find_or_add(node, atomic_load(&epoch));
  if (e) e->graph = graph;
  pthread_mutex_unlock(&lock);
}

const void *shim_kparam_node_graph(const void *node)
{
  if (!atomic_load_explicit(&tracked, memory_order_relaxed)) return NULL;
  pthread_mutex_lock(&lock);
  struct entry *e = find(node);
  const void *graph = e ? e->graph : NULL;
  pthread_mutex_unlock(&lock);
  return graph;
}

void shim_kparam_graph_inherit(const void *to, const void *from)
{
  if (!to || !from || !atomic_load_explicit(&tracked, memory_order_relaxed)) return;
  pthread_mutex_lock(&lock);
  struct entry *source = find(from);
  if (source) {
    unsigned at = source->epoch;
    struct entry *e = find_or_add(to, at);
    if (e && at < e->epoch) e->epoch = at;
  }
  pthread_mutex_unlock(&lock);
}

void shim_kparam_exec_mark(const void *exec, const void *graph)
{
  if (!exec || !atomic_load_explicit(&tracked, memory_order_relaxed)) return;
  pthread_mutex_lock(&lock);
  forget_locked(exec); /* a reused handle, or an update: the graph's state replaces it */
  struct entry *source = find(graph);
  if (source) {
    unsigned at = source->epoch;
    find_or_add(exec, at);
  }
  pthread_mutex_unlock(&lock);
}

static bool stale(const void *key, const char *what)
{
  if (!key || !atomic_load_explicit(&tracked, memory_order_relaxed)) return false;
  pthread_mutex_lock(&lock);
  struct entry *e = find(key);
  bool is_stale = e && e->epoch != atomic_load(&epoch);
  bool report = is_stale && !e->reported;
  if (report) e->reported = true;
  pthread_mutex_unlock(&lock);
  if (report)
    shim_error("kparam: %s %p holds kernel arguments translated before a checkpoint moved device "
               "memory (CUDAW_VMEM=translate): refused (cudaErrorNotPermitted); build or capture "
               "the graph again after resuming, or use CUDAW_VMEM=remap", what, key);
  return is_stale;
}

bool shim_kparam_graph_stale(const void *graph) { return stale(graph, "graph"); }
bool shim_kparam_exec_stale(const void *exec) { return stale(exec, "executable graph"); }

void shim_kparam_graph_forget(const void *graph_or_exec)
{
  if (!graph_or_exec || !atomic_load_explicit(&tracked, memory_order_relaxed)) return;
  pthread_mutex_lock(&lock);
  forget_locked(graph_or_exec);
  pthread_mutex_unlock(&lock);
}
