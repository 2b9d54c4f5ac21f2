// Flag registration and validation for `shardbench run` (see header).
#include "bench/cli/run_options.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "bench/cli/config_binding.h"
#include "bench/cli/ds_config.h"
#include "bench/cli/ddp_config.h"
#include "harness/model/checkpointing.h"
#include "harness/model/config.h"
#include "strategies/strategy.h"

namespace sb {

void add_run_options(CLI::App* app, RunArgs& a) {
  add_knob_options(app, a, Command::kRun);
  const char* topo = help_group_name(HelpGroup::kTopology);
  const char* meas = help_group_name(HelpGroup::kMeasurement);
  const char* out = help_group_name(HelpGroup::kOutput);
  app->add_option("--np", a.np, "Launch a local MPI job of this many ranks (standalone use)")
      ->check(CLI::Range(1, 4096))->group(topo);
  app->add_option("--collectives", a.collectives, "ring (counted) | mpi (library's own, modelled)")
      ->capture_default_str()->group(topo);
  app->add_option("--device", a.device, "cpu | cuda")->capture_default_str()->group(topo);
  app->add_option("--steps", a.steps, "Measured steps")->capture_default_str()->group(meas);
  app->add_option("--warmup", a.warmup, "Warm-up steps (run, not timed)")->capture_default_str()->group(meas);
  app->add_option("--seed", a.seed, "Seed of the initial model and the data")
      ->transform(whole_number(0))->capture_default_str()->group(meas);
  app->add_option("--lr", a.lr, "AdamW learning rate")->capture_default_str()->group(meas);
  app->add_option("--peak-gflops", a.peak_gflops,
                  "Peak GFLOP/s per device for MFU (0 = measure the sgemm ceiling)")->group(meas);
  app->add_option("--timeout-s", a.timeout_s,
                  "Watchdog: abort the job when a collective waits longer than this (s)")
      ->capture_default_str()->group(meas);
  app->add_option("--out", a.out, "Results JSON (written atomically after each strategy)")
      ->capture_default_str()->group(out);
  app->add_option("--trace", a.trace,
                  "Directory for a Chrome/Perfetto trace per strategy (<strategy>.trace.json)")->group(out);
  app->add_flag("--quiet", a.quiet, "No progress lines (the table is still printed)")->group(out);
  app->add_flag("--resume", a.resume, "Skip strategies already ok in --out (same config)")->group(out);
  app->add_option("--inject-fault", a.inject_fault, "")->group("");  // hidden test flag
  app->add_option("--inject-slowdown", a.inject_slowdown, "")->group("");  // hidden test flag
  app->add_option("--peak-calibration", a.peak_calibration, "")->group("");  // launcher -> ranks
  app->footer(
      "Workload, topology and strategy flags are predict's too, spelt the same; only run "
      "takes --np, --hosts, --inter-gbps, --inter-latency-ms, --collectives, --device and the "
      "Measurement and Output groups.\n\n"
      "Examples:\n"
      "  shardbench run --np 4 --model tiny --strategies ddp,zero2,fsdp_full_shard --steps 2\n"
      "  shardbench run --np 4 --ranks-per-node 2 --model small --ds-config my_ds.json "
      "--strategies zero2,fsdp_full_shard\n"
      "  shardbench run --np 2 --model tiny --strategies zero3 --zero-quantized-weights on "
      "--trace traces/\n");
}

void record_given_flags(CLI::App* app, std::set<std::string>& given) {
  app->final_callback([app, &given] {
    for (const CLI::Option* opt : app->get_options())
      if (opt->count() > 0) given.insert(opt->get_name());
  });
}

CLI::Validator whole_number(uint64_t min, uint64_t max) {
  const std::string allowed = fmt::format("allowed a whole number in {}..{}", min, max);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const char* s = text.c_str();
        const char* end = s + text.size();
        uint64_t v = 0;
        const auto [p, ec] = std::from_chars(s, end, v);  // plain digits: exact
        if (ec != std::errc() || p != end) {
          // Scientific or decimal notation (7.5e9): exact only when the value is whole.
          char* stop = nullptr;
          errno = 0;
          const long double x = std::strtold(s, &stop);
          if (text.empty() || text.find_first_not_of("0123456789.eE+") != std::string::npos ||
              stop != end || errno != 0 || !std::isfinite(x) || x < 0 ||
              x != std::floor(x) || x > 18446744073709551615.0L)
            return fmt::format("{}: {}", text, allowed);
          v = uint64_t(x);
        }
        if (text.find('-') != std::string::npos || v < min || v > max)
          return fmt::format("{}: {}", text, allowed);
        text = std::to_string(v);
        return std::string();
      },
      "UINT", "whole_number");
}

std::vector<std::string> parse_strategy_list(const std::string& s) {
  if (s == "all") return strategy_names();
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    std::string name = s.substr(pos, end - pos);
    if (find_strategy(name) == nullptr)
      throw UsageError(fmt::format("--strategies: unknown strategy '{}'{}; allowed: all or {}", name,
                                   did_you_mean(name, strategy_names()),
                                   fmt::join(strategy_names(), ",")));
    if (std::find(out.begin(), out.end(), name) != out.end())
      throw UsageError(fmt::format(
          "--strategies: '{}' is listed twice; allowed: each strategy at most once", name));
    out.push_back(name);
    pos = end + 1;
  }
  return out;
}

namespace {
template <class T>
void require(bool ok, const char* flag, const T& value, const char* allowed) {
  if (!ok) throw UsageError(fmt::format("{} {}: allowed {}", flag, value, allowed));
}
}  // namespace

void bind_fsdp_reduce_dtype(const std::string& path, const std::string& strategies,
                            bool file_reduce_fp32, const StrategyOptions& file,
                            StrategyOptions& flags) {
  if (!file_reduce_fp32 || file.precision != Precision::kBf16Mixed) return;
  for (const std::string& s : strategies == "all" ? strategy_names() : parse_strategy_list(strategies))
    if (s.rfind("fsdp_", 0) == 0)
      throw UsageError(fmt::format(
          "--fsdp-config {}: mixed_precision.reduce_dtype float32 with param_dtype bfloat16 is "
          "modelled for fsdp2 and fsdp2_hsdp only; allowed: --strategies fsdp2,fsdp2_hsdp", path));
  flags.precision = file.precision;
  flags.fsdp2_reduce_fp32 = true;
}

namespace {

// The model the workload flags describe (--model, --arch, --seq, ...).
GptConfig workload_model(const RunArgs& a) {
  GptConfig m;
  try {
    m = parse_model(a.model, a.arch);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what() + did_you_mean(a.model, preset_names()));
  }
  m.tied_head = m.tied_head && !a.untied_head;  // llama: always untied
  try {
    m.attention = parse_attention(a.attention);
    m.cross_entropy = parse_cross_entropy(a.cross_entropy);
    m.checkpoint_every = parse_activation_checkpointing(a.activation_checkpointing, m.n_layer);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  require(a.seq >= 0, "--seq", a.seq, ">= 0 (0 = the model's context)");
  if (a.seq > 0) {
    m.context = m.seq_len;  // the model keeps its positions; samples get shorter
    m.seq_len = a.seq;
    try {
      validate(m);
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  }
  return m;
}

// The flags only `run` takes: launch, hosts, measurement and output.
void check_run_flags(const RunArgs& a) {
  require(a.np >= 0 && a.np <= 4096, "--np", a.np, "0..4096");
  require(a.hosts.empty() || a.hosts == "netns", "--hosts", a.hosts, "netns");
  require(a.inter_gbps == 0 || !a.hosts.empty(), "--inter-gbps", a.inter_gbps,
          "only with --hosts netns (the link between namespace hosts)");
  require(a.inter_latency_ms < 0 || !a.hosts.empty(), "--inter-latency-ms", a.inter_latency_ms,
          "only with --hosts netns (the link between namespace hosts)");
  require(a.inter_gbps >= 0 && a.inter_gbps <= 400, "--inter-gbps", a.inter_gbps,
          "0 (unshaped) or a rate in Gb/s up to 400");
  require(a.inter_latency_ms == -1 || (a.inter_latency_ms >= 0 && a.inter_latency_ms <= 10000),
          "--inter-latency-ms", a.inter_latency_ms, "0..10000");
  if (a.np > 0 && a.ranks_per_node > 0 && a.np % a.ranks_per_node != 0)
    throw UsageError(fmt::format("--ranks-per-node {}: must divide the world size (--np {})",
                                 a.ranks_per_node, a.np));
  require(a.steps >= 1 && a.steps <= 1000000, "--steps", a.steps, "1..1000000");
  require(a.warmup >= 0 && a.warmup <= 1000000, "--warmup", a.warmup, "0..1000000");
  require(a.collectives == "ring" || a.collectives == "mpi", "--collectives", a.collectives,
          "ring|mpi");
  require(a.lr > 0 && a.lr < 10, "--lr", a.lr, "(0, 10)");
  require(a.device == "cpu" || a.device == "cuda", "--device", a.device, "cpu|cuda");
  require(!a.out.empty(), "--out", "''", "a file path");
  require(a.peak_gflops >= 0 && a.peak_gflops <= 1e9, "--peak-gflops", a.peak_gflops,
          "0 (measure) or a peak up to 1e9 GFLOP/s per device");
  // Below a second a busy, oversubscribed machine trips the watchdog on an ordinary wait.
  require(a.timeout_s >= 1 && a.timeout_s <= 1e6, "--timeout-s", a.timeout_s, "1..1000000");
  require(a.inject_slowdown >= 0 && a.inject_slowdown <= 10, "--inject-slowdown",
          a.inject_slowdown, "0..10");
}

// --inject-fault rank:step:kind (hidden test flag).
RunConfig::Fault parse_inject_fault(const std::string& text) {
  RunConfig::Fault fault;
  if (text.empty()) return fault;
  const auto p1 = text.find(':'), p2 = text.find(':', p1 + 1);
  bool ok = p1 != std::string::npos && p2 != std::string::npos;
  if (ok) {
    try {
      fault.rank = std::stoi(text.substr(0, p1));
      fault.step = std::stoi(text.substr(p1 + 1, p2 - p1 - 1));
    } catch (const std::exception&) {
      ok = false;
    }
    fault.kind = text.substr(p2 + 1);
    // kill-*: `step` is the Nth write of the results file, by rank 0 (the only writer)
    const bool write = fault.kind == "kill-mid-write" || fault.kind == "kill-before-rename";
    ok = ok && (fault.kind == "exit" || fault.kind == "hang" || fault.kind == "oom" ||
                (write && fault.rank == 0 && fault.step >= 1));
  }
  require(ok, "--inject-fault", text,
          "rank:step:exit|hang|oom or 0:N:kill-mid-write|kill-before-rename");
  return fault;
}

// The config files over the flags' options, each for its own rows (config_binding.h), and
// checked before any rank starts: against the typed flags, the strategy list and --np's world.
void bind_config_files(const RunArgs& a, RunConfig& c, BoundOptions& b) {
  const StrategyOptions& o = c.options;
  // --np on one host: the world is known now (one node of N unless --ranks-per-node says)
  const int world = a.np > 0 && a.hosts.empty() ? a.np : 0;
  const int per_node = a.ranks_per_node > 0 ? a.ranks_per_node : a.np;
  if (world > 0) check_group_knobs(o, world, per_node);
  check_qgz_contract(o);
  b.flags = o;
  b.flags_batch = c.batch_per_rank;
  if (!a.fsdp_config.empty()) bind_fsdp_config(a, o, b);
  if (!a.ds_config.empty()) {
    const DsConfig d = bind_ds_config(a, c, b);
    if (world > 0) check_group_knobs(d.applied.options, world, per_node);  // the file's hpZ
    c.ds_config = d.applied.ds_config;
    c.ds_config_stage = d.applied.ds_config_stage;
    c.ds_config_ignored = d.applied.ds_config_ignored;
  }
  bound_strategies(a, b);  // the files' stage and strategy against --strategies
}

}  // namespace

RunConfig to_run_config(const RunArgs& a, BoundOptions* bound) {
  RunConfig c;
  c.model = workload_model(a);
  check_run_flags(a);
  parse_strategy_list(a.strategies);
  c.batch_per_rank = a.batch;
  c.steps = a.steps;
  c.warmup = a.warmup;
  c.mem_limit_gb = a.mem_limit_gb;
  c.collectives = a.collectives == "ring" ? CollectiveImpl::kRing : CollectiveImpl::kMpiNative;
  c.device = a.device;
  c.trace = !a.trace.empty();
  c.inject_slowdown = a.inject_slowdown;
  c.fault = parse_inject_fault(a.inject_fault);
  c.options = knob_options(a);  // every tabled flag checked against its row (options_table.h)
  c.options.adamw.lr = float(a.lr);
  c.options.seed = a.seed;
  BoundOptions local;
  bind_config_files(a, c, bound ? *bound : local);
  return c;
}

void apply_zero_bucket_reduce(const std::string& value, const std::string& zero_schedule,
                              bool ds_config, StrategyOptions& o) {
  const std::string flag = "--zero-bucket-reduce " + value;
  if (value != "all_reduce" && value != "reduce_per_owner")
    throw UsageError(flag + ": allowed all_reduce|reduce_per_owner");
  if (value == "all_reduce") return;
  if (zero_schedule != "shipped")
    throw UsageError(flag + ": allowed with --zero-schedule shipped only (the paper's schedule "
                            "reduce-scatters)");
  if (ds_config)
    throw UsageError(flag + ": not with --ds-config; allowed: the file's "
                            "zero_optimization.use_multi_rank_bucket_allreduce false");
  o.zero_grad_reduce = ZeroGradReduce::kReducePerOwner;
}

void check_qgz_contract(const StrategyOptions& o) {
  if (!o.zero_quantized_gradients || o.zero_qgz_variant == QgzVariant::kSuite) return;
  if (o.precision == Precision::kBf16Mixed && o.zero_comm_fp16) return;
  throw UsageError(fmt::format(
      "zero_quantized_gradients on {} gradients: DeepSpeed's quantiser reads fp16 "
      "(csrc/quantization/pt_binding.cpp), so qgZ is right only for bf16 training with "
      "communication_data_type fp16 (stage3.py casts the gradients first); allowed: "
      "--precision bf16-mixed with --zero-communication-data-type fp16 (or the --ds-config key), "
      "or --zero-qgz-variant suite to quantise the gradients' own dtype",
      o.precision == Precision::kFp32 ? "fp32" : "bf16"));
}

void check_group_knobs(const StrategyOptions& o, int world, int ranks_per_node) {
  const int k = o.fsdp2_reshard_after_forward;
  if (k > 1 && k != world && k != ranks_per_node)
    throw UsageError(fmt::format(
        "--fsdp2-reshard-after-forward {}: an integer must be 1, the ranks per node {} or the "
        "world size {} (post-forward groups are nodes)", k, ranks_per_node, world));
  const int P = o.mics_shard_size > 0 ? o.mics_shard_size : ranks_per_node;
  if (world % P != 0)
    throw UsageError(fmt::format("--mics-shard-size {}: must divide the world size {}", P, world));
  if (o.zero_hpz_partition_size > 1 && o.zero_hpz_partition_size != ranks_per_node)
    throw UsageError(fmt::format(
        "--zero-hpz-partition-size {}: must be 1 (off) or the ranks per node {} (the secondary "
        "partition is node-local)", o.zero_hpz_partition_size, ranks_per_node));
  if (o.mics_hierarchical_params_gather && (P <= ranks_per_node || P % ranks_per_node != 0))
    throw UsageError(fmt::format(
        "--mics-hierarchical-params-gather on: needs a partition of whole nodes spanning more than "
        "one (--mics-shard-size {} with {} ranks per node)", P, ranks_per_node));
}

}  // namespace sb
