// `shardbench run --hosts netns`: hands the run to ci/two_host.sh, which makes H hosts out of
// network namespaces on this machine, shapes and measures their link, and starts one MPI job
// of G ranks in each (as --np hands it to mpirun). Only the argument plumbing lives here; the
// namespaces, the link and the teardown are the script's, and so is the exit code 2 where the
// hosts or the link asked for cannot be made.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/cli/run_options.h"

namespace sb {
namespace {

// Flags the launcher consumes: the script's job sets world and ranks per node itself.
bool consumed(const std::string& s, bool* takes_value) {
  for (const std::string flag :
       {"--hosts", "--np", "--ranks-per-node", "--inter-gbps", "--inter-latency-ms"}) {
    *takes_value = s == flag;  // "--flag value"; else maybe "--flag=value"
    if (*takes_value || s.rfind(flag + "=", 0) == 0) return true;
  }
  return false;
}

}  // namespace

int launch_two_hosts(const RunArgs& a, int argc, char** argv,
                     const std::string& peak_calibration) {
  if (a.hosts != "netns") throw UsageError(fmt::format("--hosts {}: allowed netns", a.hosts));
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK"))
    throw UsageError("--hosts netns starts its own MPI job: run shardbench without mpirun");
  // H hosts of G ranks: G from --ranks-per-node (default: --np / 2, else 2), H = --np / G.
  const int g = a.ranks_per_node > 0 ? a.ranks_per_node : a.np > 0 ? a.np / 2 : 2;
  const int h = a.np > 0 && g > 0 ? a.np / g : 2;
  if (a.np > 0 && (g < 1 || a.np % g != 0 || h < 2 || h > 64))
    throw UsageError(fmt::format(
        "--np {}: --hosts netns runs H x --ranks-per-node {} ranks with 2 <= H <= 64", a.np,
        a.ranks_per_node > 0 ? std::to_string(g) : "G"));

  const char* env_script = std::getenv("SB_TWO_HOST_SCRIPT");
  const std::string script = env_script ? env_script : SB_SOURCE_DIR "/ci/two_host.sh";
  if (!std::filesystem::exists(script)) {
    std::fprintf(stderr, "shardbench: --hosts netns: %s not found (set SB_TWO_HOST_SCRIPT)\n",
                 script.c_str());
    return 2;
  }
  std::vector<std::string> args = {"bash",
                                   script,
                                   "--bin",
                                   std::filesystem::read_symlink("/proc/self/exe").string(),
                                   "--hosts",
                                   std::to_string(h),
                                   "--ranks-per-node",
                                   std::to_string(g)};
  if (a.inter_gbps > 0) {
    args.push_back("--inter-gbps");
    args.push_back(fmt::format("{}", a.inter_gbps));
  }
  if (a.inter_latency_ms >= 0) {
    args.push_back("--inter-latency-ms");
    args.push_back(fmt::format("{}", a.inter_latency_ms));
  }
  args.push_back("--");
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (i == 1 && s == "run") continue;  // the script runs `shardbench run`
    bool takes_value = false;
    if (consumed(s, &takes_value)) {
      i += takes_value ? 1 : 0;
      continue;
    }
    args.push_back(s);
  }
  if (!peak_calibration.empty()) {  // calibrated once, alone, before the ranks compete for cores
    args.push_back("--peak-calibration");
    args.push_back(peak_calibration);
  }
  std::vector<char*> cargv;
  for (auto& s : args) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  std::fflush(stdout);
  execvp("bash", cargv.data());
  std::fprintf(stderr, "shardbench: --hosts netns: cannot start bash (%s)\n", std::strerror(errno));
  return 2;
}

}  // namespace sb
