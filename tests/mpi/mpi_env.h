// What the shared MPI test main provides to multi-rank tests.
#pragma once

#include "harness/comm/mpi_runtime.h"
#include "harness/topology.h"

namespace sb::testing {
extern MpiRuntime* g_runtime;
extern int g_ranks_per_node;  // from --rpn=G; 0 = nodes from MPI_COMM_TYPE_SHARED
// From --model=SPEC (default "tiny"): the shape the strategy tests train. mpi_tests.cmake runs
// them also on an "odd" shape whose sizes divide none of 2, 3, 4, at a world of 3 (padding).
extern const char* g_model_spec;
// From --partition=P (default 0: the node): MiCS's partition size (mpi_tests.cmake runs the MiCS
// tests with partitions that span nodes and that split one).
extern int g_partition;
inline Topology test_topology() {
  return g_runtime->topology(g_ranks_per_node).with_partition(g_partition);
}
}  // namespace sb::testing
