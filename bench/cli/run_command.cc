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

// The GEMMs one rank's step of `cfg` issues; without a dry run of the config (it is refused
// later, with its reason), none.
std::vector<std::pair<GemmCall, uint64_t>> run_gemm_calls(const RunConfig& cfg) {
  try {
    return step_gemm_calls(cfg.model, cfg.batch_per_rank, cfg.options);
  } catch (const std::exception&) {
    return {};
  }
}

// The CPU calibration with the rate of this run's own GEMM shapes (the embedded prediction's
// GEMM rate).
PeakCalibration calibrate_cpu_for(const RunArgs& a, const RunConfig& cfg, const char* who) {
  return with_gemm_mix(calibrate_cpu_once(a.peak_gflops, who), run_gemm_calls(cfg));
}

// The CPU's MFU denominator as this rank first knows it: --peak-gflops, the launcher's
// calibration, or measured here by world rank 0 alone, before MPI starts, so the other ranks
// (waiting in MPI_Init) do not compete for its core. Shared by broadcast once MPI is up.
PeakCalibration initial_cpu_peak(const RunArgs& a, const RunConfig& cfg) {
  if (!a.peak_calibration.empty()) return PeakCalibration::from_flag(a.peak_calibration);
  if (world_rank_from_env() == 0) return calibrate_cpu_for(a, cfg, "rank 0");
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
    cal.quantize_int4_elems_per_s = peak.quantize_int4_elems_per_s;
    cal.dequantize_int4_sum_elems_per_s = peak.dequantize_int4_sum_elems_per_s;
    cal.gemm_mix_flops = peak.gemm_mix_gflops * 1e9;
    cal.host_cores = host_cores;
    cal.ranks_per_node = topo.ranks_per_node();
    cal.memory_bytes = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    cal.source = fmt::format(
        "this run's calibration: {:.1f} GFLOP/s per core ({}); triad {:.2f} GB/s per core "
        "(one thread, 3 x 32 MiB); quantiser {:.0f} / {:.0f} Melem/s (qwZ int8 quantise / "
        "dequantise), {:.0f} / {:.0f} Melem/s (qgZ int4 quantise / dequantise-sum; one thread, "
        "1 Mi fp32); the step's GEMMs {:.1f} GFLOP/s ({} shapes, FLOP-weighted, one thread; 0: "
        "not measured); {} physical core(s); {:.1f} GB RAM",
        peak.gflops, peak.source, peak.mem_bw_bytes_per_s / 1e9, peak.quantize_elems_per_s / 1e6,
        peak.dequantize_elems_per_s / 1e6, peak.quantize_int4_elems_per_s / 1e6,
        peak.dequantize_int4_sum_elems_per_s / 1e6, peak.gemm_mix_gflops, peak.gemm_mix_shapes,
        host_cores, cal.memory_bytes / 1e9);
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

// --hosts netns, or --np N outside an MPI job: the launcher starts the job on this binary and
// returns its exit status; nullopt: this process is a rank of the job.
std::optional<int> launch(const RunArgs& a, const RunConfig& cfg, int argc, char** argv) {
  if (!inside_mpi_job()) {  // fail before any MPI job starts; rank 0 checks again in the job
    prepare_output_path("--out", a.out);
    OutputLock probe("--out", a.out);
    if (!a.trace.empty()) prepare_output_dir("--trace", a.trace);
  }
  if (a.hosts.empty() && (a.np == 0 || inside_mpi_job())) return std::nullopt;
  const std::string peak = cfg.device != "cpu" || !a.peak_calibration.empty()
                               ? a.peak_calibration
                               : calibrate_cpu_for(a, cfg, "the launcher").to_flag();
  if (!a.hosts.empty())  // [two-host] namespace hosts on this machine (ci/two_host.sh)
    return launch_two_hosts(a, argc, argv, peak);
  return launch_mpirun(a, argc, argv, peak);
}

// The job's world against --np and --ranks-per-node, and the group knobs against it.
Topology job_topology(const RunArgs& a, const RunConfig& cfg, const BoundOptions& bound,
                      MpiRuntime& mpi) {
  if (a.np > 0 && a.np != mpi.world_size())
    throw UsageError(fmt::format("--np {}: this MPI job has {} ranks; drop --np under mpirun",
                                 a.np, mpi.world_size()));
  if (a.ranks_per_node > 0 && mpi.world_size() % a.ranks_per_node != 0)
    throw UsageError(fmt::format("--ranks-per-node {}: must divide the world size {}",
                                 a.ranks_per_node, mpi.world_size()));
  const Topology nodes = mpi.topology(a.ranks_per_node);
  check_group_knobs(cfg.options, nodes.world_size(), nodes.ranks_per_node());
  if (bound.ds) check_group_knobs(*bound.ds, nodes.world_size(), nodes.ranks_per_node());
  return nodes.with_partition(cfg.options.mics_shard_size);
}

// --inject-fault 0:N:kill-*: a fault in the N-th write of the results file, not in a step.
void arm_write_fault(RunConfig& cfg, bool root) {
  if (cfg.fault.kind.rfind("kill-", 0) != 0) return;
  if (root)
    set_write_fault(cfg.fault.step, cfg.fault.kind == "kill-mid-write" ? WriteFault::kMidWrite
                                                                       : WriteFault::kBeforeRename);
  cfg.fault = {};
}

// This rank's device and backend, and what the results file says of the machine.
struct Machine {
  std::unique_ptr<Device> device;
  std::unique_ptr<CommBackend> backend;  // NCCL; none: MPI (the communicator's)
  Environment env;
  int host_cores = 0;  // CPU: the physical cores the ranks share (the calibrated cluster's)
};

#ifdef SB_HAVE_CUDA
// The GPU's backend, versions and MFU denominator: the datasheet's peak (or --peak-gflops).
void describe_cuda(const RunArgs& a, const RunConfig& cfg, const Topology& topo, MpiRuntime& mpi,
                   Machine& m, PeakCalibration& peak) {
  Environment& env = m.env;
  env.backend = "cuda-nccl";
  m.backend = make_nccl_backend(topo, topo.local_rank(), cuda_compute_stream(*m.device));
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
          : cuda_peak_flops(m.device->name(), bf16,
                            !bf16 && dynamic_cast<CudaDevice&>(*m.device).allow_tf32());
  env.peak_flops_source = a.peak_gflops > 0 ? "--peak-gflops" : "NVIDIA datasheet (dense)";
  // Each rank's own device's figure, summed: a mixed set of GPUs counts each as it is.
  env.peak_flops_per_device = mpi.sum_over_ranks(env.peak_flops_per_device) / topo.world_size();
  peak = fixed_peak(env.peak_flops_per_device / 1e9, env.peak_flops_source);
  env.devices = topo.world_size();
  env.peak_basis = {{"definition", kPeakDefinition}, {"devices", env.devices},
                    {"device_kind", "gpu"}, {"ranks", topo.world_size()}};
}
#endif

Machine open_machine([[maybe_unused]] const RunArgs& a, const RunConfig& cfg, const Topology& topo,
                     MpiRuntime& mpi, PeakCalibration& peak) {
  Machine m;
  if (cfg.device == "cuda") {
    std::string why;
    m.device = make_cuda_device(topo.local_rank(), &why);
    if (!m.device) throw UsageError("--device cuda: " + why);
#ifdef SB_HAVE_CUDA
    describe_cuda(a, cfg, topo, mpi, m, peak);
#endif
  } else {
    m.device = make_cpu_device();
    std::string shared = peak.to_flag();  // rank 0's figure for every rank: one per file
    mpi.broadcast_string(shared, 0);
    peak = PeakCalibration::from_flag(shared);
    const HardwareCount hw = count_hardware(mpi);
    m.env.devices = hw.devices;
    m.env.peak_basis = cpu_peak_basis(hw);
    m.host_cores = hw.physical_cores;
  }
  Environment& env = m.env;
  env.device_name = m.device->name();
  env.cpu_model = cpu_model_name();
  env.cores = int(std::max(1u, std::thread::hardware_concurrency()));
  env.mpi_version = mpi.library_version();
  env.blas_version = std::string("OpenBLAS ") + openblas_get_config() + " core " +
                     openblas_get_corename();
  env.compiler = fmt::format("g++ {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
  return m;
}

// [hosts netns] the link ci/two_host.sh measured before the job (nullopt: none).
std::optional<nlohmann::json> measured_network() {
  try {
    return hosts_network_from_env();
  } catch (const std::runtime_error& e) {
    throw UsageError(e.what());
  }
}

// The document's config: the bound rows' common options, what --resume compares.
nlohmann::json run_config_json(const RunConfig& cfg, const Topology& topo,
                               const std::optional<nlohmann::json>& network) {
  nlohmann::json config = config_json(cfg, topo, knob_config_json(cfg.options));
  if (network) {
    // what was asked of the link (not what it measured): --resume must not mix shapings
    const nlohmann::json& shaping = (*network)["shaping"];
    config["inter_link"] = {
        {"hosts", "netns"},
        {"requested_gbps", shaping.is_object() ? shaping["requested_gbps"] : nlohmann::json()},
        {"delay_ms", shaping.is_object() ? shaping["delay_ms"] : nlohmann::json()}};
  }
  return config;
}

// --resume's kept results; the file's MFU denominator replaces `peak` (one per file).
std::map<std::string, nlohmann::json> kept_results(const RunArgs& a, const nlohmann::json& config,
                                                   MpiRuntime& mpi, PeakCalibration& peak) {
  auto kept = a.resume ? resumable_results(a.out, config, mpi)
                       : std::map<std::string, nlohmann::json>{};
  if (auto it = kept.find(kFilePeakKey); it != kept.end()) {
    try {
      peak = PeakCalibration::from_json(it->second);
    } catch (const nlohmann::json::exception&) {
      throw UsageError("--resume: " + a.out + ": config.mfu_peak is malformed");
    }
    kept.erase(it);
  }
  return kept;
}

void print_plan(const RunConfig& cfg, const Topology& topo, const std::vector<std::string>& names) {
  fmt::print("shardbench: {} ({} params), world {} = {} node(s) x {}, batch {}/rank, {}, {} "
             "strategies, {}+{} steps\n",
             cfg.model.name, count_params(cfg.model), topo.world_size(), topo.num_nodes(),
             topo.ranks_per_node(), cfg.batch_per_rank, precision_name(cfg.options.precision),
             names.size(), cfg.warmup, cfg.steps);
  if (topo.num_nodes() > 1) return;
  for (const auto& n : names)
    if (n.find("hybrid") != std::string::npos)
      fmt::print("note: on one node {} shards over the node = the world and replicates across "
                 "one node: it degenerates to {}\n", n,
                 n == "fsdp_hybrid_shard" ? "fsdp_full_shard" : "fsdp_shard_grad_op");
}

// What every strategy of the job shares: the ranks, the device, the results document.
struct Job {
  Job(const RunArgs& args, const BoundOptions& b, RunConfig c, Topology t, MpiRuntime& m)
      : a(args), bound(b), cfg(std::move(c)), topo(std::move(t)), mpi(m) {}
  const RunArgs& a;
  const BoundOptions& bound;
  RunConfig cfg;
  Topology topo;
  MpiRuntime& mpi;
  Machine machine;
  Ledger ledger;  // outlives the communicator that appends to it
  std::unique_ptr<Communicator> comm;
  std::optional<nlohmann::json> network;
  std::vector<std::string> names;
  std::vector<std::string> differ;  // row settings that differ (each result has its own)
  nlohmann::json config;
  PeakCalibration peak;
  RunCluster pc;
  std::vector<nlohmann::json> results;
  bool root() const { return topo.rank() == 0; }
};

nlohmann::json document(const Job& j) {
  nlohmann::json doc = run_document(j.cfg, j.machine.env, j.config, j.results);
  if (!j.differ.empty()) doc["config"]["rows_differ"] = j.differ;
  doc["config"]["mfu_peak"] = j.peak.to_json();
  doc["prediction_cluster"] = j.pc.cluster ? cluster_json(*j.pc.cluster) : nlohmann::json();
  if (!j.pc.note.empty()) doc["prediction_cluster_note"] = j.pc.note;
  if (j.network) doc["topology"] = *j.network;
  return doc;
}

void print_progress(const Job& j, size_t i, const StrategyRun& run, const RunConfig& row) {
  if (run.status == "ok") {
    const double tokens = double(j.topo.world_size()) * row.batch_per_rank *
                          row.options.grad_accum * j.cfg.model.seq_len;
    fmt::print("[{}/{}] {:<26} ok   {:8.4f} s/step  {:10.0f} tokens/s  peak {} MiB\n", i + 1,
               j.names.size(), run.strategy, median(run.step_time_s),
               tokens / median(run.step_time_s), mib(run.peak_bytes));
  } else {
    fmt::print("[{}/{}] {:<26} {}: {}\n", i + 1, j.names.size(), run.strategy, run.status,
               run.error);
  }
  std::fflush(stdout);
}

// One strategy of the matrix: measured, traced, predicted; its result joins the document.
StrategyRun run_row(Job& j, size_t i) {
  const std::string& name = j.names[i];
  RunConfig row = j.cfg;  // this row's options: its config file's, or the flags'
  row.options = j.bound.for_strategy(name);
  row.batch_per_rank = j.bound.batch_for(name);
  StrategyRun run = run_strategy(name, row, j.mpi, *j.comm, *j.machine.device);
  if (j.root() && !j.a.quiet) print_progress(j, i, run, row);
  if (j.root() && run.status == "ok" && !steady_state_faults_ok(run)) warn_page_faults(run);
  if (!j.a.trace.empty() && run.status == "ok") {  // every rank: the gather is collective
    const std::string path = write_strategy_trace(j.a.trace, run.strategy, run.trace, j.mpi);
    if (j.root() && !j.a.quiet) fmt::print("        trace: {}\n", path);
  }
  run.trace = RankTrace{};  // written: the matrix's later strategies need not carry it
  nlohmann::json result = result_json(run, row, j.topo, j.machine.env);
  result["settings"] = row_settings(name, j.bound);
  if (run.status == "ok" && j.pc.cluster) {
    // The model's view of the same config, and how far the measurement is from it.
    result["prediction"] = predict_for_run(row, j.topo, name, *j.pc.cluster);
    result["prediction"]["cluster"] = j.pc.cluster->name;
    result["residuals"] = prediction_residuals(result["prediction"], result);
  }
  j.results.push_back(std::move(result));
  if (j.root()) write_json_atomic(j.a.out, document(j));
  return run;
}

// The strategies one after another (--resume's kept ones skipped); the table at the end.
// Exit 1 when no strategy ended ok (all oom/error): the file records why, but a script
// chaining run && export must not take an empty matrix for a result.
int run_matrix(Job& j, std::map<std::string, nlohmann::json> kept) {
  std::vector<StrategyRun> runs;
  for (size_t i = 0; i < j.names.size(); ++i) {
    if (auto it = kept.find(j.names[i]); it != kept.end()) {
      if (j.root() && !j.a.quiet)
        fmt::print("[{}/{}] {:<26} ok   (kept from {}, --resume)\n", i + 1, j.names.size(),
                   j.names[i], j.a.out);
      j.results.push_back(it->second);
      continue;
    }
    runs.push_back(run_row(j, i));
  }
  const int tokens =
      j.topo.world_size() * j.cfg.batch_per_rank * j.cfg.options.grad_accum * j.cfg.model.seq_len;
  if (j.root()) {  // --quiet drops the progress lines, never the table
    print_table(runs, j.results, tokens);
    fmt::print("results: {}\n", j.a.out);
  }
  const bool any_ok = std::any_of(j.results.begin(), j.results.end(), [](const nlohmann::json& r) {
    return r.value("status", "") == "ok";
  });
  if (!any_ok && j.root())
    fmt::print(stderr, "shardbench: no strategy succeeded ({} of {} failed); see {}\n",
               j.results.size(), j.results.size(), j.a.out);
  return any_ok ? 0 : 1;
}

// Ranks sharing a host's cores slow each other by more than ranks / cores (time-slicing,
// shared caches and memory bandwidth): every rank times the run's own GEMM shapes at once, as
// a step runs them, and the prediction's kernels are slowed by the launcher's lone rate over
// the ranks' mean. Every rank measures (the sum is a collective); only a measured lone rate
// is compared.
void measured_compute_slowdown(Job& j) {
  const std::vector<std::pair<GemmCall, uint64_t>> calls = run_gemm_calls(j.cfg);
  const int world = j.topo.world_size();
  const double mean_gflops =
      j.mpi.sum_over_ranks(run_gemm_list(calls, 0.5, [&] { j.mpi.barrier(); })) / world;
  if (j.peak.gemm_mix_gflops <= 0 || mean_gflops <= 0) return;
  Cluster& c = *j.pc.cluster;
  c.measured_slowdown = j.peak.gemm_mix_gflops / mean_gflops;
  c.measured_world = world;
  c.source += fmt::format(
      "; the step's GEMMs on all {} ranks at once: {:.1f} GFLOP/s per rank (mean) against "
      "{:.1f} alone, {:.2f}x (the rule ranks / cores: {:.2f}x) -> every kernel {:.2f}x slower",
      world, mean_gflops, j.peak.gemm_mix_gflops, c.measured_slowdown,
      c.oversubscription(world), c.compute_slowdown(world));
}

}  // namespace

// The predictor's cluster for this run is the calibrated CPU or this device's GPU preset;
// [hosts netns] its inter-node link is the one measured, so both share one network; [CPU] the
// collectives' latency under this run's load is timed here, as sgemm was at start.
void measured_prediction_network(Job& j) {
  if (!j.pc.cluster) return;
  if (j.network) j.pc.cluster->inter = measured_inter_link(*j.network);
  if (j.cfg.device == "cpu") {
    // Unshaped, the hosts' link is what MPI's TCP moves on these cores, more than the probe's
    // one Python stream (docs/network.md): timed with the run's own collective.
    const bool unshaped = j.network && j.network->value("hosts", "") == "netns" &&
                          j.network->value("shaping", nlohmann::json()).is_null();
    const std::string line = apply_collective_latency(
        *j.pc.cluster,
        measure_collective_latency(j.mpi, j.topo, j.cfg.collectives, unshaped,
                                   j.pc.cluster->oversubscription(j.topo.world_size()) > 1.0),
        j.topo, j.network ? j.pc.cluster->inter.latency_s : 0.0);
    if (!line.empty()) j.pc.cluster->source += "; " + line;
    measured_compute_slowdown(j);
  }
  if (j.network) (*j.network)["prediction_inter"] = cluster_json(*j.pc.cluster)["inter"];
}

int run_command(const RunArgs& a, int argc, char** argv) {
  BoundOptions bound;
  RunConfig cfg = to_run_config(a, &bound);  // throws UsageError before any MPI
  if (const std::optional<int> launched = launch(a, cfg, argc, argv)) return *launched;
  Watchdog::set_timeout(a.timeout_s);
  PeakCalibration peak = cfg.device == "cpu" ? initial_cpu_peak(a, cfg) : PeakCalibration{};
  MpiRuntime mpi(&argc, &argv);
  Job j{a, bound, cfg, job_topology(a, cfg, bound, mpi), mpi};
  const std::unique_ptr<OutputLock> out_lock = claim_output(a.out, a.trace, mpi);
  arm_write_fault(j.cfg, j.root());
  j.machine = open_machine(a, j.cfg, j.topo, mpi, peak);
  j.network = measured_network();
  // MPI: a second backend (communicators of its own) for the side comm stream; NCCL runs the
  // side stream's ops on its one stream.
  std::unique_ptr<CommBackend> backend = std::move(j.machine.backend), side;
  if (!backend) {
    backend = make_mpi_backend(j.topo, j.cfg.collectives);
    side = make_mpi_backend(j.topo, j.cfg.collectives);
  }
  j.comm = std::make_unique<Communicator>(j.topo, std::move(backend), j.ledger, std::move(side));
  j.names = bound_strategies(a, bound);
  bound.document_config(j.names, j.cfg.options, j.cfg.batch_per_rank, j.differ);
  const std::string unequal = unequal_rows_warning(j.names, bound);
  if (j.root() && !unequal.empty()) fmt::print(stderr, "{}\n", unequal);
  j.config = run_config_json(j.cfg, j.topo, j.network);
  if (j.root() && !a.quiet) print_plan(j.cfg, j.topo, j.names);
  auto kept = kept_results(a, j.config, mpi, peak);
  j.peak = peak;
  j.machine.env.peak_flops_per_device = peak.gflops * 1e9;
  j.machine.env.peak_flops_source = denominator_source(peak.source, j.machine.env.peak_basis);
  j.pc = prediction_cluster(j.cfg, j.topo, j.machine.env.device_name, peak, j.machine.host_cores);
  measured_prediction_network(j);
  return run_matrix(j, std::move(kept));
}

}  // namespace sb
