// What the CPU's MFU denominator counts: the cores the ranks really ran on. Virtual nodes
// (--ranks-per-node on one host) and network-namespace hosts (--hosts netns) are labels of the
// topology; they share one machine's cores. Each rank probes its machine (an id shared by
// every process on one kernel, and the physical cores this process may run on); the count
// then takes, per distinct machine, min(ranks there, the union of its ranks' physical cores),
// summed. The union, not one rank's view: ranks bound to one core each see one core apiece.
#pragma once

#include <string>
#include <vector>

namespace sb {

struct MachineProbe {
  std::string id;          // kernel boot id (one per running kernel: namespaces share it);
                           // the host name where it cannot be read
  std::vector<std::string> cores;  // "package:core" of every physical core this process may
                                   // run on (SMT siblings are one core)
  int quota_cores = 0;     // cgroup cpu.max as whole cores; 0: no quota
  std::string cores_from;  // "sysfs topology" or "hardware_concurrency" (the fallback)

  std::string to_line() const;                         // the gather's wire form
  static MachineProbe from_line(const std::string& s);  // throws std::invalid_argument
};

MachineProbe probe_this_machine();

// The physical cores of `cpus` as "package:core" keys from a sysfs cpu directory (normally
// /sys/devices/system/cpu): cpuN/topology/{physical_package_id,core_id}. Empty when any is
// unreadable.
std::vector<std::string> physical_cores_from_sysfs(const std::string& cpu_dir,
                                                   const std::vector<int>& cpus);
// A cgroup v2 cpu.max line ("max 100000" or "200000 100000") as whole cores (rounded up);
// 0 when unlimited or unreadable.
int cgroup_core_limit(const std::string& cpu_max_line);

struct HardwareCount {
  int devices = 0;         // what MFU divides by: sum over machines of min(ranks, cores)
  int machines = 0;        // distinct machines among the ranks
  int physical_cores = 0;  // their physical cores, summed
  int ranks = 0;
  std::string cores_from;  // how the cores were found (the first machine's way, and
                           // ", cgroup cpu.max" where a quota capped one)
};

// One probe per rank, in rank order.
HardwareCount count_cpu_hardware(const std::vector<MachineProbe>& per_rank);

}  // namespace sb
