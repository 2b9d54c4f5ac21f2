// The files the commands write (run --out, export --out, predict --json), checked before any
// work with one rule for all three: missing parent directories are created; a path that is a
// directory or not a regular file, or a directory where no file can be created, is a one-line
// UsageError naming the flag and the path. Also the lock that keeps two runs off one file.
// Writing itself is write_json_atomic's (harness/launch/report.h).
#pragma once

#include <string>

namespace sb {

// Throws UsageError "FLAG PATH: <why>; allowed: a file path in a writable directory".
void prepare_output_path(const std::string& flag, const std::string& path);

// The same rule for a folder the command writes into (run --trace DIR): created with its
// parents; throws UsageError "FLAG PATH: <why>; allowed: a writable directory".
void prepare_output_dir(const std::string& flag, const std::string& path);

// An exclusive flock(2) on the sidecar PATH.lock, held while the object lives (and released by
// the kernel when the process dies, however it dies). The sidecar stays on disk: removing it
// would let a third run lock a fresh inode while a second still holds the old one. Once it
// holds the lock it removes PATH.tmp.* left by runs killed between writing and renaming.
class OutputLock {
 public:
  // Throws UsageError naming the flag, the path and the pid of the run holding it.
  OutputLock(const std::string& flag, const std::string& path);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace sb
