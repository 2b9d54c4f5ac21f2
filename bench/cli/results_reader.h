// Reads a shardbench results document from text for the tools that consume one (export, and
// the fuzz target): rejects anything that is not a shardbench results file with one clear
// message, and extracts the per-strategy metrics dashboards track. Never trusts the input.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sb {

struct ResultsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Metric {
  std::string name, unit;
  double value;
  bool smaller_is_better;
};
struct BenchmarkMetrics {
  std::string benchmark;  // "<model>/w<world>/<precision>/<strategy>"
  std::vector<Metric> metrics;
};

// Throws ResultsError naming what is wrong (not JSON, foreign, malformed entry).
std::vector<BenchmarkMetrics> read_result_metrics(std::string_view text);

}  // namespace sb
