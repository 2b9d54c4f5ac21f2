// Config files bound to their strategies (see header).
#include "bench/cli/config_binding.h"

#include <algorithm>

#include <fmt/format.h>

#include "bench/cli/fsdp_config.h"
#include "bench/cli/run_options.h"
#include "harness/launch/report.h"

namespace sb {
namespace {

// The rows a config file sets (a strategy option with a config-file key): a typed flag that
// the file contradicts is an error.
bool file_sets(const OptionRow& r) { return r.option && *r.file_key; }

// Whether a config-file key ("ds: a; fsdp: b") names the family's file.
bool names_family(const char* file_key, ConfigFamily f) {
  const std::string key = file_key;
  const std::string prefix = f == ConfigFamily::kDeepSpeed ? "ds:"
                             : f == ConfigFamily::kFsdp    ? "fsdp:"
                             : f == ConfigFamily::kDdp     ? "ddp:"
                                                           : "";
  return !prefix.empty() &&
         (key.rfind(prefix, 0) == 0 || key.find("; " + prefix) != std::string::npos);
}

// The family-only knobs of a file's options copied over `o` (the per-row knobs stay `o`'s).
void overlay_family(ConfigFamily f, const StrategyOptions& file, StrategyOptions& o) {
  for (const OptionRow& r : option_rows())
    if (r.option && !r.per_row && names_family(r.file_key, f)) r.option.take(file, o);
  for (const DerivedKey& k : derived_keys())
    if (names_family(k.file_key, f)) k.option.take(file, o);
  if (f == ConfigFamily::kFsdp) o.fsdp_config = file.fsdp_config;  // the file and its strategy
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
  for (const OptionRow& r : option_rows()) {
    if (!r.per_row) continue;
    bool same = true;
    const std::string text = flag_text(r, r.option.record(first));
    for (const std::string& s : names)
      same = same && flag_text(r, r.option.record(for_strategy(s))) == text;
    // every row agrees: the document's value is theirs (a file-only run shows the file's)
    if (same) r.option.take(first, o);
    else differ.push_back(r.json_key);
  }
  return o;
}

void BoundOptions::document_config(const std::vector<std::string>& names, StrategyOptions& options,
                                   int& batch, std::vector<std::string>& differ) const {
  options = common(names, differ);
  const bool batch_differs = std::count(differ.begin(), differ.end(), "batch_per_rank") > 0;
  if (!names.empty() && !batch_differs) batch = batch_for(names.front());
}

DsConfig bind_ds_config(const Knobs& a, const RunConfig& from_flags, BoundOptions& b) {
  if (a.zero_schedule != "shipped")
    throw UsageError(fmt::format("--zero-schedule {}: allowed shipped with --ds-config (the file "
                                 "configures DeepSpeed as shipped)", a.zero_schedule));
  const DsConfig d = read_ds_config(a.ds_config, from_flags);
  check_flag_conflicts(a.given, from_flags.options, d.applied.options, ConfigFamily::kDeepSpeed,
                       a.ds_config);
  check_batch_conflict(a.given, from_flags.batch_per_rank, d.applied.batch_per_rank, a.ds_config);
  check_qgz_contract(d.applied.options);
  b.ds = d.applied.options;
  b.ds_path = a.ds_config;
  b.ds_batch = d.applied.batch_per_rank;
  b.ds_stage = d.stage;
  return d;
}

void bind_fsdp_config(const Knobs& a, const StrategyOptions& flags, BoundOptions& b) {
  StrategyOptions f = flags;  // FSDP's defaults where the file is silent
  f.fsdp2_reduce_fp32 = false;  // what the file says, apart from the flags'
  read_fsdp_config(a.fsdp_config, f);
  const bool file_reduce_fp32 = f.fsdp2_reduce_fp32;
  f.fsdp2_reduce_fp32 = flags.fsdp2_reduce_fp32;
  bind_fsdp_reduce_dtype(a.fsdp_config, a.strategies, file_reduce_fp32, f, b.flags);
  check_flag_conflicts(a.given, flags, f, ConfigFamily::kFsdp, a.fsdp_config);
  b.fsdp = f;
  b.fsdp_path = a.fsdp_config;
}

std::vector<std::string> bound_strategies(const Knobs& a, const BoundOptions& b) {
  const bool all = a.strategies == "all";
  std::vector<std::string> names = parse_strategy_list(a.strategies);
  if (b.ds) names = ds_config_strategies(b.ds_stage, names, all);
  if (b.fsdp)
    names = fsdp_config_strategies(b.fsdp->fsdp_config.strategy,
                                   all && !b.ds ? std::vector<std::string>{} : names, all);
  return names;
}

void check_flag_conflicts(const std::set<std::string>& given, const StrategyOptions& flags,
                          const StrategyOptions& file, ConfigFamily family,
                          const std::string& path) {
  for (const OptionRow& r : option_rows()) {
    if (!file_sets(r) || !given.count(r.flag)) continue;
    const std::string typed = flag_text(r, r.option.record(flags));
    const std::string set = flag_text(r, r.option.record(file));
    if (typed != set)
      throw UsageError(fmt::format(
          "{} {} conflicts with {} {} (which sets {}); allowed: drop the flag or change the file",
          r.flag, typed, family_flag(family), path, set));
  }
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
  nlohmann::json j = {{"batch_per_rank", batch}};
  for (const OptionRow& r : option_rows())
    if (r.per_row) j[r.json_key] = r.option.record(o);
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
