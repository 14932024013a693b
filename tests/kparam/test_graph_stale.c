/* Description: what happens to graphs holding translated addresses after a relocation (issue 21,
 * cudart_shim/glue/kparam_graphs.c linked directly, with counting update functions). Checks:
 * nothing is tracked under remap; under translate every graph and exec whose nodes cudaw kept is
 * updated node by node (graphs through their graph nodes, execs through their own records, an
 * exec-level override winning over the graph's), stays launchable and is updated again at the next
 * relocation; opaque ones (captured, clones, child graphs, updated from another graph) and ones
 * whose node update failed are refused with their reason named once; graphs built afterwards are
 * fresh; destroyed handles are forgotten with their records; a destroyed node leaves its graph and
 * makes an exec holding it refused. */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim_kparam.h"
#include "test.h"

uintptr_t shim_translate_base, shim_translate_end;
int shim_log_level = SHIM_LOG_INFO;
static int errors_logged;
static char last_error[1024];
void shim_log(enum shim_log_level level, const char *fmt, ...)
{
  if (level != SHIM_LOG_ERROR) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  if (strstr(last_error, "translated before a checkpoint")) errors_logged++;
}

/* kparam.c's blobs, as the library has them. */
struct shim_kparam_blob *shim_kparam_blob_new(size_t size)
{
  struct shim_kparam_blob *blob = calloc(1, sizeof *blob + size);
  if (blob) atomic_init(&blob->refs, 1), blob->size = size;
  return blob;
}

static int blobs_freed;
void shim_kparam_blob_put(struct shim_kparam_blob *blob)
{
  if (blob && atomic_fetch_sub(&blob->refs, 1) == 1) free(blob), blobs_freed++;
}

/* An update records what it was asked: owner, exec, node and the blob's first int. */
struct call {
  const void *owner, *node;
  bool exec;
  int value;
};
static struct call calls[32];
static int call_count;

static int update_ok(const void *owner, bool exec, const void *node,
                     const struct shim_kparam_blob *blob)
{
  int value;
  memcpy(&value, blob->data, sizeof value);
  if (call_count < 32) calls[call_count] = (struct call){owner, node, exec, value};
  call_count++;
  return 0;
}

static int update_fails(const void *owner, bool exec, const void *node,
                        const struct shim_kparam_blob *blob)
{
  (void)owner, (void)exec, (void)node, (void)blob;
  return -EIO;
}

static struct shim_kparam_blob *blob_of(int value)
{
  struct shim_kparam_blob *blob = shim_kparam_blob_new(sizeof value);
  memcpy(blob->data, &value, sizeof value);
  return blob;
}

static bool called(const void *owner, bool exec, const void *node, int value)
{
  for (int i = 0; i < call_count && i < 32; i++)
    if (calls[i].owner == owner && calls[i].exec == exec && calls[i].node == node &&
        calls[i].value == value)
      return true;
  return false;
}

int main(void)
{
  static int g1, n1, n2, exec1, exec2, captured, cap_exec, clone, parent, failing, fexec, fresh,
      other, updated_exec;
  /* remap: translation is the identity, nothing is tracked or stale */
  shim_kparam_graph_mark(&g1);
  shim_kparam_node_keep(&g1, false, &n1, update_ok, blob_of(1));
  shim_kparam_exec_mark(&exec1, &g1);
  CHECK_EQ(shim_kparam_relocated(), 0);
  CHECK(!shim_kparam_graph_stale(&g1) && !shim_kparam_exec_stale(&exec1));
  CHECK_EQ(shim_kparam_epoch(), 0);
  CHECK_EQ(call_count, 0);
  CHECK(blobs_freed == 1, "a blob given under remap is dropped");

  shim_translate_base = 0x100000;
  shim_translate_end = 0x200000;
  /* g1: two kept nodes; exec1 from it with n2 overridden at exec level; exec2 plain. */
  shim_kparam_graph_mark(&g1);
  shim_kparam_node_mark(&n1, &g1);
  CHECK(shim_kparam_node_graph(&n1) == &g1);
  shim_kparam_node_keep(&g1, false, &n1, update_ok, blob_of(11));
  shim_kparam_node_keep(&g1, false, &n2, update_ok, blob_of(12));
  shim_kparam_exec_mark(&exec1, &g1);
  shim_kparam_exec_mark(&exec2, &g1);
  shim_kparam_node_keep(&exec1, true, &n2, update_ok, blob_of(22));
  shim_kparam_node_keep(&g1, false, &n1, update_ok, blob_of(13)); /* the graph's only */
  /* opaque: a capture, its exec, a clone of g1 and a graph with g1 as a child */
  shim_kparam_graph_mark(&captured);
  shim_kparam_graph_opaque(&captured, "it was captured");
  shim_kparam_exec_mark(&cap_exec, &captured);
  shim_kparam_graph_inherit(&clone, &g1, "it is a clone");
  shim_kparam_graph_inherit(&parent, &g1, "it has a child graph node");
  /* a node whose update fails */
  shim_kparam_node_keep(&failing, false, &n1, update_fails, blob_of(5));
  shim_kparam_exec_mark(&fexec, &failing);
  /* exec updated from another graph than its own */
  shim_kparam_node_keep(&other, false, &n1, update_ok, blob_of(7));
  shim_kparam_exec_mark(&updated_exec, &g1);
  shim_kparam_exec_updated(&updated_exec, &other);
  shim_kparam_exec_updated(&exec2, &g1); /* from its own graph: still updatable */
  CHECK(!shim_kparam_graph_stale(&g1) && !shim_kparam_exec_stale(&exec1) &&
        !shim_kparam_exec_stale(&cap_exec), "fresh before");

  CHECK_EQ(shim_kparam_relocated(), 0);
  CHECK_EQ(shim_kparam_epoch(), 1);
  CHECK(called(&g1, false, &n1, 13) && called(&g1, false, &n2, 12), "graph nodes updated");
  CHECK(called(&exec1, true, &n1, 11) && called(&exec1, true, &n2, 22),
        "exec nodes updated from what the exec holds");
  CHECK(called(&exec2, true, &n1, 13) && called(&exec2, true, &n2, 12),
        "an exec updated from its own graph takes the graph's nodes");
  CHECK(!called(&captured, false, &n1, 0) && !called(&updated_exec, true, &n1, 7));
  CHECK(!shim_kparam_graph_stale(&g1) && !shim_kparam_exec_stale(&exec1) &&
        !shim_kparam_exec_stale(&exec2), "updated: launchable");
  CHECK_EQ(errors_logged, 0);
  CHECK(shim_kparam_graph_stale(&captured) && strstr(last_error, "it was captured"));
  CHECK(shim_kparam_exec_stale(&cap_exec) && strstr(last_error, "it was captured"),
        "an exec of an opaque graph");
  CHECK(shim_kparam_graph_stale(&clone) && strstr(last_error, "it is a clone"));
  CHECK(shim_kparam_graph_stale(&parent) && strstr(last_error, "child graph node"));
  CHECK(shim_kparam_graph_stale(&failing) && strstr(last_error, "a node update failed"));
  CHECK(shim_kparam_exec_stale(&fexec), "the failing graph's exec");
  CHECK(shim_kparam_exec_stale(&updated_exec) && strstr(last_error, "updated from another graph"));
  CHECK_EQ(errors_logged, 7);
  CHECK(shim_kparam_graph_stale(&captured), "still stale; reported once");
  CHECK_EQ(errors_logged, 7);

  /* A second relocation updates again; what is stale stays stale. */
  int before = call_count;
  CHECK_EQ(shim_kparam_relocated(), 0);
  CHECK(call_count - before == 7, "g1 (2), exec1 (2), exec2 (2) and other (1) again");
  CHECK(!shim_kparam_graph_stale(&g1) && !shim_kparam_exec_stale(&exec1));
  CHECK(shim_kparam_graph_stale(&captured) && shim_kparam_exec_stale(&fexec));

  /* Built after the relocation, even opaque: fresh until the next one. */
  shim_kparam_graph_mark(&fresh);
  shim_kparam_graph_opaque(&fresh, "it was captured");
  CHECK(!shim_kparam_graph_stale(&fresh));
  /* Destroyed handles are forgotten (the runtime reuses them), nodes and records with them. */
  int freed = blobs_freed;
  shim_kparam_graph_forget(&exec1);
  CHECK(blobs_freed - freed == 2,
        "exec1's blobs freed: n1 as instantiated (the graph's is newer), its own n2");
  shim_kparam_graph_forget(&g1);
  shim_kparam_graph_forget(&captured);
  CHECK(!shim_kparam_graph_stale(&g1) && !shim_kparam_exec_stale(&exec1) &&
        !shim_kparam_graph_stale(&captured));
  CHECK(shim_kparam_node_graph(&n1) == NULL);
  /* A node destroyed in its graph: the graph's record goes, an exec holding it is refused. */
  static int g5, n5, e5;
  shim_kparam_node_keep(&g5, false, &n5, update_ok, blob_of(55));
  shim_kparam_exec_mark(&e5, &g5);
  shim_kparam_node_destroyed(&n5);
  before = call_count;
  CHECK_EQ(shim_kparam_relocated(), 0);
  CHECK(call_count - before == 3, "only exec2 (2) and other (1) are left to update");
  CHECK(!called(&g5, false, &n5, 55) && !called(&e5, true, &n5, 55));
  CHECK(!shim_kparam_graph_stale(&g5), "the graph without the node: nothing left to update");
  CHECK(shim_kparam_exec_stale(&e5) && strstr(last_error, "destroyed in its graph"));
  printf("graphs after relocation: updated or refused with the reason: ok\n");
  return 0;
}
