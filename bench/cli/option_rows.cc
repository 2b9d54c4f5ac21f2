// The options table's rows (see bench/cli/options_table.h): data only, so the results reader
// (and its fuzz target) takes each knob's default without linking the command line's checks.
#include "bench/cli/options_table.h"

#include "harness/launch/report.h"  // the recorded names (precision_name, ...), inline

namespace sb {

namespace {
using R = OptionRow;
using G = HelpGroup;
using O = StrategyOptions;
using nlohmann::json;
constexpr Command kB = Command::kBoth, kRun = Command::kRun;
constexpr bool kPerRow = true;

// config.<key> records the option as it is.
template <auto option>
json as_is(const O& o) {
  return o.*option;
}

template <auto option>
void copy_option(const O& from, O& to) {
  to.*option = from.*option;
}

// The strategy option a row sets, recorded as it is or by `record` (a name, a flag's spelling).
template <auto option>
constexpr OptionField field(json (*record)(const O&) = as_is<option>) {
  return {record, copy_option<option>};
}

// flag, field, run default, predict default, allowed, check, group, commands, help,
// config key, JSON kind of the default, strategy option, config-file key, per row
const std::vector<OptionRow> kRows = {
    {"--model", &Knobs::model, "small", "gpt2-124m", "a preset or L,C,H,T,V", R::kFree, G::kWorkload, kB,
     "Model: a preset (run: the suite's; predict also gpt2-*, llama*, ...) or L,C,H,T,V"},
    {"--strategies", &Knobs::strategies, "all", nullptr, "all or a comma list", R::kFree, G::kWorkload, kB,
     "Strategies to run or predict"},
    {"--arch", &Knobs::arch, "", nullptr, "gpt2|llama", R::kFree, G::kWorkload, kB,
     "Block of an L,C,H,T,V spec: gpt2 (default) | llama (RMSNorm, SwiGLU, RoPE); a preset names its own"},
    {"--seq", &Knobs::seq, "0", nullptr, "0..65536", R::kRange, G::kWorkload, kB,
     "Tokens per sample (0 = the model's context)"},
    {"--batch", &Knobs::batch, "4", "1", "1..65536", R::kRange, G::kWorkload, kB,
     "Sequences per rank per micro-batch", "batch_per_rank", JsonAs::kNumber,
     {}, "ds: train_micro_batch_size_per_gpu (ignored)"},
    {"--grad-accum", &Knobs::grad_accum, "1", nullptr, "1..4096", R::kRange, G::kWorkload, kB,
     "Micro-batches of --batch per optimizer step (gradient accumulation)",
     "grad_accum", JsonAs::kNumber,
     field<&O::grad_accum>(), "ds: gradient_accumulation_steps", kPerRow},
    {"--precision", &Knobs::precision, "fp32", "bf16-mixed", "fp32|bf16-mixed", R::kOneOf, G::kWorkload, kB,
     "Training precision", "precision", JsonAs::kText,
     field<&O::precision>([](const O& o) -> json { return precision_name(o.precision); }),
     "ds: bf16.enabled; fsdp: mixed_precision", kPerRow},
    {"--untied-head", &Knobs::untied_head, "false", nullptr, "", R::kFree, G::kWorkload, kB,
     "Separate LM head weight (default: tied to wte)"},
    {"--attention", &Knobs::attention, "fused", nullptr, "naive|fused", R::kFree, G::kWorkload, kB,
     "naive (stores the TxT probabilities) | fused (FlashAttention: row log-sum-exp)"},
    {"--cross-entropy", &Knobs::cross_entropy, "full", nullptr, "full|chunked", R::kOneOf, G::kWorkload, kB,
     "full (logits, their fp32 upcast and probabilities held) | chunked (loss and its gradient in fp32 one "
     "chunk of rows at a time)"},
    {"--activation-checkpointing", &Knobs::activation_checkpointing, "none", nullptr, "none|op|block|every-K", R::kFree, G::kWorkload, kB,
     "Keep only a checkpointed block's input, recompute its forward in backward (every K-th block); op: "
     "selective, per op"},
    {"--ranks-per-node", &Knobs::ranks_per_node, "0", nullptr, "0..1048576", R::kRange, G::kTopology, kB,
     "Ranks per (virtual) node; 0 = run: MPI_COMM_TYPE_SHARED, predict: the cluster's"},
    {"--mem-limit-gb", &Knobs::mem_limit_gb, "0", nullptr, "0..999999", R::kRange, G::kTopology, kB,
     "Per-rank memory limit in GiB (0 = run: none, predict: the cluster's)",
     "mem_limit_gb", JsonAs::kNumber},
    {"--hosts", &Knobs::hosts, "", nullptr, "netns", R::kFree, G::kTopology, kRun,
     "netns: run on H = np / ranks-per-node (default 2) network-namespace hosts of this machine on one "
     "bridge (root; ci/two_host.sh), and count the bytes on their links"},
    {"--inter-gbps", &Knobs::inter_gbps, "0", nullptr, "0..400", R::kRange, G::kTopology, kRun,
     "--hosts netns: shape every host's link to this rate in Gb/s with tc tbf, checked by a timed "
     "transfer before the run (0: unshaped)"},
    {"--inter-latency-ms", &Knobs::inter_latency_ms, "-1", nullptr, "0..10000", R::kFree, G::kTopology, kRun,
     "--hosts netns: one-way delay of every inter-host path in ms (tc netem; refused on a kernel "
     "without sch_netem; default: none)"},
    {"--overlap", &Knobs::overlap, "on", nullptr, "on|off", R::kOneOf, G::kDdpZero, kB,
     "Overlap communication with compute", "overlap", JsonAs::kBool,
     field<&O::overlap>(), "ds: zero_optimization.overlap_comm", kPerRow},
    {"--bucket-mb", &Knobs::bucket_mb, "25", nullptr, "(0, 1048576]", R::kFree, G::kDdpZero, kB,
     "DDP/ZeRO gradient bucket size (MiB)", "bucket_mb", JsonAs::kNumber,
     field<&O::bucket_mb>(), "ds: reduce_bucket_size (elements); ddp: bucket_cap_mb", kPerRow},
    {"--ddp-config", &Knobs::ddp_config, "", nullptr, "a JSON file", R::kFree, G::kDdpZero, kB,
     "JSON of DistributedDataParallel arguments: configures the ddp row only (docs/ddp.md)",
     "ddp_config", JsonAs::kNone},
    {"--zero-schedule", &Knobs::zero_schedule, "shipped", nullptr, "shipped|paper", R::kOneOf, G::kDdpZero, kB,
     "ZeRO: DeepSpeed's defaults (shipped) | the paper's (reduce-scatter, always release)"},
    {"--zero-bucket-reduce", &Knobs::zero_bucket_reduce, "all_reduce", nullptr, "all_reduce|reduce_per_owner", R::kOneOf, G::kDdpZero, kB,
     "ZeRO-1/2 (shipped): DeepSpeed's use_multi_rank_bucket_allreduce true | false", "", JsonAs::kNone,
     {}, "ds: zero_optimization.use_multi_rank_bucket_allreduce"},
    {"--ds-config", &Knobs::ds_config, "", nullptr, "a JSON file", R::kFree, G::kDdpZero, kB,
     "DeepSpeed config JSON: configures the zero1/2/3 and mics rows only, as DeepSpeed would",
     "ds_config", JsonAs::kNone},
    {"--prefetch-elements", &Knobs::prefetch_elements, "50000000", nullptr, "1..", R::kFree, G::kZero3, kB,
     "ZeRO-3 prefetch bucket (elements)", "prefetch_elements", JsonAs::kNumber,
     field<&O::prefetch_elements>(), "ds: stage3_prefetch_bucket_size"},
    {"--persist-elements", &Knobs::persist_elements, "0", nullptr, "0..", R::kFree, G::kZero3, kB,
     "ZeRO-3 persistence threshold: tensors smaller stay whole (elements)",
     "persist_elements", JsonAs::kNumber,
     field<&O::persist_elements>(), "ds: stage3_param_persistence_threshold"},
    {"--max-live-elements", &Knobs::max_live_elements, "1000000000", nullptr, "0..", R::kFree, G::kZero3, kB,
     "ZeRO-3 gathered elements the prefetch stays under", "max_live_elements", JsonAs::kNumber,
     field<&O::max_live_elements>(), "ds: stage3_max_live_parameters"},
    {"--model-persist-elements", &Knobs::model_persist_elements, "9223372036854775807", nullptr, "0..", R::kFree, G::kZero3, kB,
     "ZeRO-3 cap on all persistent elements", "model_persist_elements", JsonAs::kNumber,
     field<&O::model_persist_elements>(), "ds: stage3_model_persistence_threshold"},
    {"--zero-hpz-partition-size", &Knobs::zero_hpz_partition_size, "1", nullptr, "1..1048576", R::kRange, G::kZero3, kB,
     "ZeRO++ hpZ (zero3): secondary parameter partition; 1 = off, else the ranks per node",
     "zero_hpz_partition_size", JsonAs::kNumber,
     field<&O::zero_hpz_partition_size>(), "ds: zero_optimization.zero_hpz_partition_size"},
    {"--zero-quantized-weights", &Knobs::zero_quantized_weights, "off", nullptr, "on|off", R::kOneOf, G::kZero3, kB,
     "ZeRO++ qwZ (zero3): int8 block-quantised parameter all-gathers",
     "zero_quantized_weights", JsonAs::kBool,
     field<&O::zero_quantized_weights>(), "ds: zero_optimization.zero_quantized_weights"},
    {"--zero-quantized-gradients", &Knobs::zero_quantized_gradients, "off", nullptr, "on|off", R::kOneOf, G::kZero3, kB,
     "ZeRO++ qgZ (zero3): int4 gradients over a hierarchical all-to-all",
     "zero_quantized_gradients", JsonAs::kBool,
     field<&O::zero_quantized_gradients>(), "ds: zero_optimization.zero_quantized_gradients"},
    {"--zero-contiguous-gradients", &Knobs::zero_contiguous_gradients, "on", nullptr, "on|off", R::kOneOf, G::kZero3, kB,
     "DeepSpeed contiguous_gradients (zero3, mics): the reduce_bucket_size IPG buffer (--bucket-mb) "
     "allocated up front and held", "zero_contiguous_gradients", JsonAs::kBool,
     field<&O::zero_contiguous_gradients>(), "ds: zero_optimization.contiguous_gradients"},
    {"--zero-communication-data-type", &Knobs::zero_communication_data_type, "auto", nullptr, "auto|fp16", R::kOneOf,
     G::kZero3, kB, "DeepSpeed communication_data_type (zero3): auto (the gradients' dtype) | fp16 (bf16-mixed "
     "only: what qgZ's quantiser reads)", "zero_communication_data_type", JsonAs::kText,
     field<&O::zero_comm_fp16>([](const O& o) -> json { return o.zero_comm_fp16 ? "fp16" : "auto"; }),
     "ds: communication_data_type"},
    {"--zero-qgz-variant", &Knobs::zero_qgz_variant, "shipped", nullptr, "shipped|suite", R::kOneOf, G::kZero3, kB,
     "qgZ: shipped (fp16 gradients only; L x the mean on the quantised path) | suite (any dtype "
     "quantised; the mean everywhere)", "zero_qgz_variant", JsonAs::kText,
     field<&O::zero_qgz_variant>([](const O& o) -> json {
       return o.zero_qgz_variant == QgzVariant::kSuite ? "suite" : "shipped";
     })},
    {"--mics-shard-size", &Knobs::mics_shard_size, "0", nullptr, "0..1048576", R::kRange, G::kMics, kB,
     "MiCS ranks per partition group; must divide the world (0 = ranks per node)",
     "mics_shard_size", JsonAs::kNumber,
     field<&O::mics_shard_size>()},
    {"--mics-hierarchical-params-gather", &Knobs::mics_hierarchical_params_gather, "off", nullptr, "on|off", R::kOneOf, G::kMics, kB,
     "MiCS two-level all-gather when a partition spans nodes (--mics-schedule per-unit only)",
     "mics_hierarchical_params_gather", JsonAs::kBool, field<&O::mics_hierarchical_params_gather>()},
    {"--mics-schedule", &Knobs::mics_schedule, "shipped", nullptr, "shipped|per-unit", R::kOneOf, G::kMics, kB,
     "MiCS: shipped (ZeRO-3's fetch, release and bucketed reduce over the partition, one replica "
     "all-reduce per step) | per-unit (FSDP2-style units)", "mics_schedule", JsonAs::kText,
     field<&O::mics_schedule>([](const O& o) -> json {
       return o.mics_schedule == MicsSchedule::kPerUnit ? "per_unit" : "shipped";
     }),
     },
    {"--wrap", &Knobs::wrap, "block", nullptr, "block|model|every-K", R::kFree, G::kFsdp, kB,
     "FSDP wrap policy (FSDP2: the fully_shard groups)", "wrap", JsonAs::kText, field<&O::wrap>()},
    {"--backward-prefetch", &Knobs::backward_prefetch, "pre", nullptr, "none|pre|post", R::kOneOf, G::kFsdp, kB,
     "FSDP backward prefetch", "backward_prefetch", JsonAs::kText,
     field<&O::backward_prefetch>([](const O& o) -> json { return prefetch_name(o.backward_prefetch); }),
     "fsdp: backward_prefetch"},
    {"--forward-prefetch", &Knobs::forward_prefetch, "false", nullptr, "", R::kFree, G::kFsdp, kB,
     "FSDP forward prefetch", "forward_prefetch", JsonAs::kBool,
     field<&O::forward_prefetch>(), "fsdp: forward_prefetch"},
    {"--limit-all-gathers", &Knobs::limit_all_gathers, "on", nullptr, "on|off", R::kOneOf, G::kFsdp, kB,
     "FSDP rate limiter", "limit_all_gathers", JsonAs::kBool,
     field<&O::limit_all_gathers>(), "fsdp: limit_all_gathers"},
    {"--fsdp-use-orig-params", &Knobs::fsdp_use_orig_params, "off", nullptr, "on|off", R::kOneOf, G::kFsdp, kB,
     "FSDP use_orig_params: on = each tensor 16-byte aligned in the FlatParameter",
     "fsdp_use_orig_params", JsonAs::kBool,
     field<&O::fsdp_use_orig_params>(), "fsdp: use_orig_params"},
    {"--fsdp-no-sync", &Knobs::fsdp_no_sync, "on", nullptr, "on|off", R::kOneOf, G::kFsdp, kB,
     "FSDP under --grad-accum: on = no_sync() (one reduce-scatter) | off = every micro-batch",
     "fsdp_no_sync", JsonAs::kBool,
     field<&O::fsdp_no_sync>()},
    {"--fsdp-config", &Knobs::fsdp_config, "", nullptr, "a JSON file", R::kFree, G::kFsdp, kB,
     "JSON of FullyShardedDataParallel arguments: configures its fsdp_* row only (docs/fsdp.md)",
     "fsdp_config", JsonAs::kNone},
    {"--fsdp2-reshard-after-forward", &Knobs::fsdp2_reshard_after_forward, "auto", nullptr, "auto|true|false|K", R::kFree,
     G::kFsdp2, kB, "FSDP2 reshard_after_forward: auto (None: every group but the root) | true (the root too) | "
     "false | K (ranks to reshard to: the node; the root too)"},
    {"--fsdp2-reduce-dtype", &Knobs::fsdp2_reduce_dtype, "auto", nullptr, "auto|fp32", R::kOneOf, G::kFsdp2, kB,
     "FSDP2 MixedPrecisionPolicy.reduce_dtype: auto (None: the gradients' dtype) | fp32 (reduce-scatter "
     "and sharded grads in fp32)", "fsdp2_reduce_dtype", JsonAs::kText,
     field<&O::fsdp2_reduce_fp32>([](const O& o) -> json { return o.fsdp2_reduce_fp32 ? "fp32" : "auto"; }),
     "fsdp: mixed_precision.reduce_dtype"},
    {"--fsdp2-mixed-precision", &Knobs::fsdp2_mixed_precision, "none", nullptr, "none|torchtitan", R::kOneOf, G::kFsdp2, kB,
     "FSDP2 preset: torchtitan (param_dtype bf16, reduce_dtype fp32: implies --precision bf16-mixed "
     "--fsdp2-reduce-dtype fp32)"},
    {"--fsdp2-prefetch", &Knobs::fsdp2_prefetch, "1", nullptr, "0..64", R::kRange, G::kFsdp2, kB,
     "FSDP2 groups all-gathered ahead in forward and backward (1 = implicit)",
     "fsdp2_prefetch", JsonAs::kNumber,
     field<&O::fsdp2_prefetch>()},
};

json grad_reduce_json(const O& o) { return zero_grad_reduce_name(o.zero_grad_reduce); }
json fetch_json(const O& o) { return o.zero3_coalesced_fetch ? "coalesced" : "per_tensor"; }
// fully_shard's reshard_after_forward: true (None or True), false or K; whether the root is
// resharded too (an explicit True or K) is fsdp2_reshard_root, so files from before it (which
// always kept the root) read the same.
json reshard_json(const O& o) {
  const int k = o.fsdp2_reshard_after_forward;
  return k < 0 ? json(true) : k == 0 ? json(false) : json(k);
}
json reshard_root_json(const O& o) {
  return o.fsdp2_reshard_after_forward != kFsdp2ReshardAuto && o.fsdp2_reshard_after_forward != 0;
}

// config key, strategy option, config-file key
const std::vector<DerivedKey> kDerived = {
    {"zero_grad_reduce", field<&O::zero_grad_reduce>(grad_reduce_json),
     "ds: zero_optimization.use_multi_rank_bucket_allreduce"},
    {"reuse_distance", field<&O::reuse_distance>(), "ds: stage3_max_reuse_distance"},
    {"zero3_fetch", field<&O::zero3_coalesced_fetch>(fetch_json), "ds: (as shipped)"},
    {"fsdp2_reshard_after_forward", field<&O::fsdp2_reshard_after_forward>(reshard_json)},
    {"fsdp2_reshard_root", field<&O::fsdp2_reshard_after_forward>(reshard_root_json)},
};
}  // namespace

const std::vector<OptionRow>& option_rows() { return kRows; }
const std::vector<DerivedKey>& derived_keys() { return kDerived; }

std::vector<std::pair<std::string, nlohmann::json>> json_defaults() {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  for (const OptionRow& r : option_rows()) {
    if (!*r.json_key || r.json_as == JsonAs::kNone) continue;
    const std::string d = r.default_run;
    nlohmann::json v = d;
    if (r.json_as == JsonAs::kNumber) v = nlohmann::json::parse(d);
    if (r.json_as == JsonAs::kBool) v = d == "on" || d == "true";
    out.emplace_back(r.json_key, v);
  }
  const StrategyOptions defaults{};  // no flag sets a derived key: the flags' defaults leave these
  for (const DerivedKey& k : derived_keys()) out.emplace_back(k.json_key, k.option.record(defaults));
  return out;
}

}  // namespace sb
