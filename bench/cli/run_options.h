// The `shardbench run` flags: one struct, its CLI11 registration, and the conversion to a
// validated RunConfig. Validation is pure and identical on every rank, so a bad flag stops
// every rank before the first collective with one line naming the flag and what is allowed.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "harness/run/trainer.h"

namespace sb {

struct RunArgs {
  std::string model = "small";
  std::string strategies = "all";
  int np = 0;              // standalone launch: start an mpirun of this many ranks
  int ranks_per_node = 0;  // 0: from MPI_COMM_TYPE_SHARED
  int batch = 4;
  int steps = 5;
  int warmup = 1;
  std::string precision = "fp32";
  std::string wrap = "block";
  double bucket_mb = 25;
  std::string backward_prefetch = "pre";
  bool forward_prefetch = false;
  std::string limit_all_gathers = "on";
  std::string overlap = "on";
  std::string collectives = "ring";
  double mem_limit_gb = 0;
  uint64_t seed = 1234;
  double lr = 1e-3;
  uint64_t prefetch_elements = 50'000'000;
  uint64_t persist_elements = 0;
  std::string device = "cpu";
  std::string out = "results/latest.json";
  double peak_gflops = 0;  // 0: measure the single-core sgemm ceiling at start
  int seq = 0;  // tokens per sample; 0 = the model's context
  bool untied_head = false;
  std::string attention = "fused";  // naive | fused
  bool quiet = false;
  std::string inject_fault;
  double timeout_s = 600;  // watchdog on every collective
  bool resume = false;     // skip strategies already ok in --out (same config)
  std::string hosts;       // "netns": two namespace hosts on this machine (ci/two_host.sh)
};

// A usage error: printed as one line, exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A whole-number flag (counts, seeds): accepts 123 and exact scientific notation (7.5e9, 5e7),
// rejects signs, fractions and values outside [min, max] with "FLAG: VALUE: allowed ...", and
// hands CLI11 the plain digits, so an unsigned flag never wraps a negative value to 2^64 - 1.
CLI::Validator whole_number(uint64_t min, uint64_t max = UINT64_MAX);

void add_run_options(CLI::App* app, RunArgs& a);
RunConfig to_run_config(const RunArgs& a);  // throws UsageError
std::vector<std::string> parse_strategy_list(const std::string& s);  // throws UsageError

int run_command(const RunArgs& a, int argc, char** argv);
// --np N outside an MPI job: runs mpirun on this binary as a child, forwarding signals, with a
// private OpenMPI session directory removed at the end (bench/cli/mpi_launch.cc). peak_gflops
// > 0 is passed on as --peak-gflops. Returns mpirun's exit status.
int launch_mpirun(const RunArgs& a, int argc, char** argv, double peak_gflops);
// --hosts netns: execs ci/two_host.sh with the remaining arguments (G = --ranks-per-node, or
// --np / 2, default 2 ranks per host); peak_gflops > 0 is passed on as --peak-gflops.
int launch_two_hosts(const RunArgs& a, int argc, char** argv, double peak_gflops);
int export_command(const std::string& format, const std::string& file, const std::string& out);

}  // namespace sb
