// MPI process lifetime and discovery: init with the thread level the comm thread needs, the
// abort hook for SB_CHECK, the node map from MPI_Comm_split_type, and the MPI backends.
// Everything that includes mpi.h on the host path is behind this header and mpi_backend.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/topology.h"

namespace sb {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);  // MPI_Init_thread(MPI_THREAD_MULTIPLE), abort hook
  ~MpiRuntime();                        // MPI_Finalize
  int world_size() const;
  int rank() const;
  // ranks_per_node > 0: consecutive virtual nodes; 0: nodes from MPI_COMM_TYPE_SHARED.
  Topology topology(int ranks_per_node) const;
  std::string library_version() const;
  // Small host-side helpers used by the driver on the main thread, before/after a
  // Communicator exists (never while one is alive and issuing).
  double max_over_ranks(double v) const;
  double sum_over_ranks(double v) const;
  uint64_t max_over_ranks_u64(uint64_t v) const;
  uint64_t sum_over_ranks_u64(uint64_t v) const;
  std::vector<double> gather_to_root(double v) const;  // size world on rank 0, empty elsewhere
  // Every rank's string, in rank order, on rank 0 (empty elsewhere).
  std::vector<std::string> gather_strings_to_root(const std::string& s) const;
  void barrier() const;
  void broadcast_string(std::string& s, int root) const;
  [[noreturn]] void abort(int code) const;
};

// The MPI backend: kRing runs every collective as a ring of MPI_Sendrecv and counts each
// transfer by hop class; kMpiNative calls MPI_Allreduce/Reduce_scatter_block/Allgather/Bcast
// on a sub-communicator and leaves the split to the ring model (counted = false).
std::unique_ptr<CommBackend> make_mpi_backend(const Topology& topo, CollectiveImpl impl);
// The same with at most max_elems_per_call elements per MPI call (default INT_MAX), so tests can
// exercise the split of large counts with small buffers.
std::unique_ptr<CommBackend> make_mpi_backend(const Topology& topo, CollectiveImpl impl,
                                              size_t max_elems_per_call);

}  // namespace sb
