// `shardbench export`: turns a results file into what benchmark dashboards ingest —
// Bencher Metric Format (BMF) and github-action-benchmark's customSmallerIsBetter /
// customBiggerIsBetter arrays. Reads only; rejects files that are not shardbench results.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bench/cli/output_path.h"
#include "bench/cli/results_reader.h"
#include "bench/cli/run_options.h"
#include "harness/run/report.h"

namespace sb {

int export_command(const std::string& format, const std::string& file, const std::string& out) {
  if (!out.empty()) prepare_output_path("--out", out);
  std::ifstream f(file);
  if (!f) throw UsageError("export: cannot open '" + file + "'");
  std::stringstream text;
  text << f.rdbuf();
  std::vector<BenchmarkMetrics> benches;
  try {
    benches = read_result_metrics(text.str());
  } catch (const ResultsError& e) {
    throw UsageError("export: '" + file + "': " + e.what());
  }
  nlohmann::json result;
  if (format == "bencher") {
    result = nlohmann::json::object();  // BMF: {benchmark: {measure: {value}}}
    for (const auto& b : benches)
      for (const Metric& m : b.metrics) result[b.benchmark][m.name] = {{"value", m.value}};
  } else {
    result = {{"customSmallerIsBetter", nlohmann::json::array()},
              {"customBiggerIsBetter", nlohmann::json::array()}};
    for (const auto& b : benches)
      for (const Metric& m : b.metrics)
        result[m.smaller_is_better ? "customSmallerIsBetter" : "customBiggerIsBetter"].push_back(
            {{"name", b.benchmark + " " + m.name}, {"unit", m.unit}, {"value", m.value}});
  }
  if (out.empty()) {
    std::cout << result.dump(2) << "\n";
  } else {
    write_json_atomic(out, result);
  }
  // The document is written (it says what there is), but a run in which no strategy succeeded
  // exits 1, as `shardbench run` did for it: a dashboard job must not pass on nothing.
  if (benches.empty()) {
    std::fprintf(stderr, "shardbench: export: '%s' has no strategy with status ok; nothing to "
                 "track\n", file.c_str());
    return 1;
  }
  return 0;
}

}  // namespace sb
