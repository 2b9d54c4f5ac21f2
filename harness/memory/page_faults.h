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

// A steady-state step faulting more than this per rank is reported (a warning, and the test
// tests/mpi/run_page_faults_test.cc fails). Counted, not timed: 64 pages of 4 KiB are 256 KiB
// a step, under one gradient bucket of the tiny model; the churn it catches is thousands.
constexpr uint64_t kSteadyStateFaultsPerStep = 64;

}  // namespace sb
