// `shardbench export`: turns results files (or a matrix index, which names its cells' files)
// into what benchmark dashboards ingest as they are — Bencher Metric Format (BMF) with bounds,
// github-action-benchmark's customBiggerIsBetter / customSmallerIsBetter array (one tool per
// file), and Google Benchmark's JSON (github-action-benchmark `googlecpp`, Bencher's adapter).
// Reads only; rejects files that are not shardbench results.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/cli/output_path.h"
#include "bench/cli/results_reader.h"
#include "bench/cli/run_options.h"
#include "harness/launch/report.h"

namespace sb {
namespace {

using nlohmann::json;

std::string read_text(const std::string& file) {
  std::ifstream f(file);
  if (!f) throw UsageError("export: cannot open '" + file + "'");
  std::stringstream text;
  text << f.rdbuf();
  return text.str();
}

// The results files `file` stands for: itself, or the cells of a matrix index (ci/matrix.py).
std::vector<std::string> expand_index(const std::string& file, const std::string& text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  // Compared as JSON: a "kind" that is not a string (null, a number) is not an index either.
  if (!doc.is_object() || !doc.contains("kind") || doc.at("kind") != "matrix-index") return {file};
  std::vector<std::string> files;
  const auto dir = std::filesystem::path(file).parent_path();
  for (const json& cell : doc.value("cells", json::array()))
    if (cell.is_object() && cell.contains("file") && cell["file"].is_string() &&
        std::filesystem::exists(dir / cell["file"].get<std::string>()))
      files.push_back((dir / cell["file"].get<std::string>()).string());
  if (files.empty()) throw UsageError("export: '" + file + "': the matrix index lists no files");
  return files;
}

json bencher(const std::vector<ResultsSummary>& docs) {
  json out = json::object();  // BMF: {benchmark: {measure: {value, lower_value, upper_value}}}
  for (const auto& d : docs)
    for (const auto& b : d.benchmarks)
      for (const Metric& m : b.metrics)
        out[b.benchmark][m.name] = {
            {"value", m.value}, {"lower_value", m.lower}, {"upper_value", m.upper}};
  return out;
}

json github_action_benchmark(const std::vector<ResultsSummary>& docs, bool bigger) {
  json out = json::array();  // one tool's array: customBiggerIsBetter or customSmallerIsBetter
  for (const auto& d : docs)
    for (const auto& b : d.benchmarks)
      for (const Metric& m : b.metrics) {
        if (m.smaller_is_better == bigger) continue;
        json e{{"name", b.benchmark + " " + m.name}, {"unit", m.unit}, {"value", m.value}};
        if (m.upper > m.lower) e["range"] = fmt::format("± {:.4g}", (m.upper - m.lower) / 2);
        if (!b.error.empty()) e["extra"] = b.error;
        out.push_back(std::move(e));
      }
  return out;
}

json google_benchmark(const std::vector<ResultsSummary>& docs) {
  json benchmarks = json::array();
  for (const auto& d : docs)
    for (const auto& b : d.benchmarks) {
      json e{{"name", b.benchmark}, {"run_name", b.benchmark}, {"run_type", "iteration"},
             {"repetitions", 1}, {"repetition_index", 0}, {"threads", 1},
             {"iterations", b.steps}, {"time_unit", "ms"}};
      if (b.status != ResultStatus::kOk) {
        e["error_occurred"] = true;
        e["error_message"] = b.error;
        e["real_time"] = e["cpu_time"] = 0.0;
      }
      for (const Metric& m : b.metrics) {  // user counters sit beside the times, as in GB
        if (m.name == "step_time_s") {
          e["real_time"] = e["cpu_time"] = m.value * 1e3;
          e["real_time_ci95_ms"] = json::array({m.lower * 1e3, m.upper * 1e3});
        } else {
          e[m.name] = m.value;
        }
      }
      benchmarks.push_back(std::move(e));
    }
  const ResultsSummary& first = docs.front();
  json context{{"date", first.created_utc},  {"host_name", first.host},
               {"executable", "shardbench"}, {"library_build_type", "release"},
               {"git_commit", first.git_commit}, {"backend", first.backend},
               {"caches", json::array()}};
  return {{"context", context}, {"benchmarks", benchmarks}};
}

}  // namespace

int export_command(const ExportArgs& a) {
  if (!a.out.empty()) prepare_output_path("--out", a.out);
  if (a.format == "github-action-benchmark" && a.tool.empty())
    throw UsageError("export --format github-action-benchmark: --tool is required; allowed: "
                     "bigger|smaller (one file per github-action-benchmark tool)");
  if (a.format != "github-action-benchmark" && !a.tool.empty())
    throw UsageError("export --tool: only with --format github-action-benchmark");
  std::vector<ResultsSummary> docs;
  for (const std::string& given : a.files) {
    for (const std::string& file : expand_index(given, read_text(given))) {
      try {
        docs.push_back(read_results(read_text(file)));
      } catch (const ResultsError& e) {
        throw UsageError("export: '" + file + "': " + e.what());
      }
    }
  }
  json result = a.format == "bencher"  ? bencher(docs)
                : a.format == "gbench" ? google_benchmark(docs)
                                       : github_action_benchmark(docs, a.tool == "bigger");
  if (a.out.empty()) {
    std::cout << result.dump(2) << "\n";
  } else {
    write_json_atomic(a.out, result);
  }
  // The document is written (it says what there is, failures as status metrics), but when no
  // strategy succeeded the export exits 1, as `shardbench run` did: a dashboard job must not
  // pass on nothing.
  bool any_ok = false;
  for (const auto& d : docs)
    for (const auto& b : d.benchmarks) any_ok = any_ok || b.status == ResultStatus::kOk;
  if (!any_ok) {
    std::fprintf(stderr, "shardbench: export: no strategy with status ok in the given files; "
                 "nothing to track\n");
    return 1;
  }
  return 0;
}

}  // namespace sb
