// `shardbench export`: turns a results file into what benchmark dashboards ingest —
// Bencher Metric Format (BMF) and github-action-benchmark's customSmallerIsBetter /
// customBiggerIsBetter arrays. Reads only; rejects files that are not shardbench results.
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "bench/cli/run_options.h"
#include "harness/run/report.h"

namespace sb {
namespace {

using nlohmann::json;

json load_results(const std::string& file) {
  std::ifstream f(file);
  if (!f) throw UsageError("export: cannot open '" + file + "'");
  json doc = json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) throw UsageError("export: '" + file + "' is not valid JSON");
  if (!doc.is_object() || doc.value("suite", "") != "shardbench" || !doc.contains("results") ||
      !doc["results"].is_array())
    throw UsageError("export: '" + file + "' is not a shardbench results file");
  return doc;
}

struct Metric { std::string name, unit; double value; bool smaller_is_better; };

std::vector<std::pair<std::string, std::vector<Metric>>> metrics(const json& doc) {
  std::vector<std::pair<std::string, std::vector<Metric>>> out;
  const json& cfg = doc.value("config", json::object());
  const std::string prefix =
      cfg.contains("model") ? cfg["model"].value("name", "?") + "/w" +
                                  std::to_string(cfg.value("world_size", 0)) + "/" +
                                  cfg.value("precision", "?") + "/"
                            : "";
  for (const json& r : doc["results"]) {
    if (!r.is_object() || r.value("status", "") != "ok") continue;
    try {
      std::vector<Metric> m{
          {"step_time_s", "s", r.at("step_time_s").at("median").get<double>(), true},
          {"tokens_per_s", "tokens/s", r.at("throughput").at("tokens_per_s").get<double>(), false},
          {"mfu", "ratio", r.at("throughput").at("mfu").get<double>(), false},
          {"peak_bytes_per_rank", "bytes", r.at("memory").at("peak_bytes_per_rank").get<double>(), true},
          {"sent_bytes_intra", "bytes", r.at("comm").at("per_step").at("sent_bytes_intra").get<double>(), true},
          {"sent_bytes_inter", "bytes", r.at("comm").at("per_step").at("sent_bytes_inter").get<double>(), true},
          {"exposed_s", "s", r.at("comm").at("exposed_s").get<double>(), true},
      };
      out.push_back({prefix + r.at("strategy").get<std::string>(), m});
    } catch (const json::exception& e) {
      throw UsageError(std::string("export: malformed result entry: ") + e.what());
    }
  }
  return out;
}

}  // namespace

int export_command(const std::string& format, const std::string& file, const std::string& out) {
  const json doc = load_results(file);
  json result;
  if (format == "bencher") {
    result = json::object();  // BMF: {benchmark: {measure: {value}}}
    for (const auto& [bench, ms] : metrics(doc))
      for (const Metric& m : ms) result[bench][m.name] = {{"value", m.value}};
  } else {
    result = {{"customSmallerIsBetter", json::array()}, {"customBiggerIsBetter", json::array()}};
    for (const auto& [bench, ms] : metrics(doc))
      for (const Metric& m : ms)
        result[m.smaller_is_better ? "customSmallerIsBetter" : "customBiggerIsBetter"].push_back(
            {{"name", bench + " " + m.name}, {"unit", m.unit}, {"value", m.value}});
  }
  if (out.empty()) {
    std::cout << result.dump(2) << "\n";
  } else {
    write_json_atomic(out, result);
  }
  return 0;
}

}  // namespace sb
