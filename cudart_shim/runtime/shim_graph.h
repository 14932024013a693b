/* Between the runtime layer's launch and graph overrides (launch.c, graph.c). */
#ifndef CUDAW_SHIM_RUNTIME_GRAPH_H
#define CUDAW_SHIM_RUNTIME_GRAPH_H

#include "shim_generated.h"

/* A kernel launch on stream succeeded with translated arguments while a stream capture may be
 * open: if stream is capturing, the node the launch became is recorded with args (the program's,
 * virtual) so that it can be updated after a move (graph.c). Call only under translate. */
void shim_graph_captured_launch(cudaStream_t stream, const void *func, dim3 grid, dim3 block,
                                size_t shared_mem, void **args);

#endif
