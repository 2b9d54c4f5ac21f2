// Reads a shardbench results document from text for the tools that consume one (export, and
// the fuzz target): rejects anything that is not a shardbench results file with one clear
// message, and extracts per strategy what dashboards track: a series name that carries every
// knob that differs from its default, the status, and each metric with its bounds. Never
// trusts the input.
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
  double lower, upper;  // timed: the 95 % CI of the median step (order statistics); else value
};

enum class ResultStatus { kOk = 0, kOom = 1, kError = 2 };  // the `status` metric's value

struct BenchmarkMetrics {
  // "<model>/w<world>n<nodes>/<precision>[/<knob>=<value>,...]/<strategy>"
  std::string benchmark;
  ResultStatus status = ResultStatus::kOk;
  std::string error;           // oom/error: the run's message
  int steps = 0;               // measured steps (Google Benchmark's iterations)
  std::vector<Metric> metrics;  // always `status`; the measurements only when ok
};

struct ResultsSummary {
  std::string created_utc, host, git_commit, backend;
  std::vector<BenchmarkMetrics> benchmarks;
};

// Throws ResultsError naming what is wrong (not JSON, foreign, malformed entry).
ResultsSummary read_results(std::string_view text);
inline std::vector<BenchmarkMetrics> read_result_metrics(std::string_view text) {
  return read_results(text).benchmarks;
}

// Nonparametric 95 % confidence interval of the median of `samples` (order statistics of the
// binomial(n, 1/2) law; [min, max] when n is too small to reach 95 %). plots/compare.py
// implements the same rule for the gate.
std::pair<double, double> median_ci95(std::vector<double> samples);

}  // namespace sb
