// `shardbench report FILES... --out report.html`: the offline HTML report. The page is built by
// plots/report_html.py, because its charts are matplotlib's SVG (the same figures as
// plots/plot_results.py, drawn once) and compare.py's regression rule lives in Python; this command
// only checks its arguments and hands over to Debian's python3.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/cli/output_path.h"
#include "bench/cli/run_options.h"

namespace sb {
namespace {

struct ReportArgs {
  std::vector<std::string> files;
  std::string out, labels, baseline, history, trace_dir, validation;
};
ReportArgs report_args;

}  // namespace

void add_report_command(CLI::App& app) {
  ReportArgs& a = report_args;
  CLI::App* rep = app.add_subcommand(
      "report", "Write a self-contained HTML report (plots, tables, baseline, trends)");
  rep->add_option("files", a.files, "results JSON files (the last is the one tabulated)")
      ->required();
  rep->add_option("--out", a.out, "HTML file to write")->required();
  rep->add_option("--labels", a.labels, "comma-separated labels, one per file");
  rep->add_option("--baseline", a.baseline, "results file to compare against (compare.py)");
  rep->add_option("--history", a.history, "folder of dated results files: trends");
  rep->add_option("--trace-dir", a.trace_dir, "folder of `run --trace` files: timelines");
  rep->add_option("--validation", a.validation,
                  "`shardbench validate --json` file: the predictor's published-runs table");
}

int report_command() {
  const ReportArgs& a = report_args;
  for (const std::string& f : a.files)
    if (!std::filesystem::is_regular_file(f))
      throw UsageError("report: '" + f + "' is not a readable results file");
  if (!a.baseline.empty() && !std::filesystem::is_regular_file(a.baseline))
    throw UsageError("report --baseline '" + a.baseline + "': no such file");
  if (!a.validation.empty() && !std::filesystem::is_regular_file(a.validation))
    throw UsageError("report --validation '" + a.validation + "': no such file");
  prepare_output_path("--out", a.out);  // the rule of every file the commands write
  const std::string python = "/usr/bin/python3";
  const std::string script = std::string(SB_SOURCE_DIR) + "/plots/report_html.py";
  if (access(python.c_str(), X_OK) != 0 || access(script.c_str(), R_OK) != 0)
    throw UsageError("report needs " + python + " (python3-matplotlib; ci/setup.sh) and " + script);
  std::vector<std::string> argv = {python, script};
  argv.insert(argv.end(), a.files.begin(), a.files.end());
  const std::pair<const char*, const std::string*> opts[] = {{"--out", &a.out},
                                                             {"--labels", &a.labels},
                                                             {"--baseline", &a.baseline},
                                                             {"--history", &a.history},
                                                             {"--trace-dir", &a.trace_dir},
                                                             {"--validation", &a.validation}};
  for (const auto& [flag, value] : opts)
    if (!value->empty()) argv.insert(argv.end(), {flag, *value});
  std::vector<char*> c_argv;
  for (std::string& s : argv) c_argv.push_back(s.data());
  c_argv.push_back(nullptr);
  execv(python.c_str(), c_argv.data());
  throw UsageError("report: cannot run " + python);
}

}  // namespace sb
