// The `shardbench run` flags: one struct, its CLI11 registration, and the conversion to a
// validated RunConfig. Validation is pure and identical on every rank, so a bad flag stops
// every rank before the first collective with one line naming the flag and what is allowed.
#pragma once

#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/cli/options_table.h"
#include "harness/launch/trainer.h"

namespace sb {

// The table's knobs (bench/cli/options_table.h) plus what only a local run takes.
struct RunArgs : Knobs {
  int np = 0;              // standalone launch: start an mpirun of this many ranks
  int steps = 5;
  int warmup = 1;
  std::string collectives = "ring";
  uint64_t seed = 1234;
  double lr = 1e-3;
  std::string device = "cpu";
  std::string out = "results/runs/latest.json";  // git-ignored: a checkout stays clean
  double peak_gflops = 0;  // 0: measure the single-core sgemm ceiling at start
  bool quiet = false;
  std::string inject_fault;
  double inject_slowdown = 0;    // hidden test flag: each measured step sleeps this fraction more
  std::string peak_calibration;  // hidden: the launcher's sgemm calibration, handed to the ranks
  double timeout_s = 600;  // watchdog on every collective
  bool resume = false;     // skip strategies already ok in --out (same config)
  std::string trace;       // directory for one Chrome trace per strategy ("" = none)
};

// A usage error: printed as one line, exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A whole-number flag (counts, seeds): accepts 123 and exact scientific notation (7.5e9, 5e7),
// rejects signs, fractions and values outside [min, max] with "FLAG: VALUE: allowed ...", and
// hands CLI11 the plain digits, so an unsigned flag never wraps a negative value to 2^64 - 1.
CLI::Validator whole_number(uint64_t min, uint64_t max = UINT64_MAX);

struct BoundOptions;  // bench/cli/config_binding.h

void add_run_options(CLI::App* app, RunArgs& a);
// After `app` parses, `given` holds the long names of the flags typed (a file's settings
// conflict only with a flag the user gave, never with a default).
void record_given_flags(CLI::App* app, std::set<std::string>& given);
// The flags' config; `bound` (if given) gets each config file's options for its rows.
RunConfig to_run_config(const RunArgs& a, BoundOptions* bound = nullptr);  // throws UsageError
// An FSDP file's MixedPrecisionPolicy(param_dtype bf16, reduce_dtype fp32) is FSDP2's (FSDP1 does
// not model it, so an fsdp_* row is refused): it sets the flags' rows, which fsdp2 and
// fsdp2_hsdp read. Throws UsageError.
void bind_fsdp_reduce_dtype(const std::string& path, const std::string& strategies,
                            bool file_reduce_fp32, const StrategyOptions& file,
                            StrategyOptions& flags);
// The group-size knobs against the world (N ranks, G per node), once both are known: FSDP2's
// integer reshard_after_forward and MiCS's partition. Throws UsageError.
void check_group_knobs(const StrategyOptions& o, int world, int ranks_per_node);
// qgZ as shipped reads fp16 gradients: zero_quantized_gradients needs bf16 training with
// communication_data_type fp16 unless the suite's variant is asked for. Throws UsageError.
void check_qgz_contract(const StrategyOptions& o);
// --zero-bucket-reduce all_reduce|reduce_per_owner (DeepSpeed's use_multi_rank_bucket_allreduce
// true|false) over --zero-schedule shipped; throws UsageError naming the flag otherwise.
void apply_zero_bucket_reduce(const std::string& value, const std::string& zero_schedule,
                              bool ds_config, StrategyOptions& o);
std::vector<std::string> parse_strategy_list(const std::string& s);  // throws UsageError

int run_command(const RunArgs& a, int argc, char** argv);
// --np N outside an MPI job: runs mpirun on this binary as a child, forwarding signals, with a
// private OpenMPI session directory removed at the end (bench/cli/mpi_launch.cc). Returns
// mpirun's exit status.
// peak_calibration: the launcher's CPU calibration (PeakCalibration::to_flag: the MFU's
// per-core figure and the triad bandwidth), passed on as --peak-calibration; "" for none.
int launch_mpirun(const RunArgs& a, int argc, char** argv, const std::string& peak_calibration);
// --hosts netns: execs ci/two_host.sh with the remaining arguments: H hosts of G ranks (G =
// --ranks-per-node, default 2 or --np / 2; H = --np / G, default 2), the link shaped by
// --inter-gbps/--inter-latency-ms; peak_calibration as for launch_mpirun.
int launch_two_hosts(const RunArgs& a, int argc, char** argv,
                     const std::string& peak_calibration);
struct ExportArgs {
  std::string format;              // bencher | github-action-benchmark | gbench
  std::string tool;                // github-action-benchmark: bigger | smaller
  std::vector<std::string> files;  // results files or matrix indexes
  std::string out;                 // empty: stdout
};
int export_command(const ExportArgs& a);

}  // namespace sb
