// The machine probe and the core count of the MFU denominator (see header).
#include "harness/launch/hardware.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>

namespace sb {
namespace {

std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (f) std::getline(f, s);
  return s;
}

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

}  // namespace

// Wire form: quota TAB cores_from TAB id TAB core,core,... (ids and core keys hold no tabs).
std::string MachineProbe::to_line() const {
  std::string s = std::to_string(quota_cores) + "\t" + cores_from + "\t" + id + "\t";
  for (size_t i = 0; i < cores.size(); ++i) s += (i ? "," : "") + cores[i];
  return s;
}

MachineProbe MachineProbe::from_line(const std::string& s) {
  std::vector<std::string> f;
  size_t pos = 0;
  for (size_t tab; (tab = s.find('\t', pos)) != std::string::npos; pos = tab + 1)
    f.push_back(s.substr(pos, tab - pos));
  f.push_back(s.substr(pos));
  if (f.size() != 4) throw std::invalid_argument("machine probe: " + s);
  MachineProbe p;
  p.quota_cores = std::stoi(f[0]);
  p.cores_from = f[1];
  p.id = f[2];
  for (size_t at = 0, comma; at < f[3].size(); at = comma + 1) {
    comma = std::min(f[3].find(',', at), f[3].size());
    p.cores.push_back(f[3].substr(at, comma - at));
  }
  return p;
}

std::vector<std::string> physical_cores_from_sysfs(const std::string& cpu_dir,
                                                   const std::vector<int>& cpus) {
  std::set<std::string> cores;  // SMT siblings share (package, core)
  for (int c : cpus) {
    const std::string topo = cpu_dir + "/cpu" + std::to_string(c) + "/topology/";
    const std::string pkg = first_line(topo + "physical_package_id");
    const std::string core = first_line(topo + "core_id");
    if (pkg.empty() || core.empty()) return {};  // partial topology: do not guess
    cores.insert(pkg + ":" + core);
  }
  return {cores.begin(), cores.end()};
}

int cgroup_core_limit(const std::string& cpu_max_line) {
  const size_t sp = cpu_max_line.find(' ');
  if (sp == std::string::npos || cpu_max_line.compare(0, sp, "max") == 0) return 0;
  try {
    const double quota = std::stod(cpu_max_line.substr(0, sp));
    const double period = std::stod(cpu_max_line.substr(sp + 1));
    return quota > 0 && period > 0 ? int(std::ceil(quota / period)) : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

MachineProbe probe_this_machine() {
  MachineProbe p;
  p.id = first_line("/proc/sys/kernel/random/boot_id");
  if (p.id.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    p.id = std::string("host:") + host;
  }
  p.cores = physical_cores_from_sysfs("/sys/devices/system/cpu", allowed_cpus());
  p.cores_from = "sysfs topology";
  if (p.cores.empty()) {  // no sysfs: logical CPUs, which overcount SMT siblings
    const unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < n; ++i) p.cores.push_back("cpu" + std::to_string(i));
    p.cores_from = "hardware_concurrency";
  }
  // A container's CPU quota caps what its processes can use at once, whatever the topology.
  p.quota_cores = cgroup_core_limit(first_line("/sys/fs/cgroup/cpu.max"));
  return p;
}

HardwareCount count_cpu_hardware(const std::vector<MachineProbe>& per_rank) {
  struct Machine {
    int ranks = 0;
    int quota = 0;
    std::set<std::string> cores;
  };
  std::map<std::string, Machine> machines;
  for (const MachineProbe& p : per_rank) {
    Machine& m = machines[p.id];
    m.ranks += 1;
    m.cores.insert(p.cores.begin(), p.cores.end());
    if (p.quota_cores > 0) m.quota = m.quota > 0 ? std::min(m.quota, p.quota_cores) : p.quota_cores;
  }
  HardwareCount h;
  h.ranks = int(per_rank.size());
  h.machines = int(machines.size());
  bool capped = false;
  for (const auto& [id, m] : machines) {
    int cores = std::max(1, int(m.cores.size()));
    if (m.quota > 0 && m.quota < cores) {
      cores = m.quota;
      capped = true;
    }
    h.devices += std::min(m.ranks, cores);
    h.physical_cores += cores;
  }
  if (!per_rank.empty()) h.cores_from = per_rank.front().cores_from;
  if (capped) h.cores_from += ", cgroup cpu.max";
  return h;
}

}  // namespace sb
