// --fsdp-config parsing (see header). Keys and defaults are FullyShardedDataParallel.__init__'s
// in torch 1.13.1 (torch/distributed/fsdp/fully_sharded_data_parallel.py): sharding_strategy
// None = FULL_SHARD, backward_prefetch None, forward_prefetch False, limit_all_gathers False,
// mixed_precision None (fp32). HYBRID_SHARD, _HYBRID_SHARD_ZERO2 and use_orig_params are
// torch >= 2.0's (1.13.1 lists HYBRID_SHARD as future support and has no use_orig_params).
#include "bench/cli/fsdp_config.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "bench/cli/json_config.h"
#include "bench/cli/run_options.h"

namespace sb {
namespace {

using nlohmann::json;

// Arguments that change no byte or buffer the suite counts for this model: one device, every
// rank initialised alike from the seed, no ignored modules, the wrap policy is --wrap.
const std::set<std::string> kIgnored = {"sync_module_states", "device_id", "param_init_fn",
                                        "auto_wrap_policy", "ignored_modules"};
const std::vector<std::string> kModelled = {
    "sharding_strategy", "backward_prefetch", "forward_prefetch", "limit_all_gathers",
    "mixed_precision", "use_orig_params", "cpu_offload"};

std::string strategy_of(const JsonConfigFile& f, const json& v) {
  if (v.is_string() && v.get<std::string>() == "NO_SHARD")
    f.bad_value("sharding_strategy", v, "FULL_SHARD|SHARD_GRAD_OP|HYBRID_SHARD|"
                "_HYBRID_SHARD_ZERO2 (NO_SHARD is not an fsdp_* strategy: run ddp)");
  const std::string s = f.one_of(v, "sharding_strategy",
                                 {"FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD",
                                  "_HYBRID_SHARD_ZERO2"}, true);
  if (s == "SHARD_GRAD_OP") return "fsdp_shard_grad_op";
  if (s == "HYBRID_SHARD") return "fsdp_hybrid_shard";
  if (s == "_HYBRID_SHARD_ZERO2") return "fsdp_hybrid_shard_zero2";
  return "fsdp_full_shard";  // None: FULL_SHARD
}

// MixedPrecision(param_dtype, reduce_dtype, buffer_dtype, keep_low_precision_grads). A missing
// reduce_dtype reduces in param_dtype; the suite models param = reduce = fp32 or bf16, and
// (FSDP2's MixedPrecisionPolicy, torchtitan's default) param bf16 with reduce fp32, for the
// fsdp2 strategies (run_options.cc refuses it for fsdp_*).
Precision precision_of(const JsonConfigFile& f, const json& mp, std::vector<std::string>& ignored,
                       bool& reduce_fp32) {
  reduce_fp32 = false;
  if (mp.is_null()) return Precision::kFp32;
  if (!mp.is_object()) f.bad_value("mixed_precision", mp, "null or an object of dtypes");
  const std::vector<std::string> dtypes = {"float32", "bfloat16"};
  std::string param, reduce;
  for (const auto& [k, v] : mp.items()) {
    const std::string key = "mixed_precision." + k;
    if (k == "param_dtype") {
      param = f.one_of(v, key, dtypes, true);
    } else if (k == "reduce_dtype") {
      reduce = f.one_of(v, key, dtypes, true);
    } else if (k == "buffer_dtype" || k == "keep_low_precision_grads") {
      ignored.push_back(key);  // no buffers; the optimizer reads the shard in its stored dtype
    } else {
      f.fail(fmt::format("unknown key {}: allowed param_dtype, reduce_dtype (modelled), "
                         "buffer_dtype, keep_low_precision_grads (ignored)", key));
    }
  }
  if (param.empty()) param = "float32";
  if (reduce.empty()) reduce = param;
  reduce_fp32 = reduce == "float32";
  if (reduce != param && param != "bfloat16")
    f.fail(fmt::format("key mixed_precision.reduce_dtype: \"{}\": not supported with "
                       "param_dtype \"{}\"; allowed the same dtype (bfloat16 parameters may "
                       "also reduce in float32)", reduce, param));
  return param == "bfloat16" ? Precision::kBf16Mixed : Precision::kFp32;
}

}  // namespace

void read_fsdp_config(const std::string& path, StrategyOptions& o) {
  const JsonConfigFile f("--fsdp-config", path, "FullyShardedDataParallel arguments");
  o.fsdp_config = {path, "fsdp_full_shard", {}};
  o.backward_prefetch = BackwardPrefetch::kNone;
  o.forward_prefetch = false;
  o.limit_all_gathers = false;
  o.fsdp_use_orig_params = false;
  o.precision = Precision::kFp32;
  for (const auto& [key, v] : f.root().items()) {
    if (key == "sharding_strategy") {
      o.fsdp_config.strategy = strategy_of(f, v);
    } else if (key == "backward_prefetch") {
      const std::string p = f.one_of(v, key, {"BACKWARD_PRE", "BACKWARD_POST"}, true);
      o.backward_prefetch = p.empty()             ? BackwardPrefetch::kNone
                            : p == "BACKWARD_PRE" ? BackwardPrefetch::kPre
                                                  : BackwardPrefetch::kPost;
    } else if (key == "forward_prefetch") {
      o.forward_prefetch = f.boolean(v, key);
    } else if (key == "limit_all_gathers") {
      o.limit_all_gathers = f.boolean(v, key);
    } else if (key == "use_orig_params") {
      o.fsdp_use_orig_params = f.boolean(v, key);
    } else if (key == "mixed_precision") {
      o.precision = precision_of(f, v, o.fsdp_config.ignored, o.fsdp2_reduce_fp32);
    } else if (key == "cpu_offload") {  // CPUOffload(offload_params=False) changes nothing
      if (!v.is_null() && v != json{{"offload_params", false}})
        f.bad_value(key, v, "null or {\"offload_params\": false} (no CPU offload modelled)");
    } else if (kIgnored.count(key)) {
      o.fsdp_config.ignored.push_back(key);
    } else {
      f.unknown_key(key, kModelled, kIgnored);
    }
  }
}

std::vector<std::string> fsdp_config_strategies(const std::string& strategy,
                                                std::vector<std::string> listed, bool all) {
  for (const std::string& s : listed)
    if (s.rfind("fsdp_", 0) == 0 && s != strategy)
      throw UsageError(fmt::format(
          "--strategies {}: the --fsdp-config file selects {} (its sharding_strategy); "
          "allowed: {}", s, strategy, strategy));
  if (all && std::find(listed.begin(), listed.end(), strategy) == listed.end())
    listed.push_back(strategy);
  return listed;
}

}  // namespace sb
