// The `shardbench` command: subcommands run, export, report (and predict, with its own issue).
// Parse errors and bad values print one line naming the flag and exit 2; nothing is written.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "bench/cli/run_options.h"
#include "harness/device/cpu_device.h"

namespace sb {  // bench/cli/predict_command.cc
void add_predict_command(CLI::App& app);
int predict_command();
void add_report_command(CLI::App& app);  // bench/cli/report_command.cc
int report_command();
void add_validate_command(CLI::App& app);  // bench/cli/validate_command.cc
int validate_command();
}  // namespace sb


int main(int argc, char** argv) {
  sb::select_blas_kernels(argv);
  CLI::App app{"shardbench: which data-parallel sharding strategy should we run, and what does it cost?"};
  app.require_subcommand(1);
  sb::RunArgs run_args;
  CLI::App* run = app.add_subcommand("run", "Run strategies on this MPI job (or launch one with --np)");
  sb::add_run_options(run, run_args);
  sb::ExportArgs export_args;
  CLI::App* exp = app.add_subcommand("export", "Convert results files for a benchmark dashboard");
  exp->add_option("--format", export_args.format,
                  "bencher (BMF, with bounds) | github-action-benchmark (one tool's array, "
                  "--tool) | gbench (Google Benchmark JSON)")
      ->required()
      ->check(CLI::IsMember({"bencher", "github-action-benchmark", "gbench"}));
  exp->add_option("--tool", export_args.tool,
                  "github-action-benchmark: bigger (customBiggerIsBetter) | smaller "
                  "(customSmallerIsBetter)")
      ->check(CLI::IsMember({"bigger", "smaller"}));
  exp->add_option("files", export_args.files, "results JSON files or a matrix index.json")
      ->required();
  exp->add_option("--out", export_args.out, "output file (default: stdout)");
  sb::add_predict_command(app);
  sb::add_report_command(app);
  sb::add_validate_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (app.get_subcommands().empty()) {
      std::string names;
      for (const CLI::App* sub : app.get_subcommands({})) names += (names.empty() ? "" : " | ") + sub->get_name();
      std::fprintf(stderr, "shardbench: unknown or missing command%s%s%s; allowed: %s (see --help)\n",
                   argc > 1 ? " '" : "", argc > 1 ? argv[1] : "", argc > 1 ? "'" : "", names.c_str());
    } else {
      std::fprintf(stderr, "shardbench: %s\n", e.what());
    }
    return 2;
  }
  try {
    if (*run) return sb::run_command(run_args, argc, argv);
    if (*exp) return sb::export_command(export_args);
    if (app.got_subcommand("predict")) return sb::predict_command();
    if (app.got_subcommand("report")) return sb::report_command();
    if (app.got_subcommand("validate")) return sb::validate_command();
  } catch (const sb::UsageError& e) {
    std::fprintf(stderr, "shardbench: %s\n", e.what());
    return 2;
  }
  return 0;
}
