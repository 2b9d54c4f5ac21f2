// Config files bound to their strategies (see header).
#include "bench/cli/config_binding.h"

#include <functional>

#include <fmt/format.h>

#include "bench/cli/run_options.h"
#include "harness/launch/report.h"

namespace sb {
namespace {

// A setting a file implies that other families also read: it must stay per row.
struct SharedKnob {
  const char* flag;
  const char* key;  // JSON key of the row's settings
  std::function<std::string(const StrategyOptions&)> text;
};

const std::vector<SharedKnob>& shared_knobs() {
  static const std::vector<SharedKnob> k = {
      {"--precision", "precision", [](const StrategyOptions& o) { return std::string(precision_name(o.precision)); }},
      {"--overlap", "overlap", [](const StrategyOptions& o) { return std::string(o.overlap ? "on" : "off"); }},
      {"--bucket-mb", "bucket_mb", [](const StrategyOptions& o) { return fmt::format("{:g}", o.bucket_mb); }},
      {"--grad-accum", "grad_accum", [](const StrategyOptions& o) { return std::to_string(o.grad_accum); }},
  };
  return k;
}

// Knobs only one family reads: a file sets them for its rows, a conflicting flag is an error.
const std::vector<SharedKnob>& family_knobs(ConfigFamily f) {
  static const std::vector<SharedKnob> ds = {
      {"--prefetch-elements", "prefetch_elements", [](const StrategyOptions& o) { return std::to_string(o.prefetch_elements); }},
      {"--persist-elements", "persist_elements", [](const StrategyOptions& o) { return std::to_string(o.persist_elements); }},
      {"--max-live-elements", "max_live_elements", [](const StrategyOptions& o) { return std::to_string(o.max_live_elements); }},
      {"--model-persist-elements", "model_persist_elements", [](const StrategyOptions& o) { return std::to_string(o.model_persist_elements); }},
      {"--zero-hpz-partition-size", "zero_hpz_partition_size", [](const StrategyOptions& o) { return std::to_string(o.zero_hpz_partition_size); }},
      {"--zero-quantized-weights", "zero_quantized_weights", [](const StrategyOptions& o) { return std::string(o.zero_quantized_weights ? "on" : "off"); }},
      {"--zero-quantized-gradients", "zero_quantized_gradients", [](const StrategyOptions& o) { return std::string(o.zero_quantized_gradients ? "on" : "off"); }},
      {"--zero-contiguous-gradients", "zero_contiguous_gradients", [](const StrategyOptions& o) { return std::string(o.zero_contiguous_gradients ? "on" : "off"); }},
      {"--zero-communication-data-type", "zero_communication_data_type", [](const StrategyOptions& o) { return std::string(o.zero_comm_fp16 ? "fp16" : "auto"); }},
  };
  static const std::vector<SharedKnob> fsdp = {
      {"--backward-prefetch", "backward_prefetch", [](const StrategyOptions& o) { return std::string(prefetch_name(o.backward_prefetch)); }},
      {"--forward-prefetch", "forward_prefetch", [](const StrategyOptions& o) { return std::string(o.forward_prefetch ? "true" : "false"); }},
      {"--limit-all-gathers", "limit_all_gathers", [](const StrategyOptions& o) { return std::string(o.limit_all_gathers ? "on" : "off"); }},
      {"--fsdp-use-orig-params", "fsdp_use_orig_params", [](const StrategyOptions& o) { return std::string(o.fsdp_use_orig_params ? "on" : "off"); }},
      {"--fsdp2-reduce-dtype", "fsdp2_reduce_dtype", [](const StrategyOptions& o) { return std::string(o.fsdp2_reduce_fp32 ? "fp32" : "auto"); }},
  };
  static const std::vector<SharedKnob> none;
  return f == ConfigFamily::kDeepSpeed ? ds : f == ConfigFamily::kFsdp ? fsdp : none;
}

// The family-only knobs of a file's options copied over `o`.
void overlay_family(ConfigFamily f, const StrategyOptions& file, StrategyOptions& o) {
  if (f == ConfigFamily::kDeepSpeed) {
    o.zero_grad_reduce = file.zero_grad_reduce;
    o.prefetch_elements = file.prefetch_elements;
    o.persist_elements = file.persist_elements;
    o.reuse_distance = file.reuse_distance;
    o.max_live_elements = file.max_live_elements;
    o.model_persist_elements = file.model_persist_elements;
    o.zero3_coalesced_fetch = file.zero3_coalesced_fetch;
    o.zero_hpz_partition_size = file.zero_hpz_partition_size;
    o.zero_quantized_weights = file.zero_quantized_weights;
    o.zero_quantized_gradients = file.zero_quantized_gradients;
    o.zero_contiguous_gradients = file.zero_contiguous_gradients;
    o.zero_comm_fp16 = file.zero_comm_fp16;
  } else if (f == ConfigFamily::kFsdp) {
    o.backward_prefetch = file.backward_prefetch;
    o.forward_prefetch = file.forward_prefetch;
    o.limit_all_gathers = file.limit_all_gathers;
    o.fsdp_use_orig_params = file.fsdp_use_orig_params;
    o.fsdp2_reduce_fp32 = file.fsdp2_reduce_fp32;
    o.fsdp_config = file.fsdp_config;
  }
}

const char* family_flag(ConfigFamily f) {
  return f == ConfigFamily::kDeepSpeed ? "--ds-config" : f == ConfigFamily::kFsdp ? "--fsdp-config" : "";
}

}  // namespace

ConfigFamily config_family(const std::string& s) {
  if (s.rfind("zero", 0) == 0 || s.rfind("mics", 0) == 0) return ConfigFamily::kDeepSpeed;
  if (s.rfind("fsdp_", 0) == 0) return ConfigFamily::kFsdp;  // FSDP1; fsdp2 is fully_shard
  if (s == "ddp") return ConfigFamily::kDdp;
  return ConfigFamily::kNone;
}

const StrategyOptions& BoundOptions::for_strategy(const std::string& s) const {
  const ConfigFamily f = config_family(s);
  if (f == ConfigFamily::kDeepSpeed && ds) return *ds;
  if (f == ConfigFamily::kFsdp && fsdp) return *fsdp;
  return flags;
}

int BoundOptions::batch_for(const std::string& s) const {
  return config_family(s) == ConfigFamily::kDeepSpeed && ds && ds_batch > 0 ? ds_batch : flags_batch;
}

StrategyOptions BoundOptions::common(const std::vector<std::string>& names,
                                     std::vector<std::string>& differ) const {
  StrategyOptions o = flags;
  for (const std::string& s : names) {
    const ConfigFamily f = config_family(s);
    if (&for_strategy(s) != &flags) overlay_family(f, for_strategy(s), o);
  }
  if (names.empty()) return o;
  for (const std::string& s : names)
    if (batch_for(s) != batch_for(names.front())) {
      differ.push_back("batch_per_rank");
      break;
    }
  const StrategyOptions& first = for_strategy(names.front());
  for (const SharedKnob& k : shared_knobs()) {
    bool same = true;
    for (const std::string& s : names) same = same && k.text(for_strategy(s)) == k.text(first);
    if (!same) {
      differ.push_back(k.key);
      continue;
    }
    // every row agrees: the document's value is theirs (a file-only run shows the file's)
    if (std::string(k.key) == "precision") o.precision = first.precision;
    if (std::string(k.key) == "overlap") o.overlap = first.overlap;
    if (std::string(k.key) == "bucket_mb") o.bucket_mb = first.bucket_mb;
    if (std::string(k.key) == "grad_accum") o.grad_accum = first.grad_accum;
  }
  return o;
}

void check_flag_conflicts(const std::set<std::string>& given, const StrategyOptions& flags,
                          const StrategyOptions& file, ConfigFamily family,
                          const std::string& path) {
  auto check = [&](const SharedKnob& k) {
    if (given.count(k.flag) && k.text(flags) != k.text(file))
      throw UsageError(fmt::format(
          "{} {} conflicts with {} {} (which sets {}); allowed: drop the flag or change the file",
          k.flag, k.text(flags), family_flag(family), path, k.text(file)));
  };
  for (const SharedKnob& k : shared_knobs()) check(k);
  for (const SharedKnob& k : family_knobs(family)) check(k);
}

void check_batch_conflict(const std::set<std::string>& given, int flags_batch, int file_batch,
                          const std::string& path) {
  if (given.count("--batch") && file_batch > 0 && file_batch != flags_batch)
    throw UsageError(fmt::format(
        "--batch {} conflicts with --ds-config {} (which sets train_micro_batch_size_per_gpu {}); "
        "allowed: drop the flag or change the file", flags_batch, path, file_batch));
}

nlohmann::json row_settings(const std::string& strategy, const BoundOptions& b) {
  const int batch = b.batch_for(strategy);
  const StrategyOptions& o = b.for_strategy(strategy);
  const ConfigFamily f = config_family(strategy);
  nlohmann::json j = {{"precision", precision_name(o.precision)}, {"overlap", o.overlap},
                      {"bucket_mb", o.bucket_mb}, {"grad_accum", o.grad_accum},
                      {"batch_per_rank", batch}};
  j["configured_by"] = &o == &b.flags ? "flags"
                       : f == ConfigFamily::kDeepSpeed ? "--ds-config " + b.ds_path
                                                       : "--fsdp-config " + b.fsdp_path;
  return j;
}

std::string unequal_rows_warning(const std::vector<std::string>& names, const BoundOptions& b) {
  std::vector<std::string> differ;
  b.common(names, differ);
  std::vector<std::string> unequal;  // what makes a comparison unfair: batch and precision
  for (const std::string& d : differ)
    if (d == "precision" || d == "grad_accum" || d == "batch_per_rank") unequal.push_back(d);
  if (unequal.empty()) return "";
  std::vector<std::string> rows;
  for (const std::string& s : names) {
    const StrategyOptions& o = b.for_strategy(s);
    rows.push_back(fmt::format("{} {} batch {} x{}", s, precision_name(o.precision),
                               b.batch_for(s), o.grad_accum));
  }
  return fmt::format("warning: the rows ran at different {} ({}): not a like-for-like comparison",
                     fmt::join(unequal, " and "), fmt::join(rows, ", "));
}

}  // namespace sb
