// Page faults of this process (getrusage RUSAGE_SELF: every thread, so a rank's comm thread too),
// read at step boundaries: a step that maps, unmaps or first touches memory shows here, which is
// how the suite checks that steady-state steps allocate nothing new (docs/measurement.md).
#pragma once

#include <cstdint>

namespace sb {

struct PageFaults {
  uint64_t minor = 0;  // served without I/O: first touch of a fresh anonymous page, mostly
  uint64_t major = 0;  // needed I/O
  uint64_t total() const { return minor + major; }
};

PageFaults process_page_faults();  // since the process started; zeros where unavailable

// Measured steps faulting more than this per rank per step (the median over the steps) are
// reported: a warning, and tests/mpi/run_page_faults_test.cc fails. 64 pages of 4 KiB are
// 256 KiB a step; the churn it catches on `small` is thousands (zero3: ~10,000 per step).
constexpr uint64_t kSteadyStateFaultsPerStep = 64;

}  // namespace sb
