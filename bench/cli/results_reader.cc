// Defensive reading of results files (see header): every access is checked, so corrupt or
// adversarial input ends in ResultsError, never in an uncaught exception or a crash.
#include "bench/cli/results_reader.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "bench/cli/options_table.h"
#include "bench/cli/run_options.h"

namespace sb {

using nlohmann::json;

namespace {

// The experiment's knobs as config.* keys, in the order a series name has listed them since
// each was added (so a dashboard's series keep their names), with the value `shardbench run`
// records when no flag changes it: the options table's default and its derived keys
// (bench/cli/options_table.h json_defaults), or, for the flags only `run` takes, RunArgs's
// initialisers (run_options.h, header only: the fuzz target links nothing more).
// steps/warmup/seed are left out: they change how long or on what data a run measures, not
// what is measured. precision, seq_len and tied_head are handled apart.
const std::vector<std::pair<const char*, json>>& knob_defaults() {
  static const std::vector<std::pair<const char*, json>> k = [] {
    const RunArgs run{};
    const std::vector<std::pair<const char*, json>> not_flags = {
        {"collectives", run.collectives}, {"lr", run.lr}, {"device", run.device}};
    const char* order[] = {"batch_per_rank", "wrap", "bucket_mb", "backward_prefetch",
                           "forward_prefetch", "limit_all_gathers", "overlap", "collectives",
                           "prefetch_elements", "persist_elements", "mem_limit_gb", "lr", "device",
                           "zero_grad_reduce", "reuse_distance", "grad_accum", "fsdp_no_sync",
                           "fsdp2_reshard_after_forward", "fsdp2_prefetch", "mics_shard_size",
                           "fsdp2_reshard_root", "fsdp2_reduce_dtype",
                           "mics_hierarchical_params_gather", "fsdp_use_orig_params",
                           "max_live_elements", "model_persist_elements", "zero3_fetch",
                           "zero_hpz_partition_size", "zero_quantized_weights",
                           "zero_quantized_gradients", "zero_contiguous_gradients",
                           "zero_communication_data_type", "zero_qgz_variant", "mics_schedule"};
    std::vector<std::pair<const char*, json>> out;
    const auto table = json_defaults();
    for (const char* key : order) {
      for (const auto& [k2, v] : table)
        if (k2 == key) out.emplace_back(key, v);
      for (const auto& [k2, v] : not_flags)
        if (std::string(k2) == key) out.emplace_back(key, v);
    }
    // a knob added to the table after this list is named too (after the listed ones)
    for (const auto& [k2, v] : table) {
      const std::string& key = k2;  // a structured binding is not capturable before C++20
      const bool listed = std::any_of(std::begin(order), std::end(order),
                                      [&](const char* o) { return key == o; });
      if (!listed && k2 != "precision") out.emplace_back(strdup(k2.c_str()), v);
    }
    return out;
  }();
  return k;
}

// DistributedDataParallel's arguments (config.ddp) at PyTorch's defaults: named ddp.<key> when off.
const std::vector<std::pair<const char*, json>>& ddp_defaults() {
  static const std::vector<std::pair<const char*, json>> k = {
      {"bucket_cap_mb", 25.0}, {"first_bucket_mb", 1.0}, {"gradient_as_bucket_view", false},
      {"bf16_params", false}};
  return k;
}

const json* at_path(const json& j, std::initializer_list<const char*> path) {
  const json* at = &j;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return nullptr;
    at = &(*at)[key];
  }
  return at;
}

double number_at(const json& j, std::initializer_list<const char*> path) {
  const json* at = at_path(j, path);
  std::string where;
  for (const char* key : path) where += std::string("/") + key;
  if (!at) throw ResultsError("missing " + where);
  if (!at->is_number()) throw ResultsError(where + " is not a number");
  return at->get<double>();
}

std::string str_at(const json& j, std::initializer_list<const char*> path) {
  const json* at = at_path(j, path);
  return at && at->is_string() ? at->get<std::string>() : "?";
}

std::string scalar_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

bool same_value(const json& a, const json& b) {  // 25 == 25.0, 0.001f == 1e-3
  if (a.is_number() && b.is_number())
    return std::abs(a.get<double>() - b.get<double>()) <= 1e-6 * std::abs(b.get<double>());
  return a == b;
}

// "<model>/w4n2/fp32[/bucket_mb=10,wrap=every-2]/": every knob off its default is named.
std::string series_prefix(const json& c) {
  std::string world = "?";
  if (const json* w = at_path(c, {"world_size"}); w && w->is_number_integer())
    world = std::to_string(w->get<long long>());
  if (const json* n = at_path(c, {"num_nodes"}); n && n->is_number_integer())
    world += "n" + std::to_string(n->get<long long>());
  std::string knobs;
  auto add = [&](const std::string& k, const json& v) {
    knobs += (knobs.empty() ? "" : ",") + k + "=" + scalar_text(v);
  };
  for (const auto& [key, def] : knob_defaults())
    if (const json* v = at_path(c, {key}); v && !v->is_null() && !same_value(*v, def))
      add(key, *v);
  const json* seq = at_path(c, {"seq_len"});
  const json* ctx = at_path(c, {"model", "context"});
  if (seq && ctx && *seq != *ctx) add("seq_len", *seq);
  for (const auto& [key, def] : ddp_defaults())
    if (const json* v = at_path(c, {"ddp", key}); v && !v->is_null() && !same_value(*v, def))
      add(std::string("ddp.") + key, *v);
  if (const json* tied = at_path(c, {"model", "tied_head"}); tied && *tied == false)
    add("tied_head", false);
  if (const json* att = at_path(c, {"model", "attention"}); att && *att != "fused")
    add("attention", *att);
  if (const json* ac = at_path(c, {"model", "activation_checkpointing"}); ac && *ac != "none")
    add("activation_checkpointing", *ac);
  if (const json* ce = at_path(c, {"model", "cross_entropy"}); ce && *ce != "full")
    add("cross_entropy", *ce);
  if (const json* arch = at_path(c, {"model", "arch"}); arch && *arch != "gpt2")
    add("arch", *arch);
  return str_at(c, {"model", "name"}) + "/w" + world + "/" + str_at(c, {"precision"}) + "/" +
         (knobs.empty() ? "" : knobs + "/");
}

Metric exact(const char* name, const char* unit, double v, bool smaller) {
  return {name, unit, v, smaller, v, v};
}

// The measurements of one ok result; timed metrics carry the median step's 95 % CI.
std::vector<Metric> ok_metrics(const json& r) {
  const double med = number_at(r, {"step_time_s", "median"});
  std::vector<double> samples;
  if (const json* s = at_path(r, {"step_time_s", "samples"}); s && s->is_array())
    for (const json& x : *s)
      if (x.is_number()) samples.push_back(x.get<double>());
  auto [lo, hi] = samples.empty() ? std::pair{med, med} : median_ci95(samples);
  const double tps = number_at(r, {"throughput", "tokens_per_s"});
  const double mfu = number_at(r, {"throughput", "mfu"});
  auto per_step = [&](double v, double step) { return step > 0 ? v * med / step : v; };
  return {{"step_time_s", "s", med, true, lo, hi},
          {"tokens_per_s", "tokens/s", tps, false, per_step(tps, hi), per_step(tps, lo)},
          {"mfu", "ratio", mfu, false, per_step(mfu, hi), per_step(mfu, lo)},
          exact("peak_bytes_per_rank", "bytes", number_at(r, {"memory", "peak_bytes_per_rank"}),
                true),
          exact("sent_bytes_intra", "bytes", number_at(r, {"comm", "per_step", "sent_bytes_intra"}),
                true),
          exact("sent_bytes_inter", "bytes", number_at(r, {"comm", "per_step", "sent_bytes_inter"}),
                true),
          exact("exposed_s", "s", number_at(r, {"comm", "exposed_s"}), true)};
}

}  // namespace

std::pair<double, double> median_ci95(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const int n = int(v.size());
  if (n == 0) return {0, 0};
  // Largest l with P(Binomial(n, 1/2) <= l - 1) <= 2.5 %: [x_(l), x_(n-l+1)] covers >= 95 %.
  double cdf = 0, term = std::pow(0.5, n);  // P(B = 0)
  int l = 0;
  for (int k = 0; k < n; ++k) {
    cdf += term;
    if (cdf > 0.025) break;
    l = k + 1;
    term *= double(n - k) / double(k + 1);
  }
  if (l < 1) return {v.front(), v.back()};
  return {v[l - 1], v[n - l]};
}

ResultsSummary read_results(std::string_view text) {
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) throw ResultsError("not valid JSON");
  if (!doc.is_object() || !doc.contains("suite") || doc["suite"] != "shardbench" ||
      !doc.contains("results") || !doc["results"].is_array())
    throw ResultsError("not a shardbench results file");
  if (doc.contains("kind") && doc["kind"] != "run")
    throw ResultsError("a prediction (kind '" +
                       (doc["kind"].is_string() ? doc["kind"].get<std::string>() : "?") +
                       "'), not a run's results; export reads what `shardbench run --out` writes");
  ResultsSummary out{str_at(doc, {"created_utc"}), str_at(doc, {"host"}),
                     str_at(doc, {"git_commit"}), str_at(doc, {"backend"}), {}};
  const json* config = at_path(doc, {"config"});
  const std::string prefix = config ? series_prefix(*config) : "?/";
  const json* steps = config ? at_path(*config, {"steps"}) : nullptr;
  for (const json& r : doc["results"]) {
    if (!r.is_object()) throw ResultsError("a result entry is not an object");
    if (!r.contains("strategy") || !r["strategy"].is_string())
      throw ResultsError("a result entry has no strategy name");
    const std::string name = r["strategy"].get<std::string>();
    const std::string status = str_at(r, {"status"});
    BenchmarkMetrics b{prefix + name, ResultStatus::kOk, "", 0, {}};
    b.steps = steps && steps->is_number_integer() ? steps->get<int>() : 0;
    if (status == "oom" || status == "error") {
      b.status = status == "oom" ? ResultStatus::kOom : ResultStatus::kError;
      b.error = str_at(r, {"error"});
    } else if (status != "ok") {
      throw ResultsError("strategy " + name + ": status is not ok|oom|error");
    }
    b.metrics.push_back(exact("status", "0 ok, 1 oom, 2 error", double(b.status), true));
    try {
      if (b.status == ResultStatus::kOk)
        for (Metric& m : ok_metrics(r)) b.metrics.push_back(std::move(m));
    } catch (const ResultsError& e) {
      throw ResultsError("strategy " + name + ": " + e.what());
    } catch (const json::exception& e) {
      throw ResultsError("strategy " + name + ": " + e.what());
    }
    out.benchmarks.push_back(std::move(b));
  }
  return out;
}

}  // namespace sb
