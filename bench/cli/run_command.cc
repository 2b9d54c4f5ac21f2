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
#include <thread>

#include <fmt/format.h>

extern "C" char* openblas_get_config();    // OpenBLAS: build configuration string
extern "C" char* openblas_get_corename();  // OpenBLAS: the kernel set in use

#include "bench/cli/output_path.h"
#include "bench/cli/run_options.h"
#include "harness/comm/mpi_runtime.h"
#include "harness/comm/watchdog.h"
#include "harness/model/gpt.h"
#include "harness/predict/predict.h"
#include "harness/run/report.h"

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

// Single-core sgemm ceiling (GFLOP/s) on a square GEMM: the CPU's "peak" for MFU.
double measure_sgemm_gflops() {
  auto dev = make_cpu_device();
  const int n = 768;
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  double best = 0;
  for (int i = 0; i < 8; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    dev->gemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * double(n) / s / 1e9);
  }
  return best;
}

// Rank 0 checks --out and takes its lock before the first strategy; every rank learns the
// verdict through one broadcast, so a bad path or a second run on the same file stops them all.
std::unique_ptr<OutputLock> claim_output(const std::string& path, MpiRuntime& mpi) {
  std::string verdict = "ok";
  std::unique_ptr<OutputLock> lock;
  if (mpi.rank() == 0) {
    try {
      prepare_output_path("--out", path);
      lock = std::make_unique<OutputLock>("--out", path);
    } catch (const UsageError& e) {
      verdict = e.what();
    }
  }
  mpi.broadcast_string(verdict, 0);
  if (verdict != "ok") throw UsageError(verdict);
  return lock;
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
      } else if (doc.value("config", nlohmann::json()) != config) {
        verdict = "error\n--resume: " + path +
                  " was written with a different configuration; use another --out";
      } else {
        for (const auto& r : doc["results"])
          if (r.is_object() && r.value("status", "") == "ok" && r.contains("strategy"))
            kept[r["strategy"].get<std::string>()] = r;
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

std::string mib(uint64_t bytes) { return fmt::format("{:.1f}", double(bytes) / (1 << 20)); }

void print_table(const std::vector<StrategyRun>& runs, int tokens_per_step) {
  fmt::print("\n{:<26} {:>12} {:>10} {:>10} {:>11} {:>11} {:>10}  {}\n", "strategy", "tokens/s",
             "step s", "peak MiB", "intra MiB", "inter MiB", "exposed s", "status");
  for (const auto& r : runs) {
    if (r.status != "ok") {
      fmt::print("{:<26} {:>12} {:>10} {:>10} {:>11} {:>11} {:>10}  {}: {}\n", r.strategy, "-", "-",
                 "-", "-", "-", "-", r.status, r.error.substr(0, 100));
      continue;
    }
    const double med = median(r.step_time_s);
    fmt::print("{:<26} {:>12.0f} {:>10.4f} {:>10} {:>11} {:>11} {:>10.4f}  ok\n", r.strategy,
               tokens_per_step / med, med, mib(r.peak_bytes), mib(r.sent_intra_all),
               mib(r.sent_inter_all), median(r.exposed_s));
  }
  fmt::print("(intra/inter: bytes sent per step summed over ranks; peak: max over ranks)\n");
}

}  // namespace

int run_command(const RunArgs& a, int argc, char** argv) {
  RunConfig cfg = to_run_config(a);  // throws UsageError before any MPI
  if (!inside_mpi_job()) {  // fail before any MPI job starts; rank 0 checks again in the job
    prepare_output_path("--out", a.out);
    OutputLock probe("--out", a.out);
  }
  if (!a.hosts.empty())  // [two-host] two namespace hosts on this machine (ci/two_host.sh)
    return launch_two_hosts(a, argc, argv,
                            a.peak_gflops > 0 || cfg.device != "cpu" ? 0 : measure_sgemm_gflops());
  if (a.np > 0 && !inside_mpi_job()) {
    return launch_mpirun(a, argc, argv,
                         a.peak_gflops > 0 || cfg.device != "cpu" ? 0 : measure_sgemm_gflops());
  }
  Watchdog::set_timeout(a.timeout_s);

  const double probe = a.peak_gflops > 0 || cfg.device != "cpu" ? 0 : measure_sgemm_gflops();
  MpiRuntime mpi(&argc, &argv);
  if (a.np > 0 && a.np != mpi.world_size())
    throw UsageError(fmt::format("--np {}: this MPI job has {} ranks; drop --np under mpirun",
                                 a.np, mpi.world_size()));
  if (a.ranks_per_node > 0 && mpi.world_size() % a.ranks_per_node != 0)
    throw UsageError(fmt::format("--ranks-per-node {}: must divide the world size {}",
                                 a.ranks_per_node, mpi.world_size()));
  const Topology topo = mpi.topology(a.ranks_per_node);
  const bool root = topo.rank() == 0;
  const std::unique_ptr<OutputLock> out_lock = claim_output(a.out, mpi);
  if (cfg.fault.kind.rfind("kill-", 0) == 0) {  // a fault in the results write, not in a step
    if (root)
      set_write_fault(cfg.fault.step, cfg.fault.kind == "kill-mid-write" ? WriteFault::kMidWrite
                                                                         : WriteFault::kBeforeRename);
    cfg.fault = {};
  }

  std::unique_ptr<Device> device;
  std::unique_ptr<CommBackend> backend;
  Environment env;
  if (cfg.device == "cuda") {
    std::string why;
    device = make_cuda_device(topo.local_rank(), &why);
    if (!device) throw UsageError("--device cuda: " + why);
#ifdef SB_HAVE_CUDA
    env.backend = "cuda-nccl";
    backend = make_nccl_backend(topo, topo.local_rank(), cuda_compute_stream(*device));
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    env.cuda_version = fmt::format("{}.{}", rt / 1000, rt % 1000 / 10);
    env.nccl_version = nccl_version_string();
    const bool bf16 = cfg.options.precision == Precision::kBf16Mixed;
    env.peak_flops_per_device =
        a.peak_gflops > 0
            ? a.peak_gflops * 1e9
            : cuda_peak_flops(device->name(), bf16,
                              !bf16 && dynamic_cast<CudaDevice&>(*device).allow_tf32());
    env.peak_flops_source = a.peak_gflops > 0 ? "--peak-gflops" : "NVIDIA datasheet (dense)";
    env.devices = topo.world_size();
#endif
  } else {
    device = make_cpu_device();
    env.peak_flops_per_device =
        1e9 * (a.peak_gflops > 0 ? a.peak_gflops : mpi.max_over_ranks(probe));
    env.peak_flops_source = a.peak_gflops > 0 ? "--peak-gflops" : "measured single-core sgemm";
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    env.devices = std::min(topo.world_size(), cores * topo.num_nodes());
  }
  env.device_name = device->name();
  env.mpi_version = mpi.library_version();
  env.blas_version = std::string("OpenBLAS ") + openblas_get_config() + " core " +
                     openblas_get_corename();
  env.compiler = fmt::format("g++ {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);

  // The predictor's cluster for this run: calibrated CPU, or the GPU preset of this device.
  const Cluster cluster = load_cluster(cfg.device == "cpu" ? "cpu-local" : "h200");
  Ledger ledger;
  if (!backend) backend = make_mpi_backend(topo, cfg.collectives);
  Communicator comm(topo, std::move(backend), ledger);
  const std::vector<std::string> names = parse_strategy_list(a.strategies);
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
  const auto kept = a.resume ? resumable_results(a.out, config_json(cfg, topo), mpi)
                            : std::map<std::string, nlohmann::json>{};
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
    StrategyRun run = run_strategy(names[i], cfg, mpi, comm, *device);
    if (root && !a.quiet) {
      if (run.status == "ok")
        fmt::print("[{}/{}] {:<26} ok   {:8.4f} s/step  {:10.0f} tokens/s  peak {} MiB\n", i + 1,
                   names.size(), run.strategy, median(run.step_time_s),
                   tokens / median(run.step_time_s), mib(run.peak_bytes));
      else
        fmt::print("[{}/{}] {:<26} {}: {}\n", i + 1, names.size(), run.strategy, run.status,
                   run.error);
      std::fflush(stdout);
    }
    nlohmann::json result = result_json(run, cfg, topo, env);
    if (run.status == "ok") {
      // The model's view of the same config, and how far the measurement is from it.
      result["prediction"] = predict_for_run(cfg, topo, names[i], cluster);
      result["prediction"]["cluster"] = cluster.name;
      result["residuals"] = prediction_residuals(result["prediction"], result);
    }
    results.push_back(std::move(result));
    if (root) write_json_atomic(a.out, run_document(cfg, topo, env, results));
    runs.push_back(std::move(run));
  }
  if (root && !a.quiet) {
    print_table(runs, tokens);
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
