// The measured run of one strategy on this MPI job: the predicted-OOM skip, the step loop
// (train_loop.h) with the run's step observers (fault injection, two-host link sampling), the
// agreement on failure and the aggregation over ranks. The report module owns the JSON.
#pragma once

#include <string>

#include "harness/comm/communicator.h"
#include "harness/comm/mpi_runtime.h"
#include "harness/device/device.h"
#include "harness/train/train_loop.h"

namespace sb {

// Runs `name` under cfg. Never throws for a failing strategy: the failure is the status.
StrategyRun run_strategy(const std::string& name, const RunConfig& cfg, MpiRuntime& mpi,
                         Communicator& comm, Device& device, bool keep_params = false);

}  // namespace sb
