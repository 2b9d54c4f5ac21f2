// getrusage(2): ru_minflt / ru_majflt of the calling process, all threads.
#include "harness/memory/page_faults.h"

#include <sys/resource.h>

namespace sb {

PageFaults process_page_faults() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return {};
  return PageFaults{uint64_t(u.ru_minflt), uint64_t(u.ru_majflt)};
}

}  // namespace sb
