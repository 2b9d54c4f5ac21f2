// --trace DIR: one Chrome trace-event JSON per strategy (chrome://tracing and Perfetto open it),
// gathered from every rank to rank 0 over MPI and written atomically there. A process per rank, a
// thread for compute and one for the comm thread. It formats and moves; PhaseClock records.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "harness/comm/mpi_runtime.h"
#include "harness/train/phase_clock.h"

namespace sb {

// The trace document from every rank's events (index = rank).
nlohmann::json trace_document(const std::string& strategy, const std::vector<RankTrace>& ranks);

// Collective over the world (no comm in flight): gathers each rank's trace to rank 0, which writes
// dir/<strategy>.trace.json. Returns that path.
std::string write_strategy_trace(const std::string& dir, const std::string& strategy,
                                 const RankTrace& local, const MpiRuntime& mpi);

}  // namespace sb
