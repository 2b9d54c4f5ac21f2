// Shared main of the multi-rank GoogleTest binaries: MPI up before the tests, down after, the
// virtual-node shape from --rpn=G (0 = MPI_COMM_TYPE_SHARED), the model from --model=SPEC, and only rank 0's full printer, so
// ctest output stays readable; other ranks print just their failures, prefixed with the rank.
// Any rank's failure makes mpirun exit non-zero.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "harness/comm/mpi_runtime.h"
#include "tests/mpi/mpi_env.h"

namespace sb::testing {
MpiRuntime* g_runtime = nullptr;
int g_ranks_per_node = 0;
const char* g_model_spec = "tiny";
int g_partition = 0;

namespace {
// Prints only failed assertions and failed tests, each line prefixed with "[rank r]".
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
    std::fflush(stderr);
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Failed()) return;
    std::fprintf(stderr, "[rank %d] [  FAILED  ] %s.%s\n", rank_, info.test_suite_name(),
                 info.name());
    std::fflush(stderr);
  }

 private:
  int rank_;
};
}  // namespace
}  // namespace sb::testing

int main(int argc, char** argv) {
  sb::MpiRuntime runtime(&argc, &argv);
  sb::testing::g_runtime = &runtime;
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--rpn=", 6) == 0)
      sb::testing::g_ranks_per_node = std::atoi(argv[i] + 6);
    else if (std::strncmp(argv[i], "--model=", 8) == 0)
      sb::testing::g_model_spec = argv[i] + 8;
    else if (std::strncmp(argv[i], "--partition=", 12) == 0)
      sb::testing::g_partition = std::atoi(argv[i] + 12);
  if (runtime.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new sb::testing::FailurePrinter(runtime.rank()));
  }
  int failed = RUN_ALL_TESTS();
  // Agree on the verdict so every rank exits the same way.
  failed = int(runtime.max_over_ranks(double(failed != 0)));
  return failed;
}
