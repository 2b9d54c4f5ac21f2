// The results file: builds the versioned JSON (schema in results/schema.json) from what the
// trainer measured, and writes it atomically (temp file + rename, so a reader never sees half
// a file). It measures nothing itself.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/run/trainer.h"
#include "harness/topology.h"

namespace sb {

constexpr int kSchemaVersion = 1;

struct Environment {
  std::string backend = "cpu-mpi";  // cpu-mpi | cuda-nccl
  std::string mpi_version, blas_version, compiler, cuda_version, nccl_version, device_name;
  double peak_flops_per_device = 0;  // measured sgemm ceiling per core on CPU; datasheet on GPU
  std::string peak_flops_source;
  int devices = 1;                   // what MFU divides by (cores used on CPU, GPUs)
  std::string cpu_model, gpu_driver;  // the machine fingerprint's identity (machine_json)
  int cores = 0;
};

// The machine a run measured on: CPU model, cores, calibrated peak, BLAS, MPI, and on GPU the
// device and driver, with `fingerprint`, a hash of everything but the peak (a measurement of
// the machine, not its identity). Time-like metrics compare raw only between equal
// fingerprints (plots/compare.py).
nlohmann::json machine_json(const Environment& env);

// The Llama block's shape keys (arch, n_kv_head, ffn_hidden, rope_theta) into a model object;
// nothing for the GPT-2 block, whose objects stay as before --arch existed.
void add_llama_keys(nlohmann::json& model, const GptConfig& c);
nlohmann::json config_json(const RunConfig& cfg, const Topology& topo);
nlohmann::json result_json(const StrategyRun& run, const RunConfig& cfg, const Topology& topo,
                           const Environment& env);
nlohmann::json run_document(const RunConfig& cfg, const Topology& topo, const Environment& env,
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
double percentile(std::vector<double> v, double p);
// nccl-tests PERFORMANCE.md: busbw = algbw * factor.
double busbw_factor(CollKind k, int n);
const char* precision_name(Precision p);
const char* prefetch_name(BackwardPrefetch p);
const char* zero_grad_reduce_name(ZeroGradReduce r);

}  // namespace sb
