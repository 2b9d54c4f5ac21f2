// The NCCL backend of the Communicator: collectives on device memory over NCCL communicators
// for the world and the intra/inter groups, bootstrapped over MPI. It runs each collective to
// completion (the Communicator's comm thread provides the asynchrony) and does no accounting
// of its own: bytes by hop class come from the ring model (counted = false).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "harness/comm/communicator.h"
#include "harness/topology.h"

namespace sb {

// Collective over MPI_COMM_WORLD: every rank must call it, after MPI_Init, with the same
// topology. compute_stream: the stream whose prior work every collective waits for.
std::unique_ptr<CommBackend> make_nccl_backend(const Topology& topo, int local_rank,
                                               cudaStream_t compute_stream);
// "major.minor.patch" of the NCCL library linked in.
std::string nccl_version_string();

}  // namespace sb
