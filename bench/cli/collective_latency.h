// The latency of the run's own collectives, measured at its start as the CPU's sgemm is: on a
// CPU every collective is a ring of MPI_Sendrecv on a comm thread, and each step waits until
// its peer process is scheduled. On cores shared by more ranks (and other jobs) than they have,
// that wait, not the bytes, sets the time of a small collective, and it changes with the load.
// So a CPU run times one-float all-reduces of its own backend over its groups and gives the
// embedded prediction the per-collective and per-step latencies they imply, in the terms
// traffic.cc's collective time already has (base_latency_s + ring steps x link latency_s).
#pragma once

#include <string>

#include "harness/comm/mpi_runtime.h"
#include "harness/predict/cluster.h"
#include "harness/topology.h"

namespace sb {

// Medians (over repeats, the slowest rank's) of a 1 KiB all-reduce of `impl` over the world
// and over the node; 0 where a group has one rank.
struct CollectiveLatency {
  double world_s = 0, intra_s = 0;
  int repeats = 0;
  // and a 4 MiB one over the node (over the world where a node holds one rank), median of 15:
  // the shared-memory bandwidth under the same load
  GroupKind big_group = GroupKind::kIntra;
  double big_s = 0;
  // and, where asked (namespace hosts on an unshaped link), a 16 MiB one over the world,
  // median of 3: what MPI's TCP moves across the hosts' veths while every boundary of the
  // ring sends at once. 0: not measured.
  double world_big_s = 0;
  // and, where asked (ranks outnumber cores), the two 1 KiB rings again while a thread on every
  // rank runs sgemms without pause, as a step's compute runs beside its collectives
  double world_beside_s = 0, intra_beside_s = 0;
  // and the world's 1 KiB ring right after a burst of sgemms on every rank (mean over repeats
  // and ranks): the ranks reach it apart
  double world_after_compute_s = 0, burst_s = 0;  // and the burst's own time (mean)
};
// Collective over every rank of `mpi`: each calls it at the same point, before any strategy.
// Runs on a communicator and ledger of its own, so no strategy's bytes or trace see it.
CollectiveLatency measure_collective_latency(MpiRuntime& mpi, const Topology& topo,
                                             CollectiveImpl impl, bool world_bandwidth = false,
                                             bool beside_compute = false, int repeats = 30);

// The latencies of `c` that reproduce both measurements under traffic.cc's rule, an all-reduce
// over n ranks costing base + 2(n-1) ring steps: the delay is the hosts' (each step waits for
// its peer process), so every step gets it, and an inter-node step adds the link's own
// `link_latency_s` (the probe's half round trip with --hosts netns; 0 between virtual nodes,
// whose link is the same shared memory). Solved for base and step from the world's ring and
// the node's (each at least 0); with one node or one rank per node, base 0. The 4 MiB ring's
// extra time over its 1 KiB one gives the shared-memory bandwidth (intra; inter too between
// virtual nodes, not across --hosts netns). With the 16 MiB world ring measured (an unshaped
// --hosts netns link), the inter-node link's bandwidth is that ring's boundary bytes over its
// extra time, and the fabric H times that. With the rings timed beside compute, their extra
// time over the idle ones is split the same way into beside_compute_base_s and _step_s.
// Returns the line the cluster's source gets.
std::string apply_collective_latency(Cluster& c, const CollectiveLatency& l, const Topology& topo,
                                     double link_latency_s);

}  // namespace sb
