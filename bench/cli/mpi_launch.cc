// `shardbench run --np N`: the standalone launcher (like torchrun). It starts mpirun on this
// binary as a child in its own process group, forwards SIGINT/SIGTERM/SIGHUP to it, and gives
// the job a private OpenMPI session directory, /dev/shm/shardbench.<launcher pid>, holding
// every shared-memory segment (vader BTL, PMIx) — removed when the job ends, and, for a
// launcher killed outright, by the next launch (its owner pid is gone). Runs no MPI itself.
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/cli/run_options.h"

namespace sb {
namespace fs = std::filesystem;

namespace {
constexpr const char* kJobDirPrefix = "shardbench.";
volatile sig_atomic_t g_mpirun_pid = 0;
volatile sig_atomic_t g_forwarded = 0;

void forward_signal(int sig) {
  g_forwarded = sig;
  if (g_mpirun_pid > 0) ::kill(pid_t(g_mpirun_pid), sig);  // mpirun ends the job and cleans up
}

fs::path job_dir_base() {
  return fs::is_directory("/dev/shm") ? "/dev/shm" : fs::temp_directory_path();
}

// Removes the session directories of launchers that no longer exist (killed with SIGKILL).
void sweep_stale_job_dirs(const fs::path& base) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(base, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kJobDirPrefix, 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + std::strlen(kJobDirPrefix), &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;  // its launcher still runs
    fs::remove_all(e.path(), ec);
  }
}

std::vector<std::string> mpirun_args(const RunArgs& a, int argc, char** argv,
                                     const std::string& peak_calibration) {
  std::vector<std::string> args = {
      "mpirun", "-np", std::to_string(a.np),    "--oversubscribe", "--bind-to", "none", "--stdin",
      "none",   "-x",  "OPENBLAS_NUM_THREADS=1"};
  if (std::getenv("OPENBLAS_CORETYPE")) {  // the kernel choice of select_blas_kernels
    args.push_back("-x");
    args.push_back("OPENBLAS_CORETYPE");
  }
  args.push_back(fs::read_symlink("/proc/self/exe").string());
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--np") {
      ++i;
      continue;
    }
    if (s.rfind("--np=", 0) == 0) continue;
    args.push_back(s);
  }
  if (!peak_calibration.empty()) {  // calibrated once, alone, before the ranks compete for cores
    args.push_back("--peak-calibration");
    args.push_back(peak_calibration);
  }
  return args;
}

[[noreturn]] void exec_mpirun(std::vector<std::string> args, pid_t launcher) {
  ::setpgid(0, 0);  // the launcher alone receives the terminal's signals and forwards them once
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a launcher killed outright still ends the job
  if (::getppid() != launcher) std::_Exit(128 + SIGTERM);
  std::vector<char*> cargv;
  for (auto& s : args) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  ::execvp("mpirun", cargv.data());
  std::fprintf(stderr, "shardbench: cannot start mpirun (%s); install openmpi-bin (ci/setup.sh)\n",
               std::strerror(errno));
  std::_Exit(2);
}
}  // namespace

int launch_mpirun(const RunArgs& a, int argc, char** argv, const std::string& peak_calibration) {
  if (geteuid() == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  const fs::path base = job_dir_base();
  sweep_stale_job_dirs(base);
  const fs::path job_dir = base / fmt::format("{}{}", kJobDirPrefix, getpid());
  std::error_code ec;
  fs::create_directories(job_dir, ec);
  if (!ec) {  // OpenMPI's session directory, and the vader BTL's segments, inside it
    setenv("OMPI_MCA_orte_tmpdir_base", job_dir.c_str(), 1);
    setenv("OMPI_MCA_btl_vader_backing_directory", job_dir.c_str(), 1);
  }
  const std::vector<std::string> args = mpirun_args(a, argc, argv, peak_calibration);
  struct sigaction fwd = {}, old[3];
  fwd.sa_handler = forward_signal;
  sigemptyset(&fwd.sa_mask);
  const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
  for (int i = 0; i < 3; ++i) ::sigaction(sigs[i], &fwd, &old[i]);
  const pid_t launcher = getpid();
  const pid_t child = ::fork();
  if (child == 0) exec_mpirun(args, launcher);
  if (child < 0) {
    fs::remove_all(job_dir, ec);
    throw UsageError(fmt::format("--np: cannot start mpirun ({})", std::strerror(errno)));
  }
  g_mpirun_pid = child;
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  fs::remove_all(job_dir, ec);
  for (int i = 0; i < 3; ++i) ::sigaction(sigs[i], &old[i], nullptr);
  if (g_forwarded != 0) ::raise(g_forwarded);  // end as the signal asked, after the clean-up
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace sb
