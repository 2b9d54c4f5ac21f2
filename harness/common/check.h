// Fatal-error checks shared by every module: print "[rank r] file:line: message" and abort the
// whole job. The abort action is a hook installed by the MPI runtime (MPI_Abort) so that this
// header, and the strategies that use it, never include MPI.
#pragma once

#include <sstream>
#include <string>

namespace sb {

// Installed once by the runtime; default prints and calls std::abort().
using AbortHook = void (*)(int exit_code);
void set_abort_hook(AbortHook hook);
void set_log_rank(int rank);
int log_rank();

[[noreturn]] void fatal(const char* file, int line, const std::string& message);

}  // namespace sb

// SB_CHECK(cond, "text " << value) aborts the job with the streamed message when cond fails.
#define SB_CHECK(cond, msg)                                   \
  do {                                                        \
    if (!(cond)) {                                            \
      std::ostringstream sb_check_os_;                        \
      sb_check_os_ << "check failed: " #cond ": " << msg;     \
      ::sb::fatal(__FILE__, __LINE__, sb_check_os_.str());    \
    }                                                         \
  } while (0)
