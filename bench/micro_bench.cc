// sb_micro_bench: Google Benchmark micro-benchmarks under MPI — the collective bus-bandwidth
// sweep (ring vs MPI-native path on the world/intra/inter groups), sgemm at the `small`
// workload's shapes (the CPU compute ceiling behind MFU) and one training step per strategy.
// Every benchmark runs fixed iterations (adaptive counts diverge across ranks and hang) with
// manual time = max over ranks, and only rank 0 reports. It checks collective results once per
// benchmark, not parity or bytes.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "harness/comm/mpi_runtime.h"
#include "harness/device/cpu_device.h"
#include "harness/device/device.h"
#include "harness/model/gpt.h"
#include "harness/launch/report.h"
#include "harness/launch/trainer.h"

namespace sb {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// What every benchmark shares: the MPI job, one Communicator per collective path, the device.
struct BenchContext {
  MpiRuntime* mpi = nullptr;
  Topology topo;
  Ledger ring_ledger, native_ledger;
  std::unique_ptr<Communicator> ring, native;
  std::unique_ptr<Device> device;
};
BenchContext* g_ctx = nullptr;

// Rank != 0: benchmarks run (their collectives must), nothing is printed or written.
class NullReporter final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

// The iteration time every rank records: the slowest rank's. The communicator is drained
// first, so this main-thread MPI call never runs beside the comm thread (SERIALIZED).
double max_over_ranks(Communicator* comm, double local_s) {
  if (comm != nullptr) comm->synchronize();
  return g_ctx->mpi->max_over_ranks(local_s);
}

// A skip/error decision taken by any rank is taken by all (else the others hang in a collective).
bool agreed_failure(bool local_failure) {
  return g_ctx->mpi->max_over_ranks(local_failure ? 1.0 : 0.0) > 0;
}

std::string size_name(size_t bytes) {
  if (bytes >= (size_t(1) << 20) && bytes % (size_t(1) << 20) == 0)
    return fmt::format("{}MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{}KiB", bytes >> 10);
  return fmt::format("{}B", bytes);
}

// ---- collectives: nccl-tests' algbw / busbw ------------------------------------------------
// `bytes` is nccl-tests' size: the all-reduce buffer, the reduce-scatter input, the all-gather
// output (as LedgerEntry::count). busbw = algbw * factor (nccl-tests PERFORMANCE.md).
void bm_collective(benchmark::State& state, CollKind kind, GroupKind gk, bool ring, size_t bytes) {
  Communicator& comm = ring ? *g_ctx->ring : *g_ctx->native;
  const Group& group = comm.group(gk);
  const int n = group.size();
  const size_t block = std::max<size_t>(1, bytes / sizeof(float) / size_t(n));
  const size_t count = block * size_t(n);
  const float mine = float(g_ctx->topo.rank() + 1);
  float sum = 0;
  for (int r : group.ranks) sum += float(r + 1);

  std::vector<float> send, recv;
  auto run_once = [&] {
    switch (kind) {
      case CollKind::kAllReduce:
        // afterwards every rank of the group holds the element-wise sum of all buffers
        comm.all_reduce(recv.data(), count, DType::kF32, gk, "bench");
        break;
      case CollKind::kReduceScatter:
        // afterwards each rank holds the summed values of its own block
        comm.reduce_scatter(send.data(), recv.data(), block, DType::kF32, gk, "bench");
        break;
      case CollKind::kAllGather:
        // afterwards every rank holds every rank's block, in group order
        comm.all_gather(send.data(), recv.data(), block, DType::kF32, gk, "bench");
        break;
      default:
        break;
    }
  };
  if (kind == CollKind::kAllReduce) {
    recv.assign(count, mine);
  } else if (kind == CollKind::kReduceScatter) {
    send.assign(count, mine);
    recv.assign(block, 0.0f);
  } else {
    send.assign(block, mine);
    recv.assign(count, 0.0f);
  }

  // One untimed run that also checks the data (nccl-tests checks every run; once is enough here).
  run_once();
  comm.synchronize();
  bool bad = false;
  if (kind == CollKind::kAllGather) {
    for (size_t i = 0; i < count && !bad; ++i) bad = recv[i] != float(group.ranks[i / block] + 1);
  } else {
    for (size_t i = 0; i < recv.size() && !bad; ++i) bad = recv[i] != sum;
  }
  if (agreed_failure(bad)) {
    comm.ledger().clear();
    state.SkipWithError("collective returned wrong data on some rank");
    return;
  }
  // Zeros stay zeros under repeated in-place sums (no overflow to inf over many iterations).
  if (kind == CollKind::kAllReduce) std::fill(recv.begin(), recv.end(), 0.0f);
  max_over_ranks(&comm, 0);  // line the ranks up before the first timed call

  double total_s = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    run_once();
    const double t = max_over_ranks(&comm, seconds_since(t0));
    state.SetIterationTime(t);
    total_s += t;
  }
  comm.ledger().clear();  // drained above; one entry per call would otherwise pile up

  const double payload = double(count * sizeof(float));
  const double algbw = payload / (total_s / double(state.iterations())) / 1e9;
  state.counters["bytes"] =
      benchmark::Counter(payload, benchmark::Counter::kDefaults, benchmark::Counter::OneK::kIs1024);
  state.counters["ranks"] = n;
  state.counters["algbw_gbps"] = algbw;
  state.counters["busbw_gbps"] = algbw * busbw_factor(kind, n);
}

// Fewer iterations for bigger messages: about 256 MiB of payload per benchmark, 5..100 calls.
int collective_iterations(size_t bytes) {
  return int(std::clamp<size_t>((size_t(256) << 20) / bytes, 5, 100));
}

void register_collectives() {
  const Topology& topo = g_ctx->topo;
  const CollKind kinds[] = {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather};
  const GroupKind groups[] = {GroupKind::kWorld, GroupKind::kIntra, GroupKind::kInter};
  for (CollKind kind : kinds)
    for (bool ring : {true, false})
      for (GroupKind gk : groups) {
        const int n = topo.group(gk).size();
        // A 1-rank group moves nothing; a group equal to the world repeats the world's row.
        if (n < 2 || (gk != GroupKind::kWorld && n == topo.world_size())) continue;
        for (size_t bytes = 1024; bytes <= (size_t(64) << 20); bytes *= 4) {
          const std::string name =
              fmt::format("coll/{}/{}/{}_n{}/{}", coll_name(kind), ring ? "ring" : "mpi",
                          group_name(gk), n, size_name(bytes));
          benchmark::RegisterBenchmark(name.c_str(), bm_collective, kind, gk, ring, bytes)
              ->Iterations(collective_iterations(bytes))
              ->UseManualTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
}

// ---- sgemm at the workload's shapes --------------------------------------------------------
struct GemmShape {
  std::string name;
  bool trans_a, trans_b;
  int m, n, k;
  double flops() const { return 2.0 * m * n * double(k); }
};

// The calls CpuDevice::linear_forward/backward make for x [rows, in], W [out, in]:
// forward y = x W^T, backward dx = dy W and dW += dy^T x. Plus the square 768^3 of the MFU
// calibration in `shardbench run`.
std::vector<GemmShape> small_gemm_shapes() {
  const GptConfig c = parse_model("small");
  const int rows = 4 * c.seq_len, C = c.n_embd;  // batch 4
  struct Linear {
    const char* name;
    int in, out;
  };
  const Linear linears[] = {{"qkv", C, 3 * C},
                            {"attn_proj", C, C},
                            {"fc", C, 4 * C},
                            {"fc_proj", 4 * C, C},
                            {"lm_head", C, c.vocab}};
  std::vector<GemmShape> out;
  for (const Linear& l : linears) {
    out.push_back({fmt::format("{}_fwd", l.name), false, true, rows, l.out, l.in});
    out.push_back({fmt::format("{}_bwd_dx", l.name), false, false, rows, l.in, l.out});
    out.push_back({fmt::format("{}_bwd_dw", l.name), true, false, l.out, l.in, rows});
  }
  out.push_back({"square_768", false, true, 768, 768, 768});
  return out;
}

void bm_gemm(benchmark::State& state, GemmShape s) {
  const int lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n, ldc = s.n;
  std::vector<float> a(size_t(s.m) * s.k, 0.5f), b(size_t(s.k) * s.n, 0.25f),
      c(size_t(s.m) * s.n, 0.0f);
  Device& dev = *g_ctx->device;
  dev.gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(),
           ldc);  // warm the caches and BLAS' buffers
  max_over_ranks(nullptr, 0);
  double total_s = 0, best_s = 1e30;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    dev.gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f,
             c.data(), ldc);
    const double t = max_over_ranks(nullptr, seconds_since(t0));
    state.SetIterationTime(t);
    total_s += t;
    best_s = std::min(best_s, t);
  }
  benchmark::DoNotOptimize(c.data());
  state.counters["gflops"] = s.flops() / (total_s / double(state.iterations())) / 1e9;
  // The fastest call: the ceiling when the cores are shared (what `shardbench run` calibrates).
  state.counters["best_gflops"] = s.flops() / best_s / 1e9;
}

void register_gemms() {
  for (const GemmShape& s : small_gemm_shapes()) {
    const std::string name = fmt::format("gemm/{}/m{}_n{}_k{}", s.name, s.m, s.n, s.k);
    // About 15 GFLOP per benchmark (a few tenths of a second on one core), 5..100 calls.
    const int iters = int(std::clamp(15e9 / s.flops(), 5.0, 100.0));
    benchmark::RegisterBenchmark(name.c_str(), bm_gemm, s)
        ->Iterations(iters)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
}

// ---- one training step per strategy ---------------------------------------------------------
// run_strategy does setup + warm-up + `steps` measured steps (each already the max over ranks);
// iteration i of the benchmark reports measured step i. Its status is agreed across ranks.
void bm_step(benchmark::State& state, std::string strategy, RunConfig cfg) {
  StrategyRun run = run_strategy(strategy, cfg, *g_ctx->mpi, *g_ctx->ring, *g_ctx->device);
  if (run.status != "ok" || int(run.step_time_s.size()) != cfg.steps) {
    state.SkipWithError(fmt::format("{}: {}", run.status, run.error).c_str());
    return;
  }
  size_t i = 0;
  for (auto _ : state) state.SetIterationTime(run.step_time_s[i++]);
  const double step_s = median(run.step_time_s);
  const uint64_t tokens =
      uint64_t(g_ctx->topo.world_size()) * cfg.batch_per_rank * cfg.model.seq_len;
  state.counters["step_s"] = step_s;
  state.counters["tokens_per_s"] = double(tokens) / step_s;
  // Model FLOP/s of the whole job (flops_per_step's formula, as in the results file).
  state.counters["model_gflops"] = flops_per_step(cfg.model, tokens) / step_s / 1e9;
  state.counters["peak_bytes"] = benchmark::Counter(
      double(run.peak_bytes), benchmark::Counter::kDefaults, benchmark::Counter::OneK::kIs1024);
  state.counters["sent_bytes"] = benchmark::Counter(
      double(run.sent_max_rank), benchmark::Counter::kDefaults, benchmark::Counter::OneK::kIs1024);
}

void register_steps(int steps) {
  RunConfig cfg;
  cfg.model = parse_model("small");
  cfg.batch_per_rank = 2;
  cfg.steps = steps;
  cfg.warmup = 1;
  cfg.collectives = CollectiveImpl::kRing;
  for (const std::string& s : strategy_names()) {
    const std::string name = fmt::format("step/{}/small/b{}/ring", s, cfg.batch_per_rank);
    benchmark::RegisterBenchmark(name.c_str(), bm_step, s, cfg)
        ->Iterations(steps)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
}

// ---- flags ---------------------------------------------------------------------------------
struct BenchArgs {
  int ranks_per_node = -1;  // -1: 2 when it divides the world, else nodes from MPI
  int steps = 5;
  bool list_only = false;  // --benchmark_list_tests: nothing runs, rank 0 prints
  bool ok = true;
  std::string error;
};

bool starts_with(const char* s, const char* prefix) {
  return std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

// Takes our flags out of argv (Google Benchmark rejects flags it does not know), and on ranks
// other than 0 also --benchmark_out, replaced by an empty one so that BENCHMARK_OUT in the
// environment cannot make them open the file either.
BenchArgs take_flags(int* argc, char** argv, bool root, std::vector<std::string>& extra) {
  BenchArgs a;
  int w = 1;
  for (int i = 1; i < *argc; ++i) {
    const char* s = argv[i];
    if (starts_with(s, "--rpn=")) {
      a.ranks_per_node = std::atoi(s + 6);
      if (a.ranks_per_node < 1) {
        a.ok = false;
        a.error = "--rpn must be >= 1";
      }
    } else if (starts_with(s, "--steps=")) {
      a.steps = std::atoi(s + 8);
      if (a.steps < 1) {
        a.ok = false;
        a.error = "--steps must be >= 1";
      }
    } else if (starts_with(s, "--benchmark_enable_random_interleaving") &&
               std::strcmp(s, "--benchmark_enable_random_interleaving=false") != 0) {
      // Each rank would shuffle its own way and the collectives would hang.
      a.ok = false;
      a.error = "--benchmark_enable_random_interleaving is not MPI-safe";
    } else if (!root && starts_with(s, "--benchmark_list_tests") &&
               std::strcmp(s, "--benchmark_list_tests=false") != 0) {
      a.list_only = true;
    } else if (!root && starts_with(s, "--benchmark_out=")) {
      continue;
    } else if (!root && std::strcmp(s, "--benchmark_out") == 0) {
      ++i;
      continue;
    } else {
      argv[w++] = argv[i];
    }
  }
  if (!root) {
    extra.push_back("--benchmark_out=");
    argv[w++] = extra.back().data();
  }
  argv[w] = nullptr;
  *argc = w;
  return a;
}

void print_usage() {
  std::printf(
      "sb_micro_bench [--rpn=G] [--steps=N] [Google Benchmark flags]\n"
      "  run under mpirun, e.g. mpirun -np 2 sb_micro_bench "
      "--benchmark_out=results/bench-x.json --benchmark_out_format=json\n"
      "  --rpn=G    ranks per (virtual) node for the intra/inter groups (default 2 when it "
      "divides the world)\n"
      "  --steps=N  measured training steps per strategy (default 5)\n"
      "  filters: --benchmark_filter='coll/' | 'gemm/' | 'step/'\n\n");
}

}  // namespace
}  // namespace sb

int main(int argc, char** argv) {
  sb::select_blas_kernels(argv);  // the same BLAS kernels as shardbench: the same ceiling
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0) {
      sb::print_usage();
      benchmark::Initialize(&argc, argv);  // prints its own flags and exits
      return 0;
    }
  sb::MpiRuntime mpi(&argc, &argv);
  const bool root = mpi.rank() == 0;
  std::vector<std::string> extra;
  extra.reserve(1);  // argv points into it: no reallocation
  std::vector<char*> args(argv, argv + argc);
  args.push_back(nullptr);
  args.push_back(nullptr);  // room for --benchmark_out= on ranks != 0
  int nargs = argc;
  sb::BenchArgs a = sb::take_flags(&nargs, args.data(), root, extra);
  if (a.ok && a.ranks_per_node > 0 && mpi.world_size() % a.ranks_per_node != 0) {
    a.ok = false;
    a.error =
        fmt::format("--rpn={} must divide the world size {}", a.ranks_per_node, mpi.world_size());
  }
  if (!a.ok) {  // every rank sees the same argv, so every rank stops here
    if (root) std::fprintf(stderr, "sb_micro_bench: %s\n", a.error.c_str());
    return 2;
  }
  benchmark::Initialize(&nargs, args.data());
  if (nargs > 1) {  // the same leftovers on every rank: all stop, rank 0 says why
    if (root) benchmark::ReportUnrecognizedArguments(nargs, args.data());
    return 2;
  }

  const int rpn = a.ranks_per_node > 0 ? a.ranks_per_node : mpi.world_size() % 2 == 0 ? 2 : 0;
  {
    sb::BenchContext ctx;
    ctx.mpi = &mpi;
    ctx.topo = mpi.topology(rpn);
    ctx.device = sb::make_cpu_device();
    ctx.ring = std::make_unique<sb::Communicator>(
        ctx.topo, sb::make_mpi_backend(ctx.topo, sb::CollectiveImpl::kRing), ctx.ring_ledger);
    ctx.native = std::make_unique<sb::Communicator>(
        ctx.topo, sb::make_mpi_backend(ctx.topo, sb::CollectiveImpl::kMpiNative),
        ctx.native_ledger);
    sb::g_ctx = &ctx;
    sb::register_collectives();
    sb::register_gemms();
    sb::register_steps(a.steps);
    benchmark::AddCustomContext("world_size", std::to_string(ctx.topo.world_size()));
    benchmark::AddCustomContext("ranks_per_node", std::to_string(ctx.topo.ranks_per_node()));
    benchmark::AddCustomContext("mpi", mpi.library_version());
    benchmark::AddCustomContext("time", "manual: per iteration, the max over ranks");
    if (root) {
      benchmark::RunSpecifiedBenchmarks();
    } else if (!a.list_only) {
      sb::NullReporter null_reporter;
      benchmark::RunSpecifiedBenchmarks(&null_reporter);
    }
    benchmark::Shutdown();
    mpi.barrier();
    sb::g_ctx = nullptr;
  }  // communicators (and their MPI sub-communicators) go before MPI_Finalize
  return 0;
}
