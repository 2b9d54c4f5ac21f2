// The results file: builds the versioned JSON (schema in results/schema.json) from what the
// trainer measured, and writes it atomically (temp file + rename, so a reader never sees half
// a file). It measures nothing itself.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/comm/collective.h"  // busbw_factor
#include "harness/launch/trainer.h"
#include "harness/topology.h"

namespace sb {

constexpr int kSchemaVersion = 1;

struct Environment {
  std::string backend = "cpu-mpi";  // cpu-mpi | cuda-nccl
  std::string mpi_version, blas_version, compiler, cuda_version, nccl_version, device_name;
  double peak_flops_per_device = 0;  // measured sgemm ceiling per core on CPU; datasheet on GPU
  std::string peak_flops_source;
  int devices = 1;                   // what MFU divides by (physical cores used on CPU, GPUs)
  // How `devices` was counted (throughput.peak_basis): devices, device_kind, machines,
  // physical_cores, ranks, cores_from. Its "definition" names the counting rule, so a
  // comparison of MFU across files can tell a changed denominator from a changed speed.
  nlohmann::json peak_basis = nlohmann::json::object();
  std::string cpu_model, gpu_driver;  // the machine fingerprint's identity (machine_json)
  int cores = 0;
};

// The counting rule of throughput.peak_basis.definition: the hardware found (physical cores
// of the distinct machines, min'd with the ranks on each; one GPU per rank). Files without it
// divided a CPU run by min(world, cores x nodes), virtual nodes counted as machines.
inline constexpr const char* kPeakDefinition = "hardware";

// The machine a run measured on: CPU model, cores, calibrated peak, BLAS, MPI, and on GPU the
// device and driver, with `fingerprint`, a hash of everything but the peak (a measurement of
// the machine, not its identity). Time-like metrics compare raw only between equal
// fingerprints (plots/compare.py).
nlohmann::json machine_json(const Environment& env);

// The Llama block's shape keys (arch, n_kv_head, ffn_hidden, rope_theta) into a model object;
// nothing for the GPT-2 block, whose objects stay as before --arch existed.
void add_llama_keys(nlohmann::json& model, const GptConfig& c);
// The run's config: workload, topology, measurement and config files, with `knobs` (every
// strategy knob as the command line's options table records it, bench/cli/options_table.h
// knob_config_json) merged in.
nlohmann::json config_json(const RunConfig& cfg, const Topology& topo, const nlohmann::json& knobs);
nlohmann::json result_json(const StrategyRun& run, const RunConfig& cfg, const Topology& topo,
                           const Environment& env);
// results[].memory.page_faults_per_step and .allocator (schema: results/schema.json).
nlohmann::json page_faults_json(const StrategyRun& run);
nlohmann::json allocator_json(const StrategyRun& run);
// Minor + major faults per measured step (max over ranks), the median over the steps; ok when
// at most kSteadyStateFaultsPerStep. The median, not the max: with overlap on, the comm
// thread's timing can raise the number of blocks live at once in a later step, and the cache
// then maps one more block, once (counted in allocator.measured_misses and in the max).
double median_faults_per_step(const StrategyRun& run);
bool steady_state_faults_ok(const StrategyRun& run);
// The results document around `config` (config_json's, with what the run adds to it).
nlohmann::json run_document(const RunConfig& cfg, const Environment& env, const nlohmann::json& config,
                            const std::vector<nlohmann::json>& results);

// Writes `doc` to path.tmp.<pid> and renames it over path. Throws std::runtime_error on failure.
void write_json_atomic(const std::string& path, const nlohmann::json& doc);

// Hidden test hook (--inject-fault 0:N:kill-mid-write|kill-before-rename): the Nth call of
// write_json_atomic in this process kills the process (SIGKILL) with half of the temp file
// written, or with all of it written but not yet renamed over the target.
enum class WriteFault { kNone, kMidWrite, kBeforeRename };
void set_write_fault(int nth_write, WriteFault where);

std::string git_commit();
std::string host_name();
std::string utc_now_iso();
double median(std::vector<double> v);
// results[].phases of the JSON, and the prediction's phases (schema: results/schema.json).
nlohmann::json phases_json(const std::vector<StepPhases>& steps);
// results[].description of a run and of a prediction: what the strategy shards, over which
// group, at which granularity.
nlohmann::json description_json(const StrategyDescription& d);
double percentile(std::vector<double> v, double p);
// The names the results file records (inline: the options table's rows record with them and
// link nothing, bench/cli/option_rows.cc).
inline const char* precision_name(Precision p) { return p == Precision::kFp32 ? "fp32" : "bf16-mixed"; }
inline const char* prefetch_name(BackwardPrefetch p) {
  return p == BackwardPrefetch::kNone ? "none" : p == BackwardPrefetch::kPre ? "pre" : "post";
}
inline const char* zero_grad_reduce_name(ZeroGradReduce r) {
  switch (r) {
    case ZeroGradReduce::kBucketAllReduce: return "bucket_all_reduce";
    case ZeroGradReduce::kReducePerOwner: return "reduce_per_owner";
    case ZeroGradReduce::kReduceScatter: return "reduce_scatter";
  }
  return "?";
}

}  // namespace sb
