/* Description: graphs holding translated kernel arguments are refused after a relocation
 * (cudart_shim/glue/kparam_graphs.c, linked directly: the checkpoint glue that calls
 * shim_kparam_relocated is not in this tree yet). Checks: nothing is stale under remap; under
 * translate a marked graph, its execs, clones and parents become stale after
 * shim_kparam_relocated, graphs built afterwards do not, destroyed handles are forgotten. */
#include <stdarg.h>
#include <string.h>

#include "shim_kparam.h"
#include "test.h"

uintptr_t shim_translate_base, shim_translate_end;
static int errors_logged;
void shim_log(enum shim_log_level level, const char *fmt, ...)
{
  if (level == SHIM_LOG_ERROR && strstr(fmt, "translated before a checkpoint")) errors_logged++;
}

int main(void)
{
  static int g1, g2, clone, parent, exec1, exec2, fresh, fresh_exec, node;
  /* remap: translation is the identity, nothing is tracked or stale */
  shim_kparam_graph_mark(&g1);
  shim_kparam_exec_mark(&exec1, &g1);
  CHECK_EQ(shim_kparam_relocated(), 0);
  CHECK(!shim_kparam_graph_stale(&g1) && !shim_kparam_exec_stale(&exec1));
  CHECK_EQ(shim_kparam_epoch(), 0);

  shim_translate_base = 0x100000;
  shim_translate_end = 0x200000;
  shim_kparam_graph_mark(&g1);
  shim_kparam_node_mark(&node, &g1);
  CHECK(shim_kparam_node_graph(&node) == &g1);
  shim_kparam_exec_mark(&exec1, &g1);
  shim_kparam_exec_mark(&exec2, &g2); /* g2 holds nothing translated */
  shim_kparam_graph_inherit(&clone, &g1);
  shim_kparam_graph_inherit(&parent, &clone);
  CHECK(!shim_kparam_graph_stale(&g1) && !shim_kparam_exec_stale(&exec1), "fresh before");

  CHECK_EQ(shim_kparam_relocated(), 0);
  CHECK_EQ(shim_kparam_epoch(), 1);
  CHECK(shim_kparam_graph_stale(&g1), "graph marked before relocation");
  CHECK(shim_kparam_exec_stale(&exec1), "exec instantiated before relocation");
  CHECK(shim_kparam_graph_stale(&clone) && shim_kparam_graph_stale(&parent), "clone/parent");
  CHECK(!shim_kparam_graph_stale(&g2) && !shim_kparam_exec_stale(&exec2), "untranslated graph");
  CHECK(shim_kparam_graph_stale(&g1), "still stale; reported once");
  CHECK_EQ(errors_logged, 4);

  /* Re-setting a kernel node after relocation does not make a stale graph fresh. */
  shim_kparam_graph_mark(&g1);
  CHECK(shim_kparam_graph_stale(&g1));
  /* Built after the relocation: fresh. */
  shim_kparam_graph_mark(&fresh);
  shim_kparam_exec_mark(&fresh_exec, &fresh);
  CHECK(!shim_kparam_graph_stale(&fresh) && !shim_kparam_exec_stale(&fresh_exec));
  /* Destroyed handles are forgotten (the runtime reuses them), nodes with their graph. */
  shim_kparam_graph_forget(&g1);
  shim_kparam_graph_forget(&exec1);
  CHECK(!shim_kparam_graph_stale(&g1) && !shim_kparam_exec_stale(&exec1));
  CHECK(shim_kparam_node_graph(&node) == NULL);
  printf("graph staleness after relocation: ok\n");
  return 0;
}
