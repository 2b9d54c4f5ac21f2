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
[[noreturn]] void reject(const std::string& flag, const std::string& path, const std::string& why) {
  throw UsageError(
      fmt::format("{} {}: {}; allowed: a file path in a writable directory", flag, path, why));
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
  // access(W_OK) says yes to root on a read-only mount; creating a file is the real test.
  const std::string probe =
      (parent / fmt::format(".{}.probe.{}", fs::path(path).filename().string(), getpid())).string();
  const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0)
    reject(flag, path,
           fmt::format("cannot create files in '{}' ({})", parent.string(), std::strerror(errno)));
  ::close(fd);
  ::unlink(probe.c_str());
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
