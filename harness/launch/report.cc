// JSON construction and the atomic write (see header). Keys carry their unit as a suffix.
#include "harness/launch/report.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <csignal>
#include <fstream>
#include <map>
#include <stdexcept>

#include "harness/memory/page_faults.h"
#include "harness/model/checkpointing.h"
#include "harness/model/gpt.h"
#include "harness/train/phase_clock.h"

namespace sb {

using nlohmann::json;

double median(std::vector<double> v) { return percentile(std::move(v), 50); }

nlohmann::json phases_json(const std::vector<StepPhases>& steps) {
  using Get = double (*)(const StepPhases&);
  const std::pair<const char*, Get> fields[] = {
      {"forward_s", [](const StepPhases& s) { return s.forward_s; }},
      {"backward_s", [](const StepPhases& s) { return s.backward_s; }},
      {"optimizer_s", [](const StepPhases& s) { return s.optimizer_s; }},
      {"exposed_comm_s", [](const StepPhases& s) { return s.exposed_comm_s; }},
      {"other_s", [](const StepPhases& s) { return s.other_s; }},
      {"step_s", [](const StepPhases& s) { return s.step_s; }},
      {"comm_busy_s", [](const StepPhases& s) { return s.comm_busy_s; }},
      {"overlap_fraction", [](const StepPhases& s) { return s.overlap_fraction(); }}};
  nlohmann::json per_step = nlohmann::json::array(), med = nlohmann::json::object();
  for (const StepPhases& s : steps) {
    nlohmann::json j = {{"rank", s.rank}};
    for (const auto& [key, get] : fields) j[key] = get(s);
    per_step.push_back(std::move(j));
  }
  for (const auto& [key, get] : fields) {
    std::vector<double> v;
    for (const StepPhases& s : steps) v.push_back(get(s));
    med[key] = median(v);
  }
  return {{"source", "per measured step, the rank that set the step time (the slowest)"},
          {"per_step", per_step},
          {"median", med}};
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * double(v.size() - 1);
  const size_t lo = size_t(std::floor(pos)), hi = size_t(std::ceil(pos));
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

std::string git_commit() {
  std::string out;
  if (FILE* f = popen("git -C " SB_SOURCE_DIR " rev-parse HEAD 2>/dev/null", "r")) {
    char buf[128];
    while (fgets(buf, sizeof buf, f)) out += buf;
    pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out.empty() ? "unknown" : out;
}

std::string host_name() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

std::string utc_now_iso() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

void add_llama_keys(json& model, const GptConfig& c) {
  if (c.arch != ArchKind::kLlama) return;
  model["arch"] = arch_name(c.arch);
  model["n_kv_head"] = c.kv_heads();
  model["ffn_hidden"] = c.ffn_hidden;
  model["rope_theta"] = c.rope_theta;
}

json config_json(const RunConfig& cfg, const Topology& topo, const json& knobs) {
  const auto& o = cfg.options;
  const auto& m = cfg.model;
  json model = {{"name", m.name}, {"n_layer", m.n_layer}, {"n_embd", m.n_embd},
                {"n_head", m.n_head}, {"seq_len", m.seq_len}, {"context", m.positions()},
                {"vocab", m.vocab},
                {"tied_head", m.tied_head}, {"attention", attention_name(m.attention)},
                {"cross_entropy", cross_entropy_name(m.cross_entropy)},
                {"activation_checkpointing", activation_checkpointing_name(m.checkpoint_every)}};
  add_llama_keys(model, m);
  json config = json{
      {"model", model},
      {"params", count_params(m)},
      {"world_size", topo.world_size()},
      {"ranks_per_node", topo.ranks_per_node()},
      {"num_nodes", topo.num_nodes()},
      {"batch_per_rank", cfg.batch_per_rank},
      {"fsdp_config", o.fsdp_config.file},  // --fsdp-config FILE ("" if none)
      {"fsdp_config_ignored", o.fsdp_config.ignored},  // its keys accepted but not modelled
      {"seq_len", m.seq_len},
      // What the matmuls computed in: bf16-mixed asks for bf16 (trainer.cc); only the CUDA
      // device has a bf16 matmul, the CPU device (Debian's OpenBLAS has no sbgemm) stays fp32.
      {"matmul_precision", cfg.device == "cuda" ? matmul_precision_name(matmul_precision_for(
                                                      o.precision))
                                                : "fp32"},
      {"steps", cfg.steps},
      {"warmup", cfg.warmup},
      {"collectives", cfg.collectives == CollectiveImpl::kRing ? "ring" : "mpi"},
      {"ds_config", cfg.ds_config},
      {"ds_config_ignored", cfg.ds_config_ignored},
      {"mem_limit_gb", cfg.mem_limit_gb},
      {"seed", o.seed},
      {"lr", o.adamw.lr},
      {"weight_decay", o.adamw.weight_decay},
      {"device", cfg.device},
      // ddp's settings (--ddp-config; PyTorch 1.13.1's defaults otherwise): a different value
      // is a different experiment. `ignored`: accepted DDP arguments the suite does not model.
      {"ddp", {{"bucket_cap_mb", o.ddp.bucket_cap_mb > 0 ? o.ddp.bucket_cap_mb : o.bucket_mb},
               {"first_bucket_mb", o.ddp.first_bucket_mb},
               {"gradient_as_bucket_view", o.ddp.gradient_as_bucket_view},
               {"bf16_params", o.ddp.bf16_params},
               {"ignored", o.ddp.ignored}}},
  };
  config.update(knobs);
  return config;
}

json page_faults_json(const StrategyRun& run) {
  auto stats = [](const std::vector<uint64_t>& v) {
    std::vector<double> d(v.begin(), v.end());
    return json{{"median", median(d)},
                {"max", v.empty() ? 0 : *std::max_element(v.begin(), v.end())},
                {"samples", v}};
  };
  return {{"minor", stats(run.minor_faults)},
          {"major", stats(run.major_faults)},
          {"threshold", kSteadyStateFaultsPerStep},
          {"steady", steady_state_faults_ok(run)}};
}

json allocator_json(const StrategyRun& run) {
  const uint64_t asked = run.measured_hits + run.measured_misses;
  return {{"reserved_bytes", run.allocator.reserved_bytes},
          {"allocated_bytes", run.allocator.allocated_bytes},
          {"reserved_peak_bytes", run.allocator.peak_reserved_bytes},
          {"measured_hits", run.measured_hits},
          {"measured_misses", run.measured_misses},
          {"measured_backing_frees", run.measured_backing_frees},
          {"hit_rate", asked > 0 ? double(run.measured_hits) / double(asked) : 1.0}};
}

double median_faults_per_step(const StrategyRun& run) {
  std::vector<double> total;
  for (size_t i = 0; i < run.minor_faults.size(); ++i)
    total.push_back(double(run.minor_faults[i] + run.major_faults[i]));
  return median(total);
}

bool steady_state_faults_ok(const StrategyRun& run) {
  return median_faults_per_step(run) <= double(kSteadyStateFaultsPerStep);
}

// What the strategy shards, over which group, at which granularity.
json description_json(const StrategyDescription& d) {
  json shards = json::array();
  if (d.shards_params) shards.push_back("params");
  if (d.shards_grads) shards.push_back("grads");
  if (d.shards_optimizer) shards.push_back("optimizer");
  const char* gran[] = {"bucket", "tensor", "unit"};
  return {{"family", d.family},
          {"shards", shards},
          {"shard_group", shards.empty() ? "none" : group_name(d.shard_group)},
          {"replicate_across_nodes", d.replicate_across_nodes},
          {"reshard_after_forward", d.reshard_after_forward},
          {"granularity", gran[int(d.granularity)]}};
}

namespace {

json peak_basis(const Environment& env) {
  json b = env.peak_basis;
  if (!b.empty()) b["per_device_flops"] = env.peak_flops_per_device;
  return b;
}

json step_time_json(const std::vector<double>& t) {
  return {{"median", median(t)},
          {"p95", percentile(t, 95)},
          {"min", t.empty() ? 0 : *std::min_element(t.begin(), t.end())},
          {"max", t.empty() ? 0 : *std::max_element(t.begin(), t.end())},
          {"samples", t}};
}

// Model FLOPs (MFU) and hardware FLOPs (HFU: plus activation checkpointing's recomputed
// forwards) over the median step time `med`.
json throughput_json(const RunConfig& cfg, const Topology& topo, const Environment& env,
                     double med) {
  const uint64_t tokens = uint64_t(topo.world_size()) * cfg.batch_per_rank *
                          cfg.options.grad_accum * cfg.model.seq_len;
  const double flops = flops_per_step(cfg.model, tokens);
  const double achieved = med > 0 ? flops / med : 0;
  const double hw_flops = flops + recompute_flops_per_step(cfg.model, tokens);
  const double peak = env.peak_flops_per_device * env.devices;
  return {{"tokens_per_s", med > 0 ? double(tokens) / med : 0},
          {"samples_per_s", med > 0 ? double(tokens / cfg.model.seq_len) / med : 0},
          {"tflops", achieved / 1e12},
          {"mfu", peak > 0 ? achieved / peak : 0},
          {"flop_formula", flop_formula(cfg.model)},
          {"flops_per_step", flops},
          {"hfu", peak > 0 && med > 0 ? hw_flops / med / peak : 0},
          {"hardware_flops_per_step", hw_flops},
          {"hardware_flop_formula", hardware_flop_formula(cfg.model)},
          {"peak_flops", peak},
          {"peak_flops_source", env.peak_flops_source},
          {"peak_basis", peak_basis(env)}};
}

json memory_json(const StrategyRun& run) {
  json breakdown;
  for (int c = 0; c < kNumMemCategories; ++c)
    breakdown[category_name(MemCategory(c))] = run.breakdown_at_peak[c];
  json m = {{"peak_bytes_per_rank", run.peak_bytes},
            {"model_state_bytes_per_rank",
             {{"params", run.model_state_params},
              {"grads", run.model_state_grads},
              {"optimizer", run.model_state_optimizer}}},
            {"breakdown_at_peak", breakdown},
            {"rss_hwm_bytes", run.rss_hwm_bytes}};
  // GPU: the cross-check of the tracker from below (caching allocator, then the driver, which
  // also sees NCCL's and cuBLAS's workspaces and the CUDA context). null on the CPU.
  m["device"] = nullptr;
  if (run.device_after.available)
    m["device"] = {{"reserved_peak_bytes", run.device_after.peak_reserved_bytes},
                   {"reserved_after_bytes", run.device_after.reserved_bytes},
                   {"driver_used_before_bytes", run.device_before.driver_used_bytes},
                   {"driver_used_after_bytes", run.device_after.driver_used_bytes},
                   {"driver_total_bytes", run.device_after.driver_total_bytes}};
  m["page_faults_per_step"] = page_faults_json(run);
  m["allocator"] = allocator_json(run);
  return m;
}

// Per (kind, group) on this rank for one step; every rank issues the same collectives. The bus
// bandwidth reads each kind's factor from harness/comm/collective.h.
json comm_json(const StrategyRun& run) {
  std::map<std::pair<int, int>, std::array<double, 4>> kinds;  // count, bytes, time, bus bytes
  std::map<uint64_t, int> hist;
  for (const LedgerEntry& e : run.step_entries) {
    auto& k = kinds[{int(e.kind), int(e.group)}];
    k[0] += 1;
    k[1] += double(e.payload_bytes);
    k[2] += e.time_s;
    k[3] += double(e.payload_bytes) * busbw_factor(e.kind, e.group_size);
    uint64_t le = 1;
    while (le < e.payload_bytes) le <<= 1;
    hist[le] += 1;
  }
  json by_kind = json::array();
  for (const auto& [key, k] : kinds) {
    by_kind.push_back({{"kind", coll_name(CollKind(key.first))},
                       {"group", group_name(GroupKind(key.second))},
                       {"count", int(k[0])},
                       {"bytes", uint64_t(k[1])},
                       {"time_s", k[2]},
                       {"busbw_gbps", k[2] > 0 ? k[3] / k[2] / 1e9 : 0}});
  }
  json histogram = json::array();
  for (const auto& [le, n] : hist) histogram.push_back({{"bucket_bytes_le", le}, {"count", n}});
  return {{"per_step",
           {{"payload_bytes", run.payload_bytes},
            {"sent_bytes_intra", run.sent_intra_all},
            {"sent_bytes_inter", run.sent_inter_all},
            {"sent_bytes_max_rank", run.sent_max_rank},
            {"collectives", run.step_entries.size()}}},
          {"traffic_accounting", run.traffic_counted ? "counted" : "modelled"},
          {"by_kind", by_kind},
          {"size_histogram", histogram},
          {"exposed_s", median(run.exposed_s)}};
}

// [two-host link] counted at the hosts' link (ci/two_host.sh), beside the ledger's bytes.
void add_link_json(const StrategyRun& run, json& per_step) {
  const double ledger = double(run.sent_inter_all);
  const double payload = double(run.link_bytes_measured) -
                         double(run.link_harness_bytes_measured) -
                         double(run.link_overhead_model_bytes);
  per_step["link_bytes_measured"] = run.link_bytes_measured;
  per_step["link_harness_bytes_measured"] = run.link_harness_bytes_measured;
  per_step["link_overhead_model_bytes"] = run.link_overhead_model_bytes;
  per_step["link_retrans_segs"] = run.link_retrans_segs;
  per_step["link_to_ledger_ratio"] = ledger > 0 ? double(run.link_bytes_measured) / ledger : 0;
  per_step["link_payload_to_ledger_ratio"] = ledger > 0 ? payload / ledger : 0;
}

}  // namespace

json result_json(const StrategyRun& run, const RunConfig& cfg, const Topology& topo,
                 const Environment& env) {
  json r{{"strategy", run.strategy}, {"status", run.status}};
  if (run.status != "ok") {
    r["error"] = run.error;
    return r;
  }
  r["description"] = description_json(run.description);
  r["padded_params"] = run.padded_params;
  r["step_time_s"] = step_time_json(run.step_time_s);
  r["phases"] = phases_json(run.phases);  // harness/train/phase_clock.h
  r["throughput"] = throughput_json(cfg, topo, env, median(run.step_time_s));
  r["memory"] = memory_json(run);
  r["comm"] = comm_json(run);
  if (run.link_measured) add_link_json(run, r["comm"]["per_step"]);
  r["loss"] = run.loss;
  r["param_checksum"] = run.param_checksum;
  return r;
}

json machine_json(const Environment& env) {
  json m = {{"cpu_model", env.cpu_model}, {"cores", env.cores},
            {"calibrated_peak_gflops", env.peak_flops_per_device / 1e9},
            {"peak_source", env.peak_flops_source}, {"blas", env.blas_version},
            {"mpi", env.mpi_version}};
  if (env.backend == "cuda-nccl") {
    m["gpu_device"] = env.device_name;
    m["gpu_driver"] = env.gpu_driver;
  }
  const std::string identity = env.cpu_model + "|" + std::to_string(env.cores) + "|" +
                               env.blas_version + "|" + env.mpi_version + "|" +
                               m.value("gpu_device", "") + "|" + env.gpu_driver;
  uint64_t h = 14695981039346656037ull;  // FNV-1a: a stable short name, not a secret
  for (unsigned char c : identity) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  m["fingerprint"] = hex;
  return m;
}

json run_document(const RunConfig& cfg, const Environment& env, const json& config,
                  const std::vector<json>& results) {
  json versions{{"mpi", env.mpi_version}, {"blas", env.blas_version}, {"compiler", env.compiler}};
  if (!env.cuda_version.empty()) versions["cuda"] = env.cuda_version;
  if (!env.nccl_version.empty()) versions["nccl"] = env.nccl_version;
  bool counted = cfg.collectives == CollectiveImpl::kRing && env.backend == "cpu-mpi";
  return json{{"schema_version", kSchemaVersion},
              {"suite", "shardbench"},
              {"kind", "run"},
              {"created_utc", utc_now_iso()},
              {"git_commit", git_commit()},
              {"host", host_name()},
              {"backend", env.backend},
              {"device_name", env.device_name},
              {"versions", versions},
              {"machine", machine_json(env)},
              {"traffic_accounting", counted ? "counted" : "modelled"},
              {"config", config},
              {"results", results}};
}

namespace {
struct {
  int nth = 0;
  WriteFault where = WriteFault::kNone;
} g_write_fault;
}  // namespace

void set_write_fault(int nth_write, WriteFault where) { g_write_fault = {nth_write, where}; }

void write_json_atomic(const std::string& path, const json& doc) {
  static int writes = 0;
  const bool fault = g_write_fault.where != WriteFault::kNone && ++writes == g_write_fault.nth;
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) throw std::runtime_error("cannot write " + tmp);
    const std::string text = doc.dump(2) + "\n";
    if (fault && g_write_fault.where == WriteFault::kMidWrite) {
      f.write(text.data(), std::streamsize(text.size() / 2)).flush();
      std::raise(SIGKILL);
    }
    f << text;
    f.flush();
    if (!f) throw std::runtime_error("write failed: " + tmp);
  }
  if (fault && g_write_fault.where == WriteFault::kBeforeRename) std::raise(SIGKILL);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot rename " + tmp + " to " + path);
  }
}

}  // namespace sb
