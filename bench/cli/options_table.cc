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
using G = HelpGroup;
constexpr Command kB = Command::kBoth, kRun = Command::kRun;

// flag, field, run default, predict default, allowed, check, group, commands, help,
// config key, JSON kind, config-file key
const std::vector<OptionRow> kRows = {
    {"--model", &Knobs::model, "small", "gpt2-124m", "a preset or L,C,H,T,V", R::kFree, G::kWorkload, kB,
     "Model: a preset (run: the suite's; predict also gpt2-*, llama*, ...) or L,C,H,T,V", "", JsonAs::kNone, ""},
    {"--strategies", &Knobs::strategies, "all", nullptr, "all or a comma list", R::kFree, G::kWorkload, kB,
     "Strategies to run or predict", "", JsonAs::kNone, ""},
    {"--arch", &Knobs::arch, "", nullptr, "gpt2|llama", R::kFree, G::kWorkload, kB,
     "Block of an L,C,H,T,V spec: gpt2 (default) | llama (RMSNorm, SwiGLU, RoPE); a preset names its own", "", JsonAs::kNone, ""},
    {"--seq", &Knobs::seq, "0", nullptr, "0..65536", R::kRange, G::kWorkload, kB,
     "Tokens per sample (0 = the model's context)", "", JsonAs::kNone, ""},
    {"--batch", &Knobs::batch, "4", "1", "1..65536", R::kRange, G::kWorkload, kB,
     "Sequences per rank per micro-batch", "batch_per_rank", JsonAs::kNumber, "ds: train_micro_batch_size_per_gpu (ignored)"},
    {"--grad-accum", &Knobs::grad_accum, "1", nullptr, "1..4096", R::kRange, G::kWorkload, kB,
     "Micro-batches of --batch per optimizer step (gradient accumulation)", "grad_accum", JsonAs::kNumber, "ds: gradient_accumulation_steps"},
    {"--precision", &Knobs::precision, "fp32", "bf16-mixed", "fp32|bf16-mixed", R::kOneOf, G::kWorkload, kB,
     "Training precision", "precision", JsonAs::kText, "ds: bf16.enabled; fsdp: mixed_precision"},
    {"--untied-head", &Knobs::untied_head, "false", nullptr, "", R::kFree, G::kWorkload, kB,
     "Separate LM head weight (default: tied to wte)", "", JsonAs::kNone, ""},
    {"--attention", &Knobs::attention, "fused", nullptr, "naive|fused", R::kFree, G::kWorkload, kB,
     "naive (stores the TxT probabilities) | fused (FlashAttention: row log-sum-exp)", "", JsonAs::kNone, ""},
    {"--activation-checkpointing", &Knobs::activation_checkpointing, "none", nullptr, "none|block|every-K", R::kFree, G::kWorkload, kB,
     "Keep only a checkpointed block's input, recompute its forward in backward (every K-th block)", "", JsonAs::kNone, ""},
    {"--ranks-per-node", &Knobs::ranks_per_node, "0", nullptr, "0..1048576", R::kRange, G::kTopology, kB,
     "Ranks per (virtual) node; 0 = run: MPI_COMM_TYPE_SHARED, predict: the cluster's", "", JsonAs::kNone, ""},
    {"--mem-limit-gb", &Knobs::mem_limit_gb, "0", nullptr, "0..999999", R::kRange, G::kTopology, kB,
     "Per-rank memory limit in GiB (0 = run: none, predict: the cluster's)", "mem_limit_gb", JsonAs::kNumber, ""},
    {"--bucket-mb", &Knobs::bucket_mb, "25", nullptr, "(0, 1048576]", R::kFree, G::kDdpZero, kB,
     "DDP/ZeRO gradient bucket size (MiB)", "bucket_mb", JsonAs::kNumber, "ds: reduce_bucket_size (elements); ddp: bucket_cap_mb"},
    {"--overlap", &Knobs::overlap, "on", nullptr, "on|off", R::kOneOf, G::kDdpZero, kB,
     "Overlap communication with compute", "overlap", JsonAs::kBool, "ds: zero_optimization.overlap_comm"},
    {"--ddp-config", &Knobs::ddp_config, "", nullptr, "a JSON file", R::kFree, G::kDdpZero, kB,
     "JSON of DistributedDataParallel arguments: configures the ddp row only (docs/ddp.md)", "ddp_config", JsonAs::kNone, ""},
    {"--zero-schedule", &Knobs::zero_schedule, "shipped", nullptr, "shipped|paper", R::kOneOf, G::kDdpZero, kB,
     "ZeRO: DeepSpeed's defaults (shipped) | the paper's (reduce-scatter, always release)", "", JsonAs::kNone, ""},
    {"--zero-bucket-reduce", &Knobs::zero_bucket_reduce, "all_reduce", nullptr, "all_reduce|reduce_per_owner", R::kOneOf, G::kDdpZero, kB,
     "ZeRO-1/2 (shipped): DeepSpeed's use_multi_rank_bucket_allreduce true | false", "", JsonAs::kNone,
     "ds: zero_optimization.use_multi_rank_bucket_allreduce"},
    {"--ds-config", &Knobs::ds_config, "", nullptr, "a JSON file", R::kFree, G::kDdpZero, kB,
     "DeepSpeed config JSON: configures the zero1/2/3 and mics rows only, as DeepSpeed would", "ds_config", JsonAs::kNone, ""},
    {"--prefetch-elements", &Knobs::prefetch_elements, "50000000", nullptr, "1..", R::kFree, G::kZero3, kB,
     "ZeRO-3 prefetch bucket (elements)", "prefetch_elements", JsonAs::kNumber, "ds: stage3_prefetch_bucket_size"},
    {"--persist-elements", &Knobs::persist_elements, "0", nullptr, "0..", R::kFree, G::kZero3, kB,
     "ZeRO-3 persistence threshold: tensors smaller stay whole (elements)", "persist_elements", JsonAs::kNumber,
     "ds: stage3_param_persistence_threshold"},
    {"--max-live-elements", &Knobs::max_live_elements, "1000000000", nullptr, "0..", R::kFree, G::kZero3, kB,
     "ZeRO-3 gathered elements the prefetch stays under", "max_live_elements", JsonAs::kNumber, "ds: stage3_max_live_parameters"},
    {"--model-persist-elements", &Knobs::model_persist_elements, "9223372036854775807", nullptr, "0..", R::kFree, G::kZero3, kB,
     "ZeRO-3 cap on all persistent elements", "model_persist_elements", JsonAs::kNumber, "ds: stage3_model_persistence_threshold"},
    {"--zero-hpz-partition-size", &Knobs::zero_hpz_partition_size, "1", nullptr, "1..1048576", R::kRange, G::kZero3, kB,
     "ZeRO++ hpZ (zero3): secondary parameter partition; 1 = off, else the ranks per node", "zero_hpz_partition_size",
     JsonAs::kNumber, "ds: zero_optimization.zero_hpz_partition_size"},
    {"--zero-quantized-weights", &Knobs::zero_quantized_weights, "off", nullptr, "on|off", R::kOneOf, G::kZero3, kB,
     "ZeRO++ qwZ (zero3): int8 block-quantised parameter all-gathers", "zero_quantized_weights", JsonAs::kBool,
     "ds: zero_optimization.zero_quantized_weights"},
    {"--zero-quantized-gradients", &Knobs::zero_quantized_gradients, "off", nullptr, "on|off", R::kOneOf, G::kZero3, kB,
     "ZeRO++ qgZ (zero3): int4 gradients over a hierarchical all-to-all", "zero_quantized_gradients", JsonAs::kBool,
     "ds: zero_optimization.zero_quantized_gradients"},
    {"--mics-shard-size", &Knobs::mics_shard_size, "0", nullptr, "0..1048576", R::kRange, G::kMics, kB,
     "MiCS ranks per partition group; must divide the world (0 = ranks per node)", "mics_shard_size", JsonAs::kNumber, ""},
    {"--mics-hierarchical-params-gather", &Knobs::mics_hierarchical_params_gather, "off", nullptr, "on|off", R::kOneOf, G::kMics, kB,
     "MiCS two-level all-gather when a partition spans nodes", "mics_hierarchical_params_gather", JsonAs::kBool, ""},
    {"--wrap", &Knobs::wrap, "block", nullptr, "block|model|every-K", R::kFree, G::kFsdp, kB,
     "FSDP wrap policy (FSDP2: the fully_shard groups)", "wrap", JsonAs::kText, ""},
    {"--backward-prefetch", &Knobs::backward_prefetch, "pre", nullptr, "none|pre|post", R::kOneOf, G::kFsdp, kB,
     "FSDP backward prefetch", "backward_prefetch", JsonAs::kText, "fsdp: backward_prefetch"},
    {"--forward-prefetch", &Knobs::forward_prefetch, "false", nullptr, "", R::kFree, G::kFsdp, kB,
     "FSDP forward prefetch", "forward_prefetch", JsonAs::kBool, "fsdp: forward_prefetch"},
    {"--limit-all-gathers", &Knobs::limit_all_gathers, "on", nullptr, "on|off", R::kOneOf, G::kFsdp, kB,
     "FSDP rate limiter", "limit_all_gathers", JsonAs::kBool, "fsdp: limit_all_gathers"},
    {"--fsdp-use-orig-params", &Knobs::fsdp_use_orig_params, "off", nullptr, "on|off", R::kOneOf, G::kFsdp, kB,
     "FSDP use_orig_params: on = each tensor 16-byte aligned in the FlatParameter", "fsdp_use_orig_params",
     JsonAs::kBool, "fsdp: use_orig_params"},
    {"--fsdp-no-sync", &Knobs::fsdp_no_sync, "on", nullptr, "on|off", R::kOneOf, G::kFsdp, kB,
     "FSDP under --grad-accum: on = no_sync() (one reduce-scatter) | off = every micro-batch", "fsdp_no_sync", JsonAs::kBool, ""},
    {"--fsdp-config", &Knobs::fsdp_config, "", nullptr, "a JSON file", R::kFree, G::kFsdp, kB,
     "JSON of FullyShardedDataParallel arguments: configures its fsdp_* row only (docs/fsdp.md)", "fsdp_config", JsonAs::kNone, ""},
    {"--fsdp2-reshard-after-forward", &Knobs::fsdp2_reshard_after_forward, "true", nullptr, "true|false|K", R::kFree, G::kFsdp2, kB,
     "FSDP2 reshard_after_forward (K: ranks to reshard to: the node)", "fsdp2_reshard_after_forward", JsonAs::kBool, ""},
    {"--fsdp2-prefetch", &Knobs::fsdp2_prefetch, "1", nullptr, "0..64", R::kRange, G::kFsdp2, kB,
     "FSDP2 groups all-gathered ahead in forward and backward (1 = implicit)", "fsdp2_prefetch", JsonAs::kNumber, ""},
};

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

const std::vector<OptionRow>& option_rows() { return kRows; }

const char* help_group_name(HelpGroup g) {
  static const char* names[] = {"Workload",  "Topology", "Strategy knobs: DDP and ZeRO-1/2",
                                "Strategy knobs: ZeRO-3 and ZeRO++", "Strategy knobs: MiCS",
                                "Strategy knobs: FSDP", "Strategy knobs: FSDP2", "Measurement",
                                "Output"};
  return names[int(g)];
}

void add_knob_options(CLI::App* app, Knobs& k, Command cmd) {
  for (const OptionRow& r : kRows) {
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
  for (const OptionRow& r : kRows) check_row(k, r);
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
  if (raf != "true" && raf != "false" && !raf_int)
    throw UsageError(fmt::format("--fsdp2-reshard-after-forward {}: allowed true|false|K with K >= 1", raf));
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
  o.fsdp2_reshard_after_forward = raf == "true" ? -1 : raf == "false" ? 0 : std::stoi(raf);
  o.fsdp2_prefetch = k.fsdp2_prefetch;
  o.grad_accum = k.grad_accum;
  o.fsdp_no_sync = k.fsdp_no_sync == "on";
  o.fsdp_use_orig_params = k.fsdp_use_orig_params == "on";
  o.mics_shard_size = k.mics_shard_size;
  o.mics_hierarchical_params_gather = k.mics_hierarchical_params_gather == "on";
  o.zero_hpz_partition_size = k.zero_hpz_partition_size;
  o.zero_quantized_weights = k.zero_quantized_weights == "on";
  o.zero_quantized_gradients = k.zero_quantized_gradients == "on";
  if (!k.ddp_config.empty()) parse_ddp_config(k.ddp_config, o.ddp);
  apply_zero_schedule(k.zero_schedule == "paper" ? ZeroSchedule::kPaper : ZeroSchedule::kShipped, o);
  apply_zero_bucket_reduce(k.zero_bucket_reduce, k.zero_schedule, !k.ds_config.empty(), o);
  return o;
}

std::vector<std::pair<std::string, nlohmann::json>> json_defaults() {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  for (const OptionRow& r : kRows) {
    if (!*r.json_key || r.json_as == JsonAs::kNone) continue;
    const std::string d = r.default_run;
    nlohmann::json v = d;
    if (r.json_as == JsonAs::kNumber) v = nlohmann::json::parse(d);
    if (r.json_as == JsonAs::kBool) v = d == "on" || d == "true";
    out.emplace_back(r.json_key, v);
  }
  return out;
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
