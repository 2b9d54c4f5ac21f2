// DeepSpeed config JSON -> run knobs (see header). Defaults are DeepSpeed's where the file is
// silent (zero/config.py DeepSpeedZeroConfig), so a file configures the run as it would
// configure DeepSpeed, not as the suite's flags would.
#include "bench/cli/ds_config.h"

#include <algorithm>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/cli/run_options.h"

namespace sb {
namespace {

using nlohmann::json;

// zero_optimization keys that change nothing the suite models (listed as ignored in the result).
const std::set<std::string> kZeroIgnored = {
    "allgather_bucket_size", "load_from_fp32_weights",
    "sub_group_size",
    "round_robin_gradients", "stage3_gather_16bit_weights_on_model_save", "elastic_checkpoint",
    "ignore_unused_parameters", "memory_efficient_linear"};
// Top-level keys that change nothing the suite models.
const std::set<std::string> kTopIgnored = {"steps_per_print", "wall_clock_breakdown",
                                           "zero_allow_untested_optimizer", "train_batch_size",
                                           "prescale_gradients"};

[[noreturn]] void fail(const std::string& path, const std::string& key, const std::string& what) {
  throw UsageError(fmt::format("--ds-config {}: {}: {}", path, key, what));
}

template <class T>
T get(const json& j, const std::string& key, const std::string& path, const char* type) {
  try {
    return j.get<T>();
  } catch (const json::exception&) {
    fail(path, key, fmt::format("{} is not allowed; allowed: {}", j.dump(), type));
  }
}

uint64_t get_count(const json& j, const std::string& key, const std::string& path) {
  // DeepSpeed writes element counts as ints or as 5e8; a whole, non-negative number either way.
  const double v = get<double>(j, key, path, "a whole number >= 0");
  if (!(v >= 0 && v <= 1e18 && v == double(uint64_t(v))))
    fail(path, key, fmt::format("{} is not allowed; allowed: a whole number >= 0", j.dump()));
  return uint64_t(v);
}

bool enabled(const json& top, const char* section, const std::string& path) {
  if (!top.contains(section)) return false;
  const json& s = top.at(section);
  if (!s.is_object()) fail(path, section, "allowed: an object {\"enabled\": true|false}");
  for (const auto& [k, v] : s.items())
    if (k != "enabled") fail(path, std::string(section) + "." + k, "unknown or unsupported key");
  return s.contains("enabled") && get<bool>(s.at("enabled"), std::string(section) + ".enabled",
                                            path, "true|false");
}

// zero_optimization: the knobs DeepSpeed's ZeRO reads, with DeepSpeed's defaults.
void apply_zero(const json& z, const std::string& path, DsConfig& d) {
  StrategyOptions& o = d.applied.options;
  std::vector<std::string>& ignored = d.applied.ds_config_ignored;
  // Defaults of DeepSpeedZeroConfig: reduce_bucket_size 5e8, stage3_prefetch_bucket_size 5e7,
  // stage3_param_persistence_threshold 1e5, stage3_max_reuse_distance 1e9; overlap_comm is
  // None, made true for stage 3 only (overlap_comm_valid).
  uint64_t bucket = 500'000'000;
  o.zero_grad_reduce = ZeroGradReduce::kBucketAllReduce;
  o.prefetch_elements = 50'000'000;
  o.persist_elements = 100'000;
  o.reuse_distance = 1'000'000'000;
  o.max_live_elements = 1'000'000'000;                  // stage3_max_live_parameters
  o.model_persist_elements = 9'223'372'036'854'775'807ULL;  // sys.maxsize
  o.zero3_coalesced_fetch = true;
  o.zero_contiguous_gradients = true;  // stage 3's IPG buffer (stage_1_and_2.py's not modelled)
  o.overlap = d.stage == 3;
  bool reduce_scatter = true;
  for (const auto& [k, v] : z.items()) {
    const std::string key = "zero_optimization." + k;
    if (k == "stage") continue;
    if (k == "reduce_scatter") {
      // false: gradient_reduction_w_predivide all-reduces the same bucket: the same collective
      // (and use_multi_rank_bucket_allreduce is not read).
      reduce_scatter = get<bool>(v, key, path, "true|false");
    } else if (k == "use_multi_rank_bucket_allreduce") {
      // false: average_tensor reduces each owner's slice to it (allreduce_no_retain(rank=dst))
      if (!get<bool>(v, key, path, "true|false")) o.zero_grad_reduce = ZeroGradReduce::kReducePerOwner;
    } else if (k == "overlap_comm") {
      o.overlap = get<bool>(v, key, path, "true|false");
    } else if (k == "reduce_bucket_size") {
      bucket = get_count(v, key, path);
      if (bucket == 0) fail(path, key, "0 is not allowed; allowed: a whole number >= 1");
    } else if (k == "stage3_prefetch_bucket_size") {
      o.prefetch_elements = std::max<uint64_t>(1, get_count(v, key, path));
    } else if (k == "stage3_param_persistence_threshold") {
      o.persist_elements = get_count(v, key, path);
    } else if (k == "stage3_max_reuse_distance") {
      o.reuse_distance = get_count(v, key, path);
    } else if (k == "stage3_max_live_parameters") {
      o.max_live_elements = get_count(v, key, path);
    } else if (k == "stage3_model_persistence_threshold") {
      o.model_persist_elements = get_count(v, key, path);
    } else if (k == "zero_hpz_partition_size") {  // Field(1, ge=0): 0 and 1 leave it off
      o.zero_hpz_partition_size = int(std::clamp<uint64_t>(get_count(v, key, path), 1, 1 << 20));
    } else if (k == "zero_quantized_weights") {
      o.zero_quantized_weights = get<bool>(v, key, path, "true|false");
    } else if (k == "contiguous_gradients") {  // modelled for stage 3's IPG buffer only
      o.zero_contiguous_gradients = get<bool>(v, key, path, "true|false");
      if (d.stage != 3) ignored.push_back(key);
    } else if (k == "zero_quantized_gradients") {
      o.zero_quantized_gradients = get<bool>(v, key, path, "true|false");
    } else if (k == "allgather_partitions") {
      if (!get<bool>(v, key, path, "true|false"))
        fail(path, key, "false (broadcasts) is not yet supported; allowed: true");
    } else if (kZeroIgnored.count(k)) {
      ignored.push_back(key);
    } else {
      fail(path, key, "unknown or unsupported key");
    }
  }
  if (!reduce_scatter) o.zero_grad_reduce = ZeroGradReduce::kBucketAllReduce;
  // reduce_bucket_size counts elements; the run's knob is MiB of the gradient dtype.
  o.bucket_mb = double(bucket) * double(dtype_bytes(o.grad_dtype())) / (1024.0 * 1024.0);
}

void apply_top_level(const json& top, const std::string& path, DsConfig& d) {
  StrategyOptions& o = d.applied.options;
  if (enabled(top, "fp16", path))
    fail(path, "fp16.enabled", "true is not supported (no fp16 training); allowed: bf16 or fp32");
  o.precision = enabled(top, "bf16", path) ? Precision::kBf16Mixed : Precision::kFp32;
  for (const auto& [k, v] : top.items()) {
    if (k == "zero_optimization" || k == "bf16" || k == "fp16") continue;
    if (k == "communication_data_type") {
      // The suite reduces in the gradient dtype, DeepSpeed's default; under bf16 also fp16
      // (stage3.py __avg_scatter_grads casts each gradient to it: the same 2 bytes on the wire,
      // and what qgZ's quantiser reads).
      const std::string want = o.precision == Precision::kFp32 ? "fp32" : "bf16";
      const std::string got = get<std::string>(v, k, path, "a string");
      o.zero_comm_fp16 = got == "fp16" && o.precision == Precision::kBf16Mixed;
      if (got != want && !o.zero_comm_fp16)
        fail(path, k, fmt::format("{} is not supported with this precision; allowed: {}{}",
                                  v.dump(), want,
                                  o.precision == Precision::kFp32 ? "" : " or fp16"));
    } else if (k == "gradient_accumulation_steps") {  // micro-batches per step: --grad-accum
      const uint64_t steps = get_count(v, k, path);
      if (steps < 1 || steps > 4096) fail(path, k, fmt::format("{}: allowed 1..4096", v.dump()));
      o.grad_accum = int(steps);
    } else if (k == "train_micro_batch_size_per_gpu") {  // sequences per rank: --batch
      const uint64_t micro = get_count(v, k, path);
      if (micro < 1 || micro > 65536) fail(path, k, fmt::format("{}: allowed 1..65536", v.dump()));
      d.applied.batch_per_rank = int(micro);
    } else if (kTopIgnored.count(k)) {
      d.applied.ds_config_ignored.push_back(k);
    } else {
      fail(path, k, "unknown or unsupported key");
    }
  }
}

}  // namespace

DsConfig read_ds_config(const std::string& path, const RunConfig& from_flags) {
  std::ifstream in(path);
  if (!in) fail(path, "file", "cannot be read; allowed: a readable DeepSpeed config JSON");
  json top;
  try {
    top = json::parse(in);
  } catch (const json::exception& e) {
    fail(path, "file", fmt::format("not valid JSON ({})", e.what()));
  }
  if (!top.is_object()) fail(path, "file", "allowed: a JSON object");
  if (!top.contains("zero_optimization") || !top.at("zero_optimization").is_object() ||
      !top.at("zero_optimization").contains("stage"))
    fail(path, "zero_optimization.stage", "missing; allowed: 1, 2 or 3");
  DsConfig d;
  d.applied = from_flags;
  d.applied.ds_config = path;
  d.applied.ds_config_ignored.clear();
  const json& z = top.at("zero_optimization");
  d.stage = int(get_count(z.at("stage"), "zero_optimization.stage", path));
  if (d.stage < 1 || d.stage > 3)
    fail(path, "zero_optimization.stage", fmt::format("{}: allowed 1, 2 or 3", d.stage));
  d.applied.ds_config_stage = d.stage;
  apply_top_level(top, path, d);  // precision first: the bucket size converts through it
  apply_zero(z, path, d);
  return d;
}

std::vector<std::string> ds_config_strategies(int stage, const std::vector<std::string>& listed,
                                              bool all) {
  const std::string zero = "zero" + std::to_string(stage);
  if (all) return {zero};
  for (const auto& s : listed)
    if (s.rfind("zero", 0) == 0 && s != zero)
      throw UsageError(fmt::format(
          "--strategies {}: the --ds-config file has zero_optimization.stage {}; allowed: {}", s,
          stage, zero));
  return listed;
}

}  // namespace sb
