// Steady state, counted: after the warm-up step every strategy's measured steps are served by
// the device's caching allocator (hits, no new block, none given back) and fault no more than
// kSteadyStateFaultsPerStep pages per rank per step. A strategy that allocates outside the
// cache (a std::vector temporary per step, a buffer mapped and unmapped each step) fails here.
#include <gtest/gtest.h>

#include "harness/memory/page_faults.h"
#include "tests/mpi/run_fixture.h"

namespace sb::testing {
namespace {

class SteadyStateTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SteadyStateTest, MeasuredStepsReuseCachedBlocksAndDoNotFault) {
  RunConfig cfg = tiny_config(Precision::kFp32, 3);
  cfg.warmup = 1;
  const StrategyRun r = run(GetParam(), cfg, false);
  ASSERT_EQ(r.status, "ok") << r.error;
  ASSERT_EQ(r.minor_faults.size(), 3u);
  for (size_t i = 0; i < r.minor_faults.size(); ++i)
    EXPECT_LE(r.minor_faults[i] + r.major_faults[i], kSteadyStateFaultsPerStep)
        << "measured step " << i << ": " << r.minor_faults[i] << " minor + "
        << r.major_faults[i] << " major page faults on a rank";
  // ddp allocates nothing in a step (hits 0); the others take every block from the cache.
  EXPECT_EQ(r.measured_misses, 0u) << "a measured step asked the OS for a new block";
  EXPECT_EQ(r.measured_backing_frees, 0u) << "a measured step gave a block back to the OS";
  EXPECT_GT(r.allocator.reserved_bytes, 0u) << "the device's memory is not cached";
}

INSTANTIATE_TEST_SUITE_P(AllStrategies, SteadyStateTest, ::testing::ValuesIn(strategy_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace sb::testing
