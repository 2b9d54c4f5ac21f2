// The watchdog: every blocking communication of a run (a collective on the comm thread, an MPI
// helper on the main thread) is an activity with a description; when one outlives the
// timeout, the watchdog prints which rank waited on what (and on whom) and aborts the whole
// job through the abort hook (MPI_Abort), so a dead or stalled peer never leaves ranks hanging.
#pragma once

#include <cstdint>
#include <string>

namespace sb {

class Watchdog {
 public:
  static void set_timeout(double seconds);  // 0 = off (the default until the CLI sets it)
  static double timeout();

  // RAII: the activity lasts from construction to destruction.
  class Scope {
   public:
    explicit Scope(std::string what);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    uint64_t id_;
  };
};

}  // namespace sb
