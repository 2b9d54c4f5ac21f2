// The `shardbench` command: subcommands run, predict, export, report and compare.
// Parse errors and bad values print one line naming the flag and exit 2; nothing is written.
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/cli/options_table.h"
#include "bench/cli/run_options.h"
#include "harness/device/cpu_device.h"

namespace sb {  // bench/cli/predict_command.cc
void add_predict_command(CLI::App& app);
int predict_command();
void add_report_command(CLI::App& app);  // bench/cli/report_command.cc
int report_command();
void add_validate_command(CLI::App& app);  // bench/cli/validate_command.cc
int validate_command();
std::string git_commit();  // harness/launch/report.cc
}  // namespace sb

namespace {
constexpr const char* kVersion = "0.9.0";

// `shardbench compare A.json B.json [...]`: the nightly gate's comparison, plots/compare.py,
// run as it is (one implementation of the regression rule, not two).
int compare_command(const std::vector<std::string>& args) {
  const std::string script = std::string(SB_SOURCE_DIR) + "/plots/compare.py";
  std::vector<std::string> argv_s = {"python3", script};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  execvp("python3", argv.data());
  std::fprintf(stderr, "shardbench compare: cannot run python3 %s; allowed: python3 on PATH\n",
               script.c_str());
  return 2;
}

// A parse error as one line: an unknown or missing command (with "did you mean"), or the
// first flag the subcommand does not take.
void report_parse_error(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  if (app.get_subcommands().empty() && argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    std::fprintf(stderr, "shardbench: unknown command '%s'%s; allowed: %s (see --help)\n",
                 argv[1], sb::did_you_mean(argv[1], names).c_str(),
                 fmt::format("{}", fmt::join(names, " | ")).c_str());
  } else if (app.get_subcommands().empty()) {
    std::string names;
    for (const CLI::App* sub : app.get_subcommands({})) names += (names.empty() ? "" : " | ") + sub->get_name();
    std::fprintf(stderr, "shardbench: unknown or missing command%s%s%s; allowed: %s (see --help)\n",
                 argc > 1 ? " '" : "", argc > 1 ? argv[1] : "", argc > 1 ? "'" : "", names.c_str());
  } else {
    const std::string unknown =
        sb::unknown_flag_line(*app.get_subcommands().front(), argc, argv);
    std::fprintf(stderr, "shardbench%s\n",
                 unknown.empty() ? (std::string(": ") + e.what()).c_str() : unknown.c_str());
  }
}
}  // namespace

int main(int argc, char** argv) {
  sb::select_blas_kernels(argv);
  CLI::App app{"shardbench: which data-parallel sharding strategy should we run, and what does it cost?"};
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("--version", version, "Print the version and the source checkout's git commit");
  app.footer(
      "Examples:\n"
      "  shardbench predict --model llama2-7b --world 64 --cluster dgx-h100\n"
      "  shardbench run --np 4 --model tiny --steps 2\n"
      "  shardbench compare results/baseline/small-np4-fp32-476841f85d.json results/runs/latest.json\n");
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
  CLI::App* cmp = app.add_subcommand(
      "compare", "Compare a baseline and a new results file; exit 1 on a regression "
                 "(runs plots/compare.py; `shardbench compare --help` for its options)");
  cmp->prefix_command();
  cmp->set_help_flag();  // --help goes to compare.py
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    report_parse_error(app, e, argc, argv);
    return 2;
  }
  if (version) {
    std::printf("shardbench %s (commit %s)\n", kVersion, sb::git_commit().c_str());
    return 0;
  }
  if (app.get_subcommands().empty()) {
    std::fprintf(stderr, "shardbench: missing command; allowed: run | predict | export | report | "
                         "validate | compare (see --help)\n");
    return 2;
  }
  if (*cmp) return compare_command(cmp->remaining());
  try {
    if (*run) return sb::run_command(run_args, argc, argv);
    if (*exp) return sb::export_command(export_args);
    if (app.got_subcommand("predict")) return sb::predict_command();
    if (app.got_subcommand("report")) return sb::report_command();
    if (app.got_subcommand("validate")) return sb::validate_command();
  } catch (const sb::UsageError& e) {
    std::fprintf(stderr, "shardbench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {  // a bug, not bad input: one line and exit 1, no abort
    std::fprintf(stderr, "shardbench: internal error (please report): %s\n", e.what());
    return 1;
  }
  return 0;
}
