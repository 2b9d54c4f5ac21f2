// `shardbench predict`: the analytical model of harness/predict on the command line — a table
// and a JSON document per strategy for a model on a cluster, `--fit` for the smallest world
// at which each strategy fits, `--sweep N` to time N predictions. No MPI. Bad flags print one
// line naming the flag and exit 2 (UsageError), like `run`.
#include <algorithm>
#include <chrono>
#include <set>
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/cli/config_binding.h"
#include "bench/cli/ds_config.h"
#include "bench/cli/output_path.h"
#include "bench/cli/run_options.h"
#include "harness/model/checkpointing.h"
#include "harness/predict/predict.h"
#include "harness/launch/report.h"

namespace sb {
namespace {

// The table's knobs (bench/cli/options_table.h) plus what only a prediction takes.
struct PredictArgs : Knobs {
  uint64_t params = 0;
  int world = 8;
  std::string cluster = "dgx-h100";
  bool fit = false;
  int max_world = 65536;
  int sweep = 0;
  bool show_cluster = false;
  std::string json;
};

PredictArgs g_args;

void require(bool ok, const std::string& flag, const std::string& allowed) {
  if (!ok) throw UsageError(fmt::format("{}: allowed {}", flag, allowed));
}

PredictConfig to_config(const PredictArgs& a, const Cluster& cl) {
  PredictConfig cfg;
  try {
    if (a.params > 0) {
      if (a.activation_checkpointing != "none")
        throw std::invalid_argument("--activation-checkpointing " + a.activation_checkpointing +
                                    ": needs --model (a bare --params count has no blocks)");
      cfg.model = bare_shape(a.params, a.seq > 0 ? a.seq : 2048);
    } else {
      GptConfig c = parse_predict_model(a.model, a.arch);
      c.tied_head = c.tied_head && !a.untied_head;  // llama: always untied
      c.attention = parse_attention(a.attention);
      c.cross_entropy = parse_cross_entropy(a.cross_entropy);
      c.checkpoint_every = parse_activation_checkpointing(a.activation_checkpointing, c.n_layer);
      if (a.seq > 0) c.seq_len = a.seq;  // every sample is one context of T tokens
      cfg.model = model_shape(c);
    }
  } catch (const std::invalid_argument& e) {
    std::vector<std::string> names = preset_names();
    for (const std::string& n : predict_model_aliases()) names.push_back(n);
    const bool model = std::string(e.what()).rfind("--model", 0) == 0;
    throw UsageError(e.what() + (model ? did_you_mean(a.model, names) : std::string()));
  }
  cfg.ranks_per_node =
      a.ranks_per_node > 0 ? a.ranks_per_node : std::min(a.world, cl.ranks_per_node);
  require(a.world >= 1 && a.world <= (1 << 24), fmt::format("--world {}", a.world), "1..16777216");
  if (a.ranks_per_node == 0)
    require(a.world % cfg.ranks_per_node == 0, fmt::format("--world {}", a.world),
            fmt::format("whole nodes of the cluster's {} ranks (or set --ranks-per-node)",
                        cfg.ranks_per_node));
  require(a.world % cfg.ranks_per_node == 0, fmt::format("--ranks-per-node {}", cfg.ranks_per_node),
          fmt::format("a divisor of --world {}", a.world));
  require(a.max_world >= 1, fmt::format("--max-world {}", a.max_world), ">= 1");
  cfg.world = a.world;
  cfg.batch_per_rank = a.batch;
  cfg.mem_limit_gb = a.mem_limit_gb;
  cfg.options = knob_options(a);  // every tabled flag checked against its row
  require(a.zero_hpz_partition_size == 1 || a.zero_hpz_partition_size == cfg.ranks_per_node,
          fmt::format("--zero-hpz-partition-size {}", a.zero_hpz_partition_size),
          fmt::format("1 (off) or the ranks per node ({})", cfg.ranks_per_node));
  return cfg;
}

// --ds-config and --fsdp-config: each file's knobs for its own rows, exactly as `run` binds
// them (bench/cli/config_binding.h); returns the strategies to predict (a file's stage or
// sharding_strategy picks its strategy).
std::vector<std::string> bind_configs(const PredictArgs& a, const PredictConfig& cfg,
                                      BoundOptions& b) {
  check_qgz_contract(cfg.options);
  b.flags = cfg.options;
  b.flags_batch = cfg.batch_per_rank;
  if (!a.ds_config.empty()) {
    RunConfig run;
    run.options = cfg.options;
    run.batch_per_rank = cfg.batch_per_rank;
    bind_ds_config(a, run, b);
  }
  if (!a.fsdp_config.empty()) bind_fsdp_config(a, cfg.options, b);
  return bound_strategies(a, b);
}

PredictConfig row_config(const PredictConfig& cfg, const BoundOptions& b, const std::string& s) {
  PredictConfig row = cfg;
  row.options = b.for_strategy(s);
  row.batch_per_rank = b.batch_for(s);
  return row;
}

void write_document(const std::string& path, const nlohmann::json& doc) {
  try {
    write_json_atomic(path, doc);
  } catch (const std::runtime_error& e) {
    throw UsageError(fmt::format("--json {}: {}", path, e.what()));
  }
}

std::string gib(double bytes) { return fmt::format("{:.2f}", bytes / double(1ull << 30)); }

// Where each strategy's step goes: the range from the stated uncertainty, the compute time by
// kernel class, the phases and the exposed communication (ms).
void print_breakdown(const std::vector<Prediction>& ps) {
  fmt::print("\nstep time in ms: range from the model's stated uncertainty; compute by kernel "
             "class; phases of the step\n");
  for (const Prediction& p : ps) {
    std::string classes;
    for (int k = 0; k < kNumKernelClasses; ++k)
      classes += fmt::format(" {} {:.1f}", kernel_class_name(KernelClass(k)),
                             p.kernel_s[size_t(k)] * 1e3);
    fmt::print("{:<24} step {:.1f} [{:.1f}, {:.1f}] (+-{:.0f} %{})\n", p.strategy, p.step_s * 1e3,
               p.step_lo_s * 1e3, p.step_hi_s * 1e3, p.uncertainty * 100,
               p.outside.empty() ? "" : ", outside the validated region: " + p.outside);
    if (p.model_state_only) continue;
    fmt::print("{:<24}   compute {:.1f}:{} launch-floor {:.1f} contention {:.1f}\n", "",
               p.compute_s * 1e3, classes, p.launch_s * 1e3, p.contention_s * 1e3);
    if (p.phases.empty()) continue;
    const StepPhases& ph = p.phases.back();
    fmt::print("{:<24}   forward {:.1f} backward {:.1f} optimizer {:.1f} other {:.1f} exposed "
               "comm {:.1f} of comm {:.1f}\n", "", ph.forward_s * 1e3, ph.backward_s * 1e3,
               ph.optimizer_s * 1e3, ph.other_s * 1e3, ph.exposed_comm_s * 1e3, p.comm_s * 1e3);
  }
}

void print_table(const PredictConfig& cfg, const Cluster& cl, const std::vector<Prediction>& ps,
                 const BoundOptions& b, const std::vector<std::string>& differ) {
  const ModelShape& m = *cfg.model;
  fmt::print(
      "shardbench predict: {} ({:.3g} params), world {} = {} node(s) x {}, batch {}/rank x "
      "{} tokens, {}, cluster {} ({})\n",
      m.config.name, double(m.num_params), cfg.world, cfg.world / cfg.ranks_per_node,
      cfg.ranks_per_node, cfg.batch_per_rank, m.config.seq_len,
      precision_name(cfg.options.precision), cl.name, cl.device);
  if (!m.bare) {
    const bool bf16 = cfg.options.precision == Precision::kBf16Mixed;
    fmt::print("loss: --cross-entropy {} ({}); --activation-checkpointing {}\n",
               cross_entropy_name(m.config.cross_entropy),
               m.config.cross_entropy == CrossEntropyKind::kChunked
                   ? (bf16 ? "bf16 logits, fp32 loss and gradient 1/8 of the rows at a time"
                           : "fp32 logits, fp32 loss and gradient 1/8 of the rows at a time")
                   : (bf16 ? "bf16 logits, fp32 upcast and probabilities held"
                           : "fp32 logits and probabilities held"),
               activation_checkpointing_name(m.config.checkpoint_every));
  }
  uint64_t largest = 0;  // memory in GiB, or in MiB for small models
  for (const Prediction& p : ps) largest = std::max(largest, p.device_peak);
  const bool mib = largest < (1ull << 30);
  const char* u = mib ? "MiB" : "GiB";
  auto mem = [&](double bytes) {
    return fmt::format("{:.2f}", bytes / double(mib ? 1ull << 20 : 1ull << 30));
  };
  fmt::print(
      "\n{:<24} {:>4} {:>10} {:>9} {:>9} {:>8} {:>9} {:>8} {:>10} {:>10} {:>9} {:>9} {:>12} {:>5} "
      "{:>5}\n",
      "strategy", "fits", fmt::format("device {}", u), fmt::format("peak {}", u), fmt::format("state {}", u),
      fmt::format("act {}", u), "gathered", "commbuf", "intra MiB", "inter MiB", "comm s", "step s",
      "tokens/s", "MFU", "HFU");
  for (const Prediction& p : ps) {
    const double state = double(p.state_params + p.state_grads + p.state_optimizer);
    fmt::print(
        "{:<24} {:>4} {:>10} {:>9} {:>9} {:>8} {:>9} {:>8} {:>10.1f} {:>10.1f} {:>9.4f} {:>9.4f} "
        "{:>12.0f} {:>5.2f} {:>5.2f}\n",
        p.strategy, p.fits ? "yes" : "NO", mem(double(p.device_peak)), mem(double(p.peak)), mem(state),
        mem(double(p.activations)), mem(double(p.at_peak[int(MemCategory::kGatheredParams)])),
        mem(double(p.at_peak[int(MemCategory::kCommBuffers)])),
        double(p.traffic.max_rank_intra) / (1 << 20), double(p.traffic.max_rank_inter) / (1 << 20),
        p.comm_s, p.step_s, p.tokens_per_s, p.mfu, p.hfu);
  }
  fmt::print(
      "(per rank per step: memory at the peak ({}{}); device = peak + CUDA context + NCCL buffers + "
      "caching-allocator margin (GPU clusters, first row: {} + {} + {}); bytes sent by the busiest rank per "
      "hop class; limit {} GiB per rank{}; step s {} overlap)\n",
      u,
      !ps.empty() && std::string(ps.front().memory_of) == "stack" && cfg.options.precision == Precision::kBf16Mixed
          ? ", as PyTorch / DeepSpeed hold it in bf16: no fp32 work copies"
          : "",
      ps.empty() ? "0" : mem(double(ps.front().cuda_context)),
      ps.empty() ? "0" : mem(double(ps.front().nccl_buffers)),
      ps.empty() ? "0" : mem(double(ps.front().allocator_margin)), gib(ps.empty() ? 0 : ps.front().limit_bytes),
      cfg.model->bare ? "; --params: model state only" : "",
      cfg.options.overlap ? "with" : "without");
  print_breakdown(ps);
  if (differ.empty()) return;
  fmt::print("rows differ in {}; each row's settings:\n", fmt::join(differ, ", "));
  for (const Prediction& p : ps) {
    const nlohmann::json r = row_settings(p.strategy, b);
    fmt::print("  {:<22} {}, overlap {}, bucket {:g} MiB, batch {} x {} micro-batches ({})\n",
               p.strategy, r["precision"].get<std::string>(), r["overlap"] ? "on" : "off",
               r["bucket_mb"].get<double>(), r["batch_per_rank"].get<int>(), r["grad_accum"].get<int>(),
               r["configured_by"].get<std::string>());
  }
}

int run_fit(const PredictConfig& cfg, const Cluster& cl, const std::vector<std::string>& names,
            const PredictArgs& a, const BoundOptions& b) {
  std::vector<nlohmann::json> results;
  const ModelShape& m = *cfg.model;
  fmt::print(
      "shardbench predict --fit: {} on {} ({} GiB per rank), batch {}/rank x {} tokens, {}; "
      "activations {} GiB per rank at any world (not sharded)\n\n",
      m.config.name, cl.name, gib(cl.memory_per_rank(1)), cfg.batch_per_rank, m.config.seq_len,
      precision_name(cfg.options.precision),
      m.bare ? std::string("n/a")
             : gib(double(activation_bytes(m.config, cfg.batch_per_rank,
                                           cfg.options.precision == Precision::kBf16Mixed))));
  fmt::print("{:<24} {:>10} {:>7} {:>10}\n", "strategy", "min world", "nodes", "device GiB");
  for (const std::string& s : names) {
    const FitResult f = smallest_fitting_world(row_config(cfg, b, s), s, cl, a.max_world);
    if (f.min_world == 0) {
      fmt::print("{:<24} {:>10} {:>7} {:>10}\n", s, fmt::format("> {}", a.max_world), "-", "-");
      results.push_back(
          {{"strategy", s}, {"fit", {{"min_world", nullptr}, {"max_world", a.max_world}}}});
      continue;
    }
    const int G = std::min(f.min_world, cfg.ranks_per_node);
    fmt::print("{:<24} {:>10} {:>7} {:>10}\n", s, f.min_world, f.min_world / G,
               gib(double(f.at_min.device_peak)));
    nlohmann::json r = prediction_json(f.at_min);
    r["fit"] = {{"min_world", f.min_world}, {"ranks_per_node", G}, {"max_world", a.max_world}};
    r["settings"] = row_settings(s, b);
    results.push_back(r);
  }
  if (!a.json.empty())
    write_document(a.json, prediction_document(cfg, cl, results, knob_config_json(cfg.options)));
  return 0;
}

int run_sweep(PredictConfig cfg, const Cluster& cl, const std::vector<std::string>& names, int n,
              const BoundOptions& b) {
  const auto t0 = std::chrono::steady_clock::now();
  int done = 0, fits = 0;
  const int G = cfg.ranks_per_node;
  while (done < n) {
    for (int nodes = 1; nodes <= 1024 && done < n; nodes *= 2)
      for (const std::string& s : names) {
        cfg.world = nodes * G;
        fits += predict(row_config(cfg, b, s), s, cl).fits ? 1 : 0;
        if (++done == n) break;
      }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(
      "shardbench predict --sweep: {} predictions ({} strategies x 1..1024 nodes of {}) in "
      "{:.3f} s = {:.0f} per second; {} fit\n",
      done, names.size(), G, secs, done / secs, fits);
  return 0;
}

}  // namespace

void add_predict_command(CLI::App& app) {
  PredictArgs& a = g_args;
  CLI::App* p = app.add_subcommand(
      "predict", "Predict memory, bytes and step time of strategies at any scale (no MPI)");
  add_knob_options(p, a, Command::kPredict);
  const char* topo = help_group_name(HelpGroup::kTopology);
  const char* out = help_group_name(HelpGroup::kOutput);
  p->add_option("--params", a.params,
                "A bare parameter count instead of --model (model state and bytes only), e.g. 7.5e9")
      ->transform(whole_number(1, 1'000'000'000'000'000))
      ->excludes(p->get_option("--model"))
      ->group(help_group_name(HelpGroup::kWorkload));
  p->add_option("--world", a.world, "Ranks (devices)")->capture_default_str()->group(topo);
  p->add_option(
       "--cluster", a.cluster,
       "Preset (" + fmt::format("{}", fmt::join(cluster_names(), "|")) + ") or a JSON file")
      ->capture_default_str()->group(topo);
  p->add_flag("--show-cluster", a.show_cluster,
              "Print the cluster as JSON (a template for --cluster FILE)")->group(out);
  p->add_flag("--fit", a.fit, "Smallest world at which each strategy fits")->group(out);
  p->add_option("--max-world", a.max_world, "Largest world --fit tries")
      ->capture_default_str()->group(out);
  p->add_option("--sweep", a.sweep, "Time this many predictions (1..1024 nodes x strategies)")
      ->check(CLI::Range(1, 100'000'000))->group(out);
  p->add_option("--json", a.json, "Write the prediction document here")->group(out);
  p->footer(
      "Workload, topology and strategy flags are run's too, spelt the same; only predict takes "
      "--params, --world, --cluster and its Output group.\n\n"
      "Examples:\n"
      "  shardbench predict --model llama2-7b --world 64 --cluster dgx-h100\n"
      "  shardbench predict --model gpt2-1.5b --world 16 --strategies zero2,fsdp_full_shard "
      "--ds-config my_ds.json\n"
      "  shardbench predict --model llama2-13b --fit --cluster dgx-a100-80g\n");
}

static int predict_all(const PredictArgs& a) {
  Cluster cl;
  try {
    cl = load_cluster(a.cluster);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what() + did_you_mean(a.cluster, cluster_names()));
  }
  if (a.show_cluster) {
    fmt::print("{}\n", cluster_json(cl).dump(2));
    return 0;
  }
  PredictConfig cfg = to_config(a, cl);
  BoundOptions bound;
  const std::vector<std::string> names = bind_configs(a, cfg, bound);
  std::vector<std::string> differ;  // the document's config: what every row shares
  bound.document_config(names, cfg.options, cfg.batch_per_rank, differ);
  const std::string unequal = unequal_rows_warning(names, bound);
  if (!unequal.empty()) fmt::print(stderr, "{}\n", unequal);
  if (!a.json.empty()) prepare_output_path("--json", a.json);  // before any work
  if (a.sweep > 0) return run_sweep(cfg, cl, names, a.sweep, bound);
  if (a.fit) return run_fit(cfg, cl, names, a, bound);
  std::vector<Prediction> ps;
  std::vector<nlohmann::json> results;
  for (const std::string& s : names) {
    ps.push_back(predict(row_config(cfg, bound, s), s, cl));
    results.push_back(prediction_json(ps.back()));
    results.back()["settings"] = row_settings(s, bound);
  }
  print_table(cfg, cl, ps, bound, differ);
  if (!a.json.empty()) {
    nlohmann::json doc = prediction_document(cfg, cl, results, knob_config_json(cfg.options));
    if (!differ.empty()) doc["config"]["rows_differ"] = differ;
    write_document(a.json, doc);
    fmt::print("prediction: {}\n", a.json);
  }
  return 0;
}

// A strategy that refuses the settings in its setup (a value the flag's range allows but the
// strategy does not, e.g. --fsdp2-reshard-after-forward 3 on a node of 2) is the user's error.
int predict_command() {
  try {
    return predict_all(g_args);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

}  // namespace sb
