/* Graphs under the translate policy hold translated (real) addresses, copied by the real runtime
 * when a node is added or set or a stream capture ends. A checkpoint/resume may move device
 * memory to new real addresses; then every graph and executable graph that holds such addresses
 * is updated in place, node by node, from the arguments the program gave (virtual addresses, kept
 * here per node) through the API layer's update functions. What cudaw cannot see into (opaque:
 * captured work, child graphs, clones) or fails to update is refused at its next launch or
 * instantiation, with a message naming the reason. Each tracked graph or exec carries the epoch
 * up to which its content is known good. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "shim_kparam.h"

struct entry {
  const void *key;
  unsigned epoch;     /* graphs and execs: the epoch their content is right for */
  const void *graph;  /* nodes: their graph; graphs and execs: NULL */
  bool exec;
  bool reported;
  const char *opaque; /* why cudaw cannot update it after a move; NULL when it can */
  const void *origin; /* execs: the graph instantiated, whose node handles the records use */
  size_t captured;    /* graphs being captured: kernel launches cudaw saw become nodes */
};

/* What one node of a graph or exec holds, as the program gave it. */
struct record {
  const void *owner, *node;
  shim_kparam_node_update_fn update;
  struct shim_kparam_blob *blob;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *entries;
static size_t entry_count, entry_capacity;
static struct record *records;
static size_t record_count, record_capacity;
static atomic_size_t tracked; /* entry_count, readable without the lock */
static atomic_uint epoch;

unsigned shim_kparam_epoch(void) { return atomic_load(&epoch); }

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
  *e = (struct entry){key, at, NULL, false, false, NULL, NULL, 0};
  atomic_store(&tracked, entry_count);
  return e;
}

static struct record *find_record(const void *owner, const void *node)
{
  for (size_t i = 0; i < record_count; i++)
    if (records[i].owner == owner && records[i].node == node) return &records[i];
  return NULL;
}

/* Lock held. Appends a record taking blob's reference; false when out of memory (blob kept). */
static bool add_record(const void *owner, const void *node, shim_kparam_node_update_fn update,
                       struct shim_kparam_blob *blob)
{
  if (record_count == record_capacity) {
    size_t capacity = record_capacity ? 2 * record_capacity : 32;
    struct record *grown = realloc(records, capacity * sizeof *grown);
    if (!grown) return false;
    records = grown;
    record_capacity = capacity;
  }
  records[record_count++] = (struct record){owner, node, update, blob};
  return true;
}

static void forget_records_locked(const void *owner)
{
  for (size_t i = 0; i < record_count;) {
    if (records[i].owner == owner) {
      shim_kparam_blob_put(records[i].blob);
      records[i] = records[--record_count];
    } else {
      i++;
    }
  }
}

static void forget_locked(const void *key)
{
  for (size_t i = 0; i < entry_count;) {
    if (entries[i].key == key || entries[i].graph == key) entries[i] = entries[--entry_count];
    else i++;
  }
  forget_records_locked(key);
  atomic_store(&tracked, entry_count);
}

static void set_opaque(struct entry *e, const char *reason)
{
  if (e && !e->opaque) e->opaque = reason;
}

/* Lock held: update every node record of e's object; false when one failed. */
static bool update_locked(struct entry *e)
{
  bool ok = true;
  for (size_t i = 0; i < record_count; i++) {
    struct record *r = &records[i];
    if (r->owner != e->key) continue;
    int rc = r->update(r->owner, e->exec, r->node, r->blob);
    if (rc) {
      shim_error("kparam: %s %p: node %p could not be updated after a checkpoint moved device "
                 "memory: %s", e->exec ? "executable graph" : "graph", e->key, r->node,
                 strerror(-rc));
      ok = false;
    }
  }
  return ok;
}

int shim_kparam_relocated(void)
{
  /* Under remap the real address is the virtual one again: nothing is stale. */
  if (!shim_translate_end) return 0;
  unsigned now = atomic_fetch_add(&epoch, 1) + 1;
  unsigned updated = 0, refused = 0;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < entry_count; i++) {
    struct entry *e = &entries[i];
    if (e->graph || e->epoch + 1 != now) continue; /* nodes; already stale */
    if (!e->opaque && !update_locked(e)) set_opaque(e, "a node update failed (see above)");
    if (e->opaque) {
      refused++;
    } else {
      e->epoch = now;
      updated++;
    }
  }
  pthread_mutex_unlock(&lock);
  if (updated || refused)
    shim_info("kparam: after the move, %u graphs and executable graphs updated, %u refused from "
              "now on", updated, refused);
  return 0;
}

void shim_kparam_graph_mark(const void *graph)
{
  if (!graph || !shim_translate_end) return;
  pthread_mutex_lock(&lock);
  find_or_add(graph, atomic_load(&epoch)); /* an existing entry keeps its older epoch */
  pthread_mutex_unlock(&lock);
}

void shim_kparam_node_keep(const void *owner, bool exec, const void *node,
                           shim_kparam_node_update_fn update, struct shim_kparam_blob *blob)
{
  if (!owner || !node || !shim_translate_end) {
    shim_kparam_blob_put(blob);
    return;
  }
  pthread_mutex_lock(&lock);
  struct entry *e = find_or_add(owner, atomic_load(&epoch));
  if (e) e->exec = exec;
  struct record *r = find_record(owner, node);
  if (r) {
    shim_kparam_blob_put(r->blob);
    if (blob) {
      r->update = update;
      r->blob = blob;
    } else {
      *r = records[--record_count];
    }
  } else if (blob && !add_record(owner, node, update, blob)) {
    shim_kparam_blob_put(blob);
    set_opaque(e, "cudaw ran out of memory keeping its arguments");
  }
  pthread_mutex_unlock(&lock);
}

void shim_kparam_node_keep_fields(const void *owner, bool exec, const void *node,
                                  shim_kparam_node_update_fn update, const void *fields,
                                  size_t size)
{
  if (!owner || !node || !fields || !shim_translate_end) return;
  struct shim_kparam_blob *blob = shim_kparam_blob_new(size);
  if (!blob) {
    shim_kparam_graph_opaque(owner, "cudaw ran out of memory keeping a node's parameters");
    return;
  }
  memcpy(blob->data, fields, size);
  if (!exec) {
    shim_kparam_graph_mark(owner);
    shim_kparam_node_mark(node, owner);
  }
  shim_kparam_node_keep(owner, exec, node, update, blob);
}

void shim_kparam_capture_seen(const void *graph)
{
  if (!graph || !shim_translate_end) return;
  pthread_mutex_lock(&lock);
  struct entry *e = find_or_add(graph, atomic_load(&epoch));
  if (e) e->captured++;
  pthread_mutex_unlock(&lock);
}

size_t shim_kparam_capture_count(const void *graph)
{
  if (!graph || !atomic_load_explicit(&tracked, memory_order_relaxed)) return 0;
  pthread_mutex_lock(&lock);
  struct entry *e = find(graph);
  size_t count = e ? e->captured : 0;
  pthread_mutex_unlock(&lock);
  return count;
}

void shim_kparam_graph_opaque(const void *owner, const char *reason)
{
  if (!owner || !shim_translate_end) return;
  pthread_mutex_lock(&lock);
  set_opaque(find_or_add(owner, atomic_load(&epoch)), reason);
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

void shim_kparam_graph_inherit(const void *to, const void *from, const char *reason)
{
  if (!to || !from || !atomic_load_explicit(&tracked, memory_order_relaxed)) return;
  pthread_mutex_lock(&lock);
  struct entry *source = find(from);
  if (source && !source->graph) {
    unsigned at = source->epoch;
    struct entry *e = find_or_add(to, at);
    if (e && at < e->epoch) e->epoch = at;
    set_opaque(e, source->opaque ? source->opaque : reason);
  }
  pthread_mutex_unlock(&lock);
}

static void exec_mark_locked(const void *exec, const void *graph, const void *origin);

void shim_kparam_exec_mark(const void *exec, const void *graph)
{
  if (!exec || !atomic_load_explicit(&tracked, memory_order_relaxed)) return;
  pthread_mutex_lock(&lock);
  exec_mark_locked(exec, graph, graph);
  pthread_mutex_unlock(&lock);
}

void shim_kparam_exec_updated(const void *exec, const void *graph)
{
  if (!exec || !atomic_load_explicit(&tracked, memory_order_relaxed)) return;
  pthread_mutex_lock(&lock);
  struct entry *e = find(exec);
  const void *origin = e ? e->origin : NULL;
  exec_mark_locked(exec, graph, origin);
  if (origin != graph && (e = find(exec)) != NULL)
    set_opaque(e, "it was updated from another graph (cudaGraphExecUpdate), whose nodes cudaw "
                  "does not pair with the exec's");
  pthread_mutex_unlock(&lock);
}

static void exec_mark_locked(const void *exec, const void *graph, const void *origin)
{
  forget_locked(exec); /* a reused handle, or an update: the graph's state replaces it */
  struct entry *source = find(graph);
  if (source && !source->graph) {
    unsigned at = source->epoch;
    const char *opaque = source->opaque;
    struct entry *e = find_or_add(exec, at); /* may move entries: source is not used after */
    if (e) {
      e->exec = true;
      e->opaque = opaque;
      e->origin = origin;
    }
    size_t count = record_count;
    for (size_t i = 0; e && i < count; i++) {
      if (records[i].owner != graph) continue;
      struct record r = records[i];
      atomic_fetch_add(&r.blob->refs, 1);
      if (!add_record(exec, r.node, r.update, r.blob)) {
        shim_kparam_blob_put(r.blob);
        set_opaque(find(exec), "cudaw ran out of memory keeping its arguments");
      }
    }
  }
}

static bool stale(const void *key, const char *what)
{
  if (!key || !atomic_load_explicit(&tracked, memory_order_relaxed)) return false;
  pthread_mutex_lock(&lock);
  struct entry *e = find(key);
  bool is_stale = e && e->epoch != atomic_load(&epoch);
  bool report = is_stale && !e->reported;
  const char *reason = e && e->opaque ? e->opaque : "it could not be updated";
  if (report) e->reported = true;
  pthread_mutex_unlock(&lock);
  if (report)
    shim_error("kparam: %s %p holds device addresses translated before a checkpoint moved device "
               "memory (CUDAW_VMEM=translate), and cudaw cannot update them: %s. Refused "
               "(cudaErrorNotPermitted); build or capture the graph again after resuming, or use "
               "CUDAW_VMEM=remap", what, key, reason);
  return is_stale;
}

bool shim_kparam_graph_stale(const void *graph) { return stale(graph, "graph"); }
bool shim_kparam_exec_stale(const void *exec) { return stale(exec, "executable graph"); }

void shim_kparam_node_destroyed(const void *node)
{
  if (!node || !atomic_load_explicit(&tracked, memory_order_relaxed)) return;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < record_count;) {
    if (records[i].node != node) {
      i++;
      continue;
    }
    struct entry *owner = find(records[i].owner);
    if (owner && owner->exec)
      set_opaque(owner, "a node of it was destroyed in its graph after it was instantiated, so "
                        "cudaw can no longer name it");
    shim_kparam_blob_put(records[i].blob);
    records[i] = records[--record_count];
  }
  for (size_t i = 0; i < entry_count;) {
    if (entries[i].key == node) entries[i] = entries[--entry_count];
    else i++;
  }
  atomic_store(&tracked, entry_count);
  pthread_mutex_unlock(&lock);
}

void shim_kparam_graph_forget(const void *graph_or_exec)
{
  if (!graph_or_exec || !atomic_load_explicit(&tracked, memory_order_relaxed)) return;
  pthread_mutex_lock(&lock);
  forget_locked(graph_or_exec);
  pthread_mutex_unlock(&lock);
}
