// One monitor thread per process, started on first use; activities live in a small map.
#include "harness/comm/watchdog.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "harness/common/check.h"

namespace sb {
namespace {

using Clock = std::chrono::steady_clock;

struct Registry {
  std::mutex m;
  std::map<uint64_t, std::pair<Clock::time_point, std::string>> active;
  uint64_t next_id = 1;
  std::atomic<double> timeout_s{0};
  std::once_flag started;

  void start() {
    std::call_once(started, [this] {
      std::thread([this] {
        for (;;) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          const double limit = timeout_s.load();
          if (limit <= 0) continue;
          std::string expired;
          double age = 0;
          {
            std::lock_guard<std::mutex> lock(m);
            for (const auto& [id, a] : active) {
              age = std::chrono::duration<double>(Clock::now() - a.first).count();
              if (age > limit) {
                expired = a.second;
                break;
              }
            }
          }
          if (!expired.empty()) {
            std::ostringstream os;
            os << "watchdog: " << expired << " did not complete within " << limit
               << " s (--timeout-s); a peer rank died or stalled. Aborting the job.";
            fatal(__FILE__, __LINE__, os.str());
          }
        }
      }).detach();
    });
  }
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: the monitor thread outlives main
  return *r;
}

}  // namespace

void Watchdog::set_timeout(double seconds) {
  registry().timeout_s.store(seconds);
  if (seconds > 0) registry().start();
}

double Watchdog::timeout() { return registry().timeout_s.load(); }

Watchdog::Scope::Scope(std::string what) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.m);
  id_ = r.next_id++;
  r.active.emplace(id_, std::make_pair(Clock::now(), std::move(what)));
}

Watchdog::Scope::~Scope() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.m);
  r.active.erase(id_);
}

}  // namespace sb
