// Implementation of the fatal-error path; owns only the abort hook and the rank prefix.
#include "harness/common/check.h"

#include <cstdio>
#include <cstdlib>

namespace sb {
namespace {
AbortHook g_abort_hook = nullptr;
int g_rank = 0;
}  // namespace

void set_abort_hook(AbortHook hook) { g_abort_hook = hook; }
void set_log_rank(int rank) { g_rank = rank; }
int log_rank() { return g_rank; }

void fatal(const char* file, int line, const std::string& message) {
  std::fprintf(stderr, "[rank %d] %s:%d: %s\n", g_rank, file, line, message.c_str());
  std::fflush(stderr);
  if (g_abort_hook != nullptr) g_abort_hook(1);
  std::abort();
}

}  // namespace sb
