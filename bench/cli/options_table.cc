// The options table (see header): one row per knob, read by `run`, `predict` and the results
// reader.
#include "bench/cli/options_table.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "bench/cli/ddp_config.h"
#include "bench/cli/run_options.h"
#include "harness/model/config.h"

namespace sb {

namespace {
using R = OptionRow;

template <class T>
void set_from_text(T& field, const std::string& text) {
  if constexpr (std::is_same_v<T, bool>) {
    field = text == "true";
  } else if constexpr (std::is_same_v<T, std::string>) {
    field = text;
  } else {
    CLI::detail::lexical_cast(text, field);
  }
}

std::string flag_value(const Knobs& k, const OptionRow& r) {
  return std::visit([&](auto f) {
    using T = std::decay_t<decltype(k.*f)>;
    if constexpr (std::is_same_v<T, std::string>) return k.*f;
    else if constexpr (std::is_same_v<T, bool>) return std::string(k.*f ? "true" : "false");
    else return fmt::format("{}", k.*f);
  }, r.field);
}

void check_row(const Knobs& k, const OptionRow& r) {
  const std::string v = flag_value(k, r);
  bool ok = true;
  if (r.check == R::kOneOf) {
    ok = false;
    const std::string all = r.allowed;
    size_t pos = 0;
    while (pos <= all.size()) {
      const size_t end = std::min(all.find('|', pos), all.size());
      ok = ok || all.substr(pos, end - pos) == v;
      pos = end + 1;
    }
  } else if (r.check == R::kRange) {
    const std::string all = r.allowed;
    const size_t dots = all.find("..");
    const double lo = std::stod(all.substr(0, dots)), hi = std::stod(all.substr(dots + 2));
    const double x = std::stod(v);
    ok = x >= lo && x <= hi;
  }
  if (!ok) {
    const std::string hint = r.check == R::kOneOf ? did_you_mean(v, [&] {
      std::vector<std::string> c;
      std::string all = r.allowed;
      for (size_t pos = 0; pos <= all.size();) {
        const size_t end = std::min(all.find('|', pos), all.size());
        c.push_back(all.substr(pos, end - pos));
        pos = end + 1;
      }
      return c;
    }()) : "";
    throw UsageError(fmt::format("{} {}: allowed {}{}", r.flag, v, r.allowed, hint));
  }
}

}  // namespace

const char* help_group_name(HelpGroup g) {
  static const char* names[] = {"Workload",  "Topology", "Strategy knobs: DDP and ZeRO-1/2",
                                "Strategy knobs: ZeRO-3 and ZeRO++", "Strategy knobs: MiCS",
                                "Strategy knobs: FSDP", "Strategy knobs: FSDP2", "Measurement",
                                "Output"};
  return names[int(g)];
}

nlohmann::json knob_config_json(const StrategyOptions& o) {
  nlohmann::json j = nlohmann::json::object();
  for (const OptionRow& r : option_rows())
    if (r.option) j[r.json_key] = r.option.record(o);
  for (const DerivedKey& k : derived_keys()) j[k.json_key] = k.option.record(o);
  return j;
}

std::string flag_text(const OptionRow& r, const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) {
    const bool on_off = std::strcmp(r.allowed, "on|off") == 0;
    return v.get<bool>() ? (on_off ? "on" : "true") : (on_off ? "off" : "false");
  }
  if (v.is_number_float()) return fmt::format("{:g}", v.get<double>());
  return v.dump();
}

void add_knob_options(CLI::App* app, Knobs& k, Command cmd) {
  for (const OptionRow& r : option_rows()) {
    if ((unsigned(r.commands) & unsigned(cmd)) == 0) continue;
    const char* def = cmd == Command::kPredict && r.default_predict ? r.default_predict : r.default_run;
    std::string help = r.help;
    if (r.check != R::kFree || (*r.allowed && std::strchr(r.allowed, '|')))
      help += std::string(" [") + r.allowed + "]";
    if (*r.file_key) help += std::string(" (") + r.file_key + ")";
    CLI::Option* o = std::visit([&](auto f) -> CLI::Option* {
      using T = std::decay_t<decltype(k.*f)>;
      set_from_text(k.*f, def);
      if constexpr (std::is_same_v<T, bool>) {
        return app->add_flag(r.flag, k.*f, help);
      } else {
        CLI::Option* opt = app->add_option(r.flag, k.*f, help);
        if (*def) opt->default_str(def);
        if constexpr (std::is_same_v<T, uint64_t>)
          opt->transform(whole_number(std::strcmp(r.allowed, "1..") == 0 ? 1 : 0));
        return opt;
      }
    }, r.field);
    o->group(help_group_name(r.group));
  }
  record_given_flags(app, k.given);
}

StrategyOptions knob_options(const Knobs& k) {
  for (const OptionRow& r : option_rows()) check_row(k, r);
  if (!(k.bucket_mb > 0 && k.bucket_mb <= 1 << 20))
    throw UsageError(fmt::format("--bucket-mb {}: allowed (0, 1048576]", k.bucket_mb));
  bool wrap_ok = k.wrap == "block" || k.wrap == "model";
  if (k.wrap.rfind("every-", 0) == 0) {
    const std::string n = k.wrap.substr(6);
    wrap_ok = !n.empty() && n.size() < 6 && n.find_first_not_of("0123456789") == std::string::npos &&
              std::stoi(n) >= 1;
  }
  if (!wrap_ok) throw UsageError(fmt::format("--wrap {}: allowed block|model|every-K with K >= 1", k.wrap));
  const std::string& raf = k.fsdp2_reshard_after_forward;
  const bool raf_int = !raf.empty() && raf.size() < 6 &&
                       raf.find_first_not_of("0123456789") == std::string::npos && std::stoi(raf) >= 1;
  if (raf != "auto" && raf != "true" && raf != "false" && !raf_int)
    throw UsageError(fmt::format("--fsdp2-reshard-after-forward {}: allowed auto|true|false|K with K >= 1", raf));
  if (!(k.inter_latency_ms == -1 || (k.inter_latency_ms >= 0 && k.inter_latency_ms <= 10000)))
    throw UsageError(fmt::format("--inter-latency-ms {}: allowed 0..10000", k.inter_latency_ms));
  StrategyOptions o;
  o.precision = k.precision == "fp32" ? Precision::kFp32 : Precision::kBf16Mixed;
  o.wrap = k.wrap;
  o.bucket_mb = k.bucket_mb;
  o.backward_prefetch = k.backward_prefetch == "none"  ? BackwardPrefetch::kNone
                        : k.backward_prefetch == "pre" ? BackwardPrefetch::kPre
                                                       : BackwardPrefetch::kPost;
  o.forward_prefetch = k.forward_prefetch;
  o.limit_all_gathers = k.limit_all_gathers == "on";
  o.overlap = k.overlap == "on";
  o.prefetch_elements = k.prefetch_elements;
  o.persist_elements = k.persist_elements;
  o.max_live_elements = k.max_live_elements;
  o.model_persist_elements = k.model_persist_elements;
  o.fsdp2_reshard_after_forward = raf == "auto"    ? kFsdp2ReshardAuto
                                  : raf == "true"  ? kFsdp2ReshardTrue
                                  : raf == "false" ? 0
                                                   : std::stoi(raf);
  // FSDP2's MixedPrecisionPolicy; the torchtitan preset (TrainingConfig.mixed_precision_param
  // bfloat16, mixed_precision_reduce float32, torchtitan/config/configs.py; applied by
  // torchtitan/distributed/fsdp.py apply_fsdp_to_decoder)
  o.fsdp2_reduce_fp32 = k.fsdp2_reduce_dtype == "fp32" || k.fsdp2_mixed_precision == "torchtitan";
  if (k.fsdp2_mixed_precision == "torchtitan") o.precision = Precision::kBf16Mixed;
  o.fsdp2_prefetch = k.fsdp2_prefetch;
  o.grad_accum = k.grad_accum;
  o.fsdp_no_sync = k.fsdp_no_sync == "on";
  o.fsdp_use_orig_params = k.fsdp_use_orig_params == "on";
  o.mics_shard_size = k.mics_shard_size;
  o.mics_hierarchical_params_gather = k.mics_hierarchical_params_gather == "on";
  o.mics_schedule = k.mics_schedule == "per-unit" ? MicsSchedule::kPerUnit : MicsSchedule::kShipped;
  if (o.mics_hierarchical_params_gather && o.mics_schedule != MicsSchedule::kPerUnit)
    throw UsageError("--mics-hierarchical-params-gather on: allowed on only with --mics-schedule per-unit");
  o.zero_hpz_partition_size = k.zero_hpz_partition_size;
  o.zero_quantized_weights = k.zero_quantized_weights == "on";
  o.zero_quantized_gradients = k.zero_quantized_gradients == "on";
  o.zero_contiguous_gradients = k.zero_contiguous_gradients == "on";
  if (k.zero_communication_data_type == "fp16" && o.precision != Precision::kBf16Mixed)
    throw UsageError("--zero-communication-data-type fp16: allowed auto with fp32 (fp16 reductions of "
                     "fp32 training are not modelled)");
  o.zero_comm_fp16 = k.zero_communication_data_type == "fp16";
  o.zero_qgz_variant = k.zero_qgz_variant == "suite" ? QgzVariant::kSuite : QgzVariant::kShipped;
  if (!k.ddp_config.empty()) parse_ddp_config(k.ddp_config, o.ddp);
  apply_zero_schedule(k.zero_schedule == "paper" ? ZeroSchedule::kPaper : ZeroSchedule::kShipped, o);
  apply_zero_bucket_reduce(k.zero_bucket_reduce, k.zero_schedule, !k.ds_config.empty(), o);
  return o;
}

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}
}  // namespace

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const std::string& c : candidates) {
    // one name a prefix of the other (bf16 -> bf16-mixed) counts as one edit
    const bool pre = word.size() >= 3 && (c.rfind(word, 0) == 0 || word.rfind(c, 0) == 0);
    const size_t d = pre ? 1 : edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  // close: a typo or two, or one name a prefix of the other
  const size_t limit = std::max<size_t>(1, word.size() / 3);
  if (best.empty() || best_d > limit || best == word) return "";
  return fmt::format("; did you mean {}?", best);
}

std::string unknown_flag_line(const CLI::App& sub, int argc, char** argv) {
  std::vector<std::string> names;
  for (const CLI::Option* o : sub.get_options()) names.push_back(o->get_name());
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) continue;
    a = a.substr(0, a.find('='));
    if (std::find(names.begin(), names.end(), a) != names.end() || a == "--help") continue;
    return fmt::format(" {}: unknown flag {}{} (see shardbench {} --help)", sub.get_name(), a,
                       did_you_mean(a, names), sub.get_name());
  }
  return "";
}

}  // namespace sb
