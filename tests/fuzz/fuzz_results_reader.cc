// libFuzzer target: the results reader behind `shardbench export` must turn any input into
// metrics or a ResultsError, never crash or throw anything else.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "bench/cli/results_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    sb::read_result_metrics(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const sb::ResultsError&) {
  }
  return 0;
}
