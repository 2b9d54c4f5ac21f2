// Defensive reading of results files (see header): every access is checked, so corrupt or
// adversarial input ends in ResultsError, never in an uncaught exception or a crash.
#include "bench/cli/results_reader.h"

#include <nlohmann/json.hpp>

namespace sb {

using nlohmann::json;

namespace {
double number_at(const json& j, std::initializer_list<const char*> path) {
  const json* at = &j;
  std::string where;
  for (const char* key : path) {
    where += std::string("/") + key;
    if (!at->is_object() || !at->contains(key)) throw ResultsError("missing " + where);
    at = &(*at)[key];
  }
  if (!at->is_number()) throw ResultsError(where + " is not a number");
  return at->get<double>();
}
}  // namespace

std::vector<BenchmarkMetrics> read_result_metrics(std::string_view text) {
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) throw ResultsError("not valid JSON");
  if (!doc.is_object() || !doc.contains("suite") || doc["suite"] != "shardbench" ||
      !doc.contains("results") || !doc["results"].is_array())
    throw ResultsError("not a shardbench results file");
  if (doc.contains("kind") && doc["kind"] != "run")
    throw ResultsError("a prediction (kind '" +
                       (doc["kind"].is_string() ? doc["kind"].get<std::string>() : "?") +
                       "'), not a run's results; export reads what `shardbench run --out` writes");
  std::string prefix;
  if (doc.contains("config") && doc["config"].is_object()) {
    const json& c = doc["config"];
    auto str = [](const json& o, const char* k) {
      return o.is_object() && o.contains(k) && o[k].is_string() ? o[k].get<std::string>() : "?";
    };
    const std::string model = c.contains("model") ? str(c["model"], "name") : "?";
    const std::string world =
        c.contains("world_size") && c["world_size"].is_number_integer()
            ? std::to_string(c["world_size"].get<long long>()) : "?";
    prefix = model + "/w" + world + "/" + str(c, "precision") + "/";
  }
  std::vector<BenchmarkMetrics> out;
  for (const json& r : doc["results"]) {
    if (!r.is_object()) throw ResultsError("a result entry is not an object");
    if (!r.contains("status") || r["status"] != "ok") continue;
    if (!r.contains("strategy") || !r["strategy"].is_string())
      throw ResultsError("a result entry has no strategy name");
    const std::string name = r["strategy"].get<std::string>();
    try {
      out.push_back({prefix + name,
                     {{"step_time_s", "s", number_at(r, {"step_time_s", "median"}), true},
                      {"tokens_per_s", "tokens/s", number_at(r, {"throughput", "tokens_per_s"}), false},
                      {"mfu", "ratio", number_at(r, {"throughput", "mfu"}), false},
                      {"peak_bytes_per_rank", "bytes", number_at(r, {"memory", "peak_bytes_per_rank"}), true},
                      {"sent_bytes_intra", "bytes", number_at(r, {"comm", "per_step", "sent_bytes_intra"}), true},
                      {"sent_bytes_inter", "bytes", number_at(r, {"comm", "per_step", "sent_bytes_inter"}), true},
                      {"exposed_s", "s", number_at(r, {"comm", "exposed_s"}), true}}});
    } catch (const ResultsError& e) {
      throw ResultsError("strategy " + name + ": " + e.what());
    }
  }
  return out;
}

}  // namespace sb
