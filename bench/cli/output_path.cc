// Output path checks and the results-file lock (see header).
#include "bench/cli/output_path.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "bench/cli/run_options.h"

namespace sb {
namespace fs = std::filesystem;

namespace {
[[noreturn]] void reject(const std::string& flag, const std::string& path, const std::string& why,
                         const char* allowed = "a file path in a writable directory") {
  throw UsageError(fmt::format("{} {}: {}; allowed: {}", flag, path, why, allowed));
}

// Creating a file is the real test of writability (access(W_OK) says yes to root on a
// read-only mount); empty when `dir` takes files, else why not.
std::string cannot_create_in(const fs::path& dir, const std::string& name) {
  const std::string probe = (dir / fmt::format(".{}.probe.{}", name, getpid())).string();
  const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0)
    return fmt::format("cannot create files in '{}' ({})", dir.string(), std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return {};
}
}  // namespace

void prepare_output_path(const std::string& flag, const std::string& path) {
  if (path.empty()) reject(flag, "''", "empty");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) reject(flag, path, "is a directory");
  if (fs::exists(st) && !fs::is_regular_file(st)) reject(flag, path, "is not a regular file");
  const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : ".";
  fs::create_directories(parent, ec);
  if (ec)
    reject(flag, path,
           fmt::format("cannot create directory '{}' ({})", parent.string(), ec.message()));
  if (!fs::is_directory(parent, ec))
    reject(flag, path, fmt::format("'{}' is not a directory", parent.string()));
  const std::string why = cannot_create_in(parent, fs::path(path).filename().string());
  if (!why.empty()) reject(flag, path, why);
}

void prepare_output_dir(const std::string& flag, const std::string& path) {
  constexpr const char* kAllowed = "a writable directory";
  if (path.empty()) reject(flag, "''", "empty", kAllowed);
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::exists(st) && !fs::is_directory(st)) reject(flag, path, "is not a directory", kAllowed);
  fs::create_directories(path, ec);
  if (ec || !fs::is_directory(path))
    reject(flag, path,
           fmt::format("cannot create the directory ({})",
                       ec ? ec.message() : std::string("a file is in the way")),
           kAllowed);
  const std::string why = cannot_create_in(path, "trace");
  if (!why.empty()) reject(flag, path, why, kAllowed);
}

OutputLock::OutputLock(const std::string& flag, const std::string& path) {
  const std::string lock = path + ".lock";
  fd_ = ::open(lock.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd_ < 0) reject(flag, path, fmt::format("cannot open {} ({})", lock, std::strerror(errno)));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    const ssize_t n = ::pread(fd_, pid, sizeof(pid) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    throw UsageError(fmt::format(
        "{} {}: another shardbench run{} is writing it (lock {}); wait for it to finish or "
        "choose another {}",
        flag, path, n > 0 ? fmt::format(" (pid {})", std::string(pid, strnlen(pid, n))) : "", lock,
        flag));
  }
  // Holding the lock, no other run writes this file: temp files beside it are what killed runs
  // left between writing and renaming (write_json_atomic's PATH.tmp.<pid>). Remove them.
  std::error_code ec;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".tmp.";
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove(e.path(), ec);
  const std::string me = std::to_string(getpid());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) < 0) {
    // The pid only improves the second run's message; the lock holds without it.
  }
}

OutputLock::~OutputLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace sb
