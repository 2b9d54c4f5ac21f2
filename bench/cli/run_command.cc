// `shardbench run`: the standalone launcher (re-executes itself under mpirun, like torchrun),
// the calibration of the MFU denominator, and the strategy matrix with a progress line per
// strategy, the results file rewritten after each one, and a table at the end.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

extern "C" char* openblas_get_config();    // OpenBLAS: build configuration string
extern "C" char* openblas_get_corename();  // OpenBLAS: the kernel set in use

#include "bench/cli/output_path.h"
#include "bench/cli/ds_config.h"
#include "bench/cli/fsdp_config.h"
#include "bench/cli/collective_latency.h"
#include "bench/cli/host_network.h"
#include "bench/cli/peak_calibration.h"
#include "bench/cli/config_binding.h"
#include "bench/cli/run_options.h"
#include "harness/comm/mpi_runtime.h"
#include "harness/comm/watchdog.h"
#include "harness/memory/page_faults.h"
#include "harness/model/gpt.h"
#include "harness/predict/predict.h"
#include "harness/launch/hardware.h"
#include "harness/launch/report.h"
#include "harness/launch/trace.h"

#ifdef SB_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "harness/comm/cuda/nccl_backend.h"
#include "harness/device/cuda/cuda_device.h"
#include "harness/device/cuda/cuda_peak.h"
#endif

namespace sb {
namespace {

bool inside_mpi_job() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}

// World rank of this process from the launcher's environment, before MPI starts (-1: unknown;
// a singleton without a launcher is rank 0).
int world_rank_from_env() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return inside_mpi_job() ? -1 : 0;
}

// The CPU's MFU denominator as this rank first knows it: --peak-gflops, the launcher's
// calibration, or measured here by world rank 0 alone, before MPI starts, so the other ranks
// (waiting in MPI_Init) do not compete for its core. Shared by broadcast once MPI is up.
PeakCalibration initial_cpu_peak(const RunArgs& a) {
  if (!a.peak_calibration.empty()) return PeakCalibration::from_flag(a.peak_calibration);
  if (world_rank_from_env() == 0) return calibrate_cpu(a.peak_gflops, "rank 0");
  return {};
}

// Rank 0 checks --out and takes its lock before the first strategy; every rank learns the
// verdict through one broadcast, so a bad path or a second run on the same file stops them all.
std::unique_ptr<OutputLock> claim_output(const std::string& path, const std::string& trace_dir,
                                         MpiRuntime& mpi) {
  std::string verdict = "ok";
  std::unique_ptr<OutputLock> lock;
  if (mpi.rank() == 0) {
    try {
      prepare_output_path("--out", path);
      lock = std::make_unique<OutputLock>("--out", path);
      if (!trace_dir.empty()) prepare_output_dir("--trace", trace_dir);
    } catch (const UsageError& e) {
      verdict = e.what();
    }
  }
  mpi.broadcast_string(verdict, 0);
  if (verdict != "ok") throw UsageError(verdict);
  return lock;
}

constexpr const char* kFilePeakKey = "";  // not a strategy name: the file's MFU denominator

// The run's configuration minus its MFU denominator, which --resume takes from the file.
nlohmann::json config_without_peak(nlohmann::json config) {
  if (config.is_object()) config.erase("mfu_peak");
  return config;
}

// --resume: the ok results already in `path` for this exact config (rank 0 reads; every rank
// learns the decision through one broadcast, so all skip the same strategies).
std::map<std::string, nlohmann::json> resumable_results(const std::string& path,
                                                        const nlohmann::json& config,
                                                        MpiRuntime& mpi) {
  std::string verdict;  // "ok\n<json of kept results>" or "error\n<message>"
  if (mpi.rank() == 0) {
    nlohmann::json kept = nlohmann::json::object();
    std::ifstream f(path);
    if (!f) {
      verdict = "ok\n{}";  // nothing to resume: run everything
    } else {
      nlohmann::json doc = nlohmann::json::parse(f, nullptr, false);
      if (doc.is_discarded() || !doc.is_object() || doc.value("suite", "") != "shardbench" ||
          !doc.contains("results") || !doc["results"].is_array()) {
        verdict = "error\n--resume: " + path + " is not a shardbench results file";
      } else if (config_without_peak(doc.value("config", nlohmann::json())) != config) {
        verdict = "error\n--resume: " + path +
                  " was written with a different configuration; use another --out";
      } else {
        for (const auto& r : doc["results"])
          if (r.is_object() && r.value("status", "") == "ok" && r.contains("strategy"))
            kept[r["strategy"].get<std::string>()] = r;
        if (doc["config"].contains("mfu_peak")) kept[kFilePeakKey] = doc["config"]["mfu_peak"];
        verdict = "ok\n" + kept.dump();
      }
    }
  }
  mpi.broadcast_string(verdict, 0);
  const size_t nl = verdict.find('\n');
  if (verdict.substr(0, nl) != "ok") throw UsageError(verdict.substr(nl + 1));
  std::map<std::string, nlohmann::json> out;
  const nlohmann::json kept = nlohmann::json::parse(verdict.substr(nl + 1));
  for (const auto& [k, v] : kept.items()) out[k] = v;
  return out;
}

// The CPU's MFU device count from every rank's machine probe: each rank learns all probes
// (gather to rank 0, one broadcast), so every rank computes the same count.
HardwareCount count_hardware(const MpiRuntime& mpi) {
  const std::vector<std::string> lines = mpi.gather_strings_to_root(probe_this_machine().to_line());
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  mpi.broadcast_string(all, 0);
  std::vector<MachineProbe> probes;
  for (size_t at = 0, nl; (nl = all.find('\n', at)) != std::string::npos; at = nl + 1)
    probes.push_back(MachineProbe::from_line(all.substr(at, nl - at)));
  return count_cpu_hardware(probes);
}

nlohmann::json cpu_peak_basis(const HardwareCount& h) {
  return {{"definition", kPeakDefinition}, {"devices", h.devices},
          {"device_kind", "physical core"}, {"machines", h.machines},
          {"physical_cores", h.physical_cores}, {"ranks", h.ranks},
          {"cores_from", h.cores_from}};
}

// "<per-device source>; x N <kind>s (<how counted>)": the denominator in one line.
std::string denominator_source(const std::string& per_device, const nlohmann::json& basis) {
  if (basis.value("device_kind", "") != "physical core")
    return fmt::format("{}; x {} GPU(s), one per rank", per_device, basis.value("devices", 0));
  return fmt::format("{}; x {} = min(ranks, physical cores) per machine: {} rank(s) on {} "
                     "distinct machine(s) with {} physical core(s) ({}); virtual nodes and "
                     "namespace hosts are not machines",
                     per_device, basis.value("devices", 0), basis.value("ranks", 0),
                     basis.value("machines", 0), basis.value("physical_cores", 0),
                     basis.value("cores_from", ""));
}

// The cluster of the run's embedded prediction: the hardware this run found, or none.
struct RunCluster {
  std::optional<Cluster> cluster;
  std::string note;  // why there is none
};

RunCluster prediction_cluster(const RunConfig& cfg, const Topology& topo,
                              const std::string& device_name, const PeakCalibration& peak,
                              int host_cores) {
  if (cfg.device == "cpu") {
    CpuCalibration cal;
    cal.sgemm_flops = peak.gflops * 1e9;
    cal.mem_bw_bytes_per_s = peak.mem_bw_bytes_per_s;
    cal.quantize_elems_per_s = peak.quantize_elems_per_s;
    cal.dequantize_elems_per_s = peak.dequantize_elems_per_s;
    cal.host_cores = host_cores;
    cal.ranks_per_node = topo.ranks_per_node();
    cal.memory_bytes = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    cal.source = fmt::format(
        "this run's calibration: {:.1f} GFLOP/s per core ({}); triad {:.2f} GB/s per core "
        "(one thread, 3 x 32 MiB); quantiser {:.0f} / {:.0f} Melem/s (quantise / dequantise, "
        "one thread, 1 Mi fp32); {} physical core(s); {:.1f} GB RAM",
        peak.gflops, peak.source, peak.mem_bw_bytes_per_s / 1e9, peak.quantize_elems_per_s / 1e6,
        peak.dequantize_elems_per_s / 1e6, host_cores, cal.memory_bytes / 1e9);
    return {calibrated_cpu_cluster(cal), ""};
  }
  const std::string preset = preset_for_cuda_device(device_name);
  if (preset.empty())
    return {std::nullopt,
            fmt::format("no cluster preset describes the device '{}' (presets: {}): no "
                        "embedded prediction; `shardbench predict --cluster FILE` with its "
                        "figures", device_name, fmt::join(cluster_names(), ", "))};
  return {load_cluster(preset), ""};
}

// /proc/cpuinfo's first "model name" (the machine fingerprint's CPU), "unknown" without one.
std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      std::string v = line.substr(line.find(':') + 1);
      v.erase(0, v.find_first_not_of(' '));
      return v;
    }
  return "unknown";
}

std::string mib(uint64_t bytes) { return fmt::format("{:.1f}", double(bytes) / (1 << 20)); }

// Where the step went (median over measured steps of the slowest rank's phases, seconds).
// A steady-state step that faults pages maps memory the step before did not keep: its time
// then includes the kernel's page-table work, which depends on malloc and on the strategies
// run before it (docs/measurement.md). Said on stderr; the result still stands.
void warn_page_faults(const StrategyRun& run) {
  fmt::print(stderr,
             "warning: {}: its measured steps fault {:.0f} pages per step on a rank (median; "
             "threshold {}): memory is mapped inside the measured steps, so its step time is "
             "not steady (results[].memory.page_faults_per_step)\n",
             run.strategy, median_faults_per_step(run), kSteadyStateFaultsPerStep);
}

void print_phase_table(const std::vector<StrategyRun>& runs) {
  fmt::print("\n{:<26} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8}\n", "phases (median s)",
             "forward", "backward", "optimizer", "exposed", "other", "step", "comm busy",
             "overlap");
  for (const auto& r : runs) {
    if (r.status != "ok") continue;
    const nlohmann::json m = phases_json(r.phases)["median"];
    fmt::print("{:<26} {:>9.4f} {:>9.4f} {:>9.4f} {:>9.4f} {:>9.4f} {:>9.4f} {:>10.4f} {:>7.0f}%\n",
               r.strategy, double(m["forward_s"]), double(m["backward_s"]),
               double(m["optimizer_s"]), double(m["exposed_comm_s"]), double(m["other_s"]),
               double(m["step_s"]), double(m["comm_busy_s"]),
               100 * double(m["overlap_fraction"]));
  }
  fmt::print("(exposed: compute thread blocked on communication; comm busy: comm thread's time "
             "in collectives; overlap: busy time hidden behind compute)\n");
}

// MFU counts the model's FLOPs, HFU also activation checkpointing's recomputed forwards.
void print_table(const std::vector<StrategyRun>& runs, const std::vector<nlohmann::json>& results,
                 int tokens_per_step) {
  fmt::print("\n{:<26} {:>12} {:>10} {:>10} {:>11} {:>11} {:>10} {:>6} {:>6}  {}\n", "strategy",
             "tokens/s", "step s", "peak MiB", "intra MiB", "inter MiB", "exposed s", "MFU", "HFU",
             "status");
  for (const StrategyRun& r : runs) {
    if (r.status != "ok") {
      fmt::print("{:<26} {:>12} {:>10} {:>10} {:>11} {:>11} {:>10} {:>6} {:>6}  {}: {}\n",
                 r.strategy, "-", "-", "-", "-", "-", "-", "-", "-", r.status,
                 r.error.substr(0, 100));
      continue;
    }
    const double med = median(r.step_time_s);
    // this run's result (results also holds the strategies --resume kept, which runs does not)
    const auto it = std::find_if(results.begin(), results.end(), [&](const nlohmann::json& j) {
      return j.value("strategy", "") == r.strategy;
    });
    const nlohmann::json tp = it != results.end() ? it->value("throughput", nlohmann::json::object())
                                                  : nlohmann::json::object();
    fmt::print("{:<26} {:>12.0f} {:>10.4f} {:>10} {:>11} {:>11} {:>10.4f} {:>5.1f}% {:>5.1f}%  ok\n",
               r.strategy, tp.value("tokens_per_s", tokens_per_step / med), med, mib(r.peak_bytes), mib(r.sent_intra_all),
               mib(r.sent_inter_all), median(r.exposed_s), 100 * tp.value("mfu", 0.0),
               100 * tp.value("hfu", 0.0));
  }
  fmt::print("(intra/inter: bytes sent per step summed over ranks; peak: max over ranks; MFU: "
             "model FLOPs, HFU: + recomputed forwards)\n");
  print_phase_table(runs);
}

}  // namespace

int run_command(const RunArgs& a, int argc, char** argv) {
  BoundOptions bound;
  RunConfig cfg = to_run_config(a, &bound);  // throws UsageError before any MPI
  if (!inside_mpi_job()) {  // fail before any MPI job starts; rank 0 checks again in the job
    prepare_output_path("--out", a.out);
    OutputLock probe("--out", a.out);
    if (!a.trace.empty()) prepare_output_dir("--trace", a.trace);
  }
  if (!a.hosts.empty())  // [two-host] two namespace hosts on this machine (ci/two_host.sh)
    return launch_two_hosts(a, argc, argv,
                            cfg.device != "cpu" || !a.peak_calibration.empty()
                                ? a.peak_calibration
                                : calibrate_cpu(a.peak_gflops, "the launcher").to_flag());
  if (a.np > 0 && !inside_mpi_job()) {
    return launch_mpirun(a, argc, argv,
                         cfg.device != "cpu" || !a.peak_calibration.empty()
                             ? a.peak_calibration
                             : calibrate_cpu(a.peak_gflops, "the launcher").to_flag());
  }
  Watchdog::set_timeout(a.timeout_s);

  PeakCalibration peak = cfg.device == "cpu" ? initial_cpu_peak(a) : PeakCalibration{};
  MpiRuntime mpi(&argc, &argv);
  if (a.np > 0 && a.np != mpi.world_size())
    throw UsageError(fmt::format("--np {}: this MPI job has {} ranks; drop --np under mpirun",
                                 a.np, mpi.world_size()));
  if (a.ranks_per_node > 0 && mpi.world_size() % a.ranks_per_node != 0)
    throw UsageError(fmt::format("--ranks-per-node {}: must divide the world size {}",
                                 a.ranks_per_node, mpi.world_size()));
  const Topology nodes = mpi.topology(a.ranks_per_node);
  check_group_knobs(cfg.options, nodes.world_size(), nodes.ranks_per_node());
  if (bound.ds) check_group_knobs(*bound.ds, nodes.world_size(), nodes.ranks_per_node());
  const Topology topo = nodes.with_partition(cfg.options.mics_shard_size);
  const bool root = topo.rank() == 0;
  const std::unique_ptr<OutputLock> out_lock = claim_output(a.out, a.trace, mpi);
  if (cfg.fault.kind.rfind("kill-", 0) == 0) {  // a fault in the results write, not in a step
    if (root)
      set_write_fault(cfg.fault.step, cfg.fault.kind == "kill-mid-write" ? WriteFault::kMidWrite
                                                                         : WriteFault::kBeforeRename);
    cfg.fault = {};
  }

  std::unique_ptr<Device> device;
  std::unique_ptr<CommBackend> backend;
  Environment env;
  int host_cores = 0;  // CPU: the physical cores the ranks share (the calibrated cluster's)
  if (cfg.device == "cuda") {
    std::string why;
    device = make_cuda_device(topo.local_rank(), &why);
    if (!device) throw UsageError("--device cuda: " + why);
#ifdef SB_HAVE_CUDA
    env.backend = "cuda-nccl";
    backend = make_nccl_backend(topo, topo.local_rank(), cuda_compute_stream(*device));
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    int drv = 0;
    cudaDriverGetVersion(&drv);  // the machine fingerprint's GPU driver (CUDA API version)
    env.gpu_driver = fmt::format("{}.{}", drv / 1000, drv % 1000 / 10);
    env.cuda_version = fmt::format("{}.{}", rt / 1000, rt % 1000 / 10);
    env.nccl_version = nccl_version_string();
    const bool bf16 = cfg.options.precision == Precision::kBf16Mixed;
    env.peak_flops_per_device =
        a.peak_gflops > 0
            ? a.peak_gflops * 1e9
            : cuda_peak_flops(device->name(), bf16,
                              !bf16 && dynamic_cast<CudaDevice&>(*device).allow_tf32());
    env.peak_flops_source = a.peak_gflops > 0 ? "--peak-gflops" : "NVIDIA datasheet (dense)";
    // Each rank's own device's figure, summed: a mixed set of GPUs counts each as it is.
    env.peak_flops_per_device = mpi.sum_over_ranks(env.peak_flops_per_device) / topo.world_size();
    peak = fixed_peak(env.peak_flops_per_device / 1e9, env.peak_flops_source);
    env.devices = topo.world_size();
    env.peak_basis = {{"definition", kPeakDefinition}, {"devices", env.devices},
                      {"device_kind", "gpu"}, {"ranks", topo.world_size()}};
#endif
  } else {
    device = make_cpu_device();
    std::string shared = peak.to_flag();  // rank 0's figure for every rank: one per file
    mpi.broadcast_string(shared, 0);
    peak = PeakCalibration::from_flag(shared);
    const HardwareCount hw = count_hardware(mpi);
    env.devices = hw.devices;
    env.peak_basis = cpu_peak_basis(hw);
    host_cores = hw.physical_cores;
  }
  env.device_name = device->name();
  env.cpu_model = cpu_model_name();
  env.cores = int(std::max(1u, std::thread::hardware_concurrency()));
  env.mpi_version = mpi.library_version();
  env.blas_version = std::string("OpenBLAS ") + openblas_get_config() + " core " +
                     openblas_get_corename();
  env.compiler = fmt::format("g++ {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);

  // [hosts netns] the link ci/two_host.sh measured before the job: the results' topology, and
  // the prediction's inter-node link, so measurement and prediction share one network.
  std::optional<nlohmann::json> network;
  try {
    network = hosts_network_from_env();
  } catch (const std::runtime_error& e) {
    throw UsageError(e.what());
  }
  Ledger ledger;
  // MPI: a second backend (communicators of its own) for the side comm stream; NCCL runs the
  // side stream's ops on its one stream.
  std::unique_ptr<CommBackend> side;
  if (!backend) {
    backend = make_mpi_backend(topo, cfg.collectives);
    side = make_mpi_backend(topo, cfg.collectives);
  }
  Communicator comm(topo, std::move(backend), ledger, std::move(side));
  std::vector<std::string> names =
      a.ds_config.empty() ? parse_strategy_list(a.strategies)
                          : ds_config_strategies(cfg.ds_config_stage,
                                                 parse_strategy_list(a.strategies),
                                                 a.strategies == "all");
  if (!a.fsdp_config.empty())
    names = fsdp_config_strategies(bound.fsdp->fsdp_config.strategy,
                                   a.strategies == "all" && a.ds_config.empty()
                                       ? std::vector<std::string>{}
                                       : names,
                                   a.strategies == "all");
  std::vector<std::string> differ;  // row settings that differ (each result has its own)
  cfg.options = bound.common(names, differ);
  const bool batch_differs = std::count(differ.begin(), differ.end(), "batch_per_rank") > 0;
  if (!names.empty() && !batch_differs) cfg.batch_per_rank = bound.batch_for(names.front());
  const std::string unequal = unequal_rows_warning(names, bound);
  if (root && !unequal.empty()) fmt::print(stderr, "{}\n", unequal);
  // the bound rows' common options: what --resume compares and the document records
  nlohmann::json config = config_json(cfg, topo);
  if (network) {
    // what was asked of the link (not what it measured): --resume must not mix shapings
    const nlohmann::json& shaping = (*network)["shaping"];
    config["inter_link"] = {
        {"hosts", "netns"},
        {"requested_gbps", shaping.is_object() ? shaping["requested_gbps"] : nlohmann::json()},
        {"delay_ms", shaping.is_object() ? shaping["delay_ms"] : nlohmann::json()}};
  }
  const int tokens =
      topo.world_size() * cfg.batch_per_rank * cfg.options.grad_accum * cfg.model.seq_len;
  if (root && !a.quiet)
    fmt::print("shardbench: {} ({} params), world {} = {} node(s) x {}, batch {}/rank, {}, {} "
               "strategies, {}+{} steps\n",
               cfg.model.name, count_params(cfg.model), topo.world_size(), topo.num_nodes(),
               topo.ranks_per_node(), cfg.batch_per_rank, precision_name(cfg.options.precision),
               names.size(), cfg.warmup, cfg.steps);
  std::vector<StrategyRun> runs;
  std::vector<nlohmann::json> results;
  auto kept = a.resume ? resumable_results(a.out, config, mpi)
                      : std::map<std::string, nlohmann::json>{};
  if (auto it = kept.find(kFilePeakKey); it != kept.end()) {  // one denominator per file
    try {
      peak = PeakCalibration::from_json(it->second);
    } catch (const nlohmann::json::exception&) {
      throw UsageError("--resume: " + a.out + ": config.mfu_peak is malformed");
    }
    kept.erase(it);
  }
  env.peak_flops_per_device = peak.gflops * 1e9;
  env.peak_flops_source = denominator_source(peak.source, env.peak_basis);
  // The predictor's cluster for this run: calibrated CPU, or the GPU preset of this device.
  RunCluster pc = prediction_cluster(cfg, topo, env.device_name, peak, host_cores);
  // [hosts netns] the prediction's inter-node link is the one ci/two_host.sh measured, so
  // measurement and prediction share one network.
  if (network && pc.cluster) pc.cluster->inter = measured_inter_link(*network);
  // [CPU] the collectives' latency under this run's load, timed here as sgemm was at start.
  if (cfg.device == "cpu" && pc.cluster) {
    const std::string line =
        apply_collective_latency(*pc.cluster, measure_collective_latency(mpi, topo, cfg.collectives),
                                 topo, network ? pc.cluster->inter.latency_s : 0.0);
    if (!line.empty()) pc.cluster->source += "; " + line;
  }
  if (network && pc.cluster) (*network)["prediction_inter"] = cluster_json(*pc.cluster)["inter"];
  auto document = [&] {
    nlohmann::json doc = run_document(cfg, topo, env, results);
    doc["config"] = config;
    if (!differ.empty()) doc["config"]["rows_differ"] = differ;
    doc["config"]["mfu_peak"] = peak.to_json();
    doc["prediction_cluster"] = pc.cluster ? cluster_json(*pc.cluster) : nlohmann::json();
    if (!pc.note.empty()) doc["prediction_cluster_note"] = pc.note;
    if (network) doc["topology"] = *network;
    return doc;
  };
  if (topo.num_nodes() == 1 && root && !a.quiet)
    for (const auto& n : names)
      if (n.find("hybrid") != std::string::npos) {
        fmt::print("note: on one node {} shards over the node = the world and replicates across "
                   "one node: it degenerates to {}\n", n,
                   n == "fsdp_hybrid_shard" ? "fsdp_full_shard" : "fsdp_shard_grad_op");
      }
  for (size_t i = 0; i < names.size(); ++i) {
    if (auto it = kept.find(names[i]); it != kept.end()) {
      if (root && !a.quiet)
        fmt::print("[{}/{}] {:<26} ok   (kept from {}, --resume)\n", i + 1, names.size(),
                   names[i], a.out);
      results.push_back(it->second);
      continue;
    }
    RunConfig row = cfg;  // this row's options: its config file's, or the flags'
    row.options = bound.for_strategy(names[i]);
    row.batch_per_rank = bound.batch_for(names[i]);
    StrategyRun run = run_strategy(names[i], row, mpi, comm, *device);
    if (root && !a.quiet) {
      if (run.status == "ok")
        fmt::print("[{}/{}] {:<26} ok   {:8.4f} s/step  {:10.0f} tokens/s  peak {} MiB\n", i + 1,
                   names.size(), run.strategy, median(run.step_time_s),
                   double(tokens) / cfg.options.grad_accum / cfg.batch_per_rank *
                       row.options.grad_accum * row.batch_per_rank / median(run.step_time_s),
                   mib(run.peak_bytes));
      else
        fmt::print("[{}/{}] {:<26} {}: {}\n", i + 1, names.size(), run.strategy, run.status,
                   run.error);
      std::fflush(stdout);
    }
    if (root && run.status == "ok" && !steady_state_faults_ok(run)) warn_page_faults(run);
    if (!a.trace.empty() && run.status == "ok") {  // every rank: the gather is collective
      const std::string path = write_strategy_trace(a.trace, run.strategy, run.trace, mpi);
      if (root && !a.quiet) fmt::print("        trace: {}\n", path);
    }
    run.trace = RankTrace{};  // written: the matrix's later strategies need not carry it
    nlohmann::json result = result_json(run, row, topo, env);
    result["settings"] = row_settings(names[i], bound);
    if (run.status == "ok" && pc.cluster) {
      // The model's view of the same config, and how far the measurement is from it.
      result["prediction"] = predict_for_run(row, topo, names[i], *pc.cluster);
      result["prediction"]["cluster"] = pc.cluster->name;
      result["residuals"] = prediction_residuals(result["prediction"], result);
    }
    results.push_back(std::move(result));
    if (root) write_json_atomic(a.out, document());
    runs.push_back(std::move(run));
  }
  if (root) {  // --quiet drops the progress lines, never the table
    print_table(runs, results, tokens);
    fmt::print("results: {}\n", a.out);
  }
  // Exit 1 when no strategy ended ok (all oom/error): the file records why, but a script
  // chaining run && export must not take an empty matrix for a result.
  const bool any_ok = std::any_of(results.begin(), results.end(), [](const nlohmann::json& r) {
    return r.value("status", "") == "ok";
  });
  if (!any_ok && root)
    fmt::print(stderr, "shardbench: no strategy succeeded ({} of {} failed); see {}\n",
               results.size(), results.size(), a.out);
  return any_ok ? 0 : 1;
}

}  // namespace sb
