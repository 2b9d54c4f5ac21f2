// What the CPU's MFU denominator counts (harness/launch/hardware.h): physical cores from a sysfs
// tree (SMT siblings once, a partial tree refused), the cgroup quota, and the count over the
// ranks' machines, where virtual nodes and namespace hosts on one kernel are one machine.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "harness/launch/hardware.h"

namespace sb {
namespace {

namespace fs = std::filesystem;

// cpu<i>/topology/{physical_package_id,core_id} for each (package, core) given.
std::string fake_sysfs(const std::vector<std::pair<int, int>>& cpus, bool drop_last_core_id) {
  const fs::path dir = fs::temp_directory_path() / ("sb_sysfs_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  for (size_t i = 0; i < cpus.size(); ++i) {
    const fs::path t = dir / ("cpu" + std::to_string(i)) / "topology";
    fs::create_directories(t);
    std::ofstream(t / "physical_package_id") << cpus[i].first << "\n";
    if (!(drop_last_core_id && i + 1 == cpus.size()))
      std::ofstream(t / "core_id") << cpus[i].second << "\n";
  }
  return dir.string();
}

TEST(Hardware, SmtSiblingsAreOneCoreAndCoreIdsRepeatAcrossPackages) {
  // 2 packages x 2 cores x 2 threads: 8 logical CPUs, 4 physical cores (core ids restart).
  const std::string dir =
      fake_sysfs({{0, 0}, {0, 1}, {1, 0}, {1, 1}, {0, 0}, {0, 1}, {1, 0}, {1, 1}}, false);
  EXPECT_EQ(physical_cores_from_sysfs(dir, {0, 1, 2, 3, 4, 5, 6, 7}).size(), 4u);
  EXPECT_EQ(physical_cores_from_sysfs(dir, {0, 4}).size(), 1u);  // taskset on two siblings
  EXPECT_EQ(physical_cores_from_sysfs(dir, {0, 2}).size(), 2u);
  fs::remove_all(dir);
  const std::string partial = fake_sysfs({{0, 0}, {0, 1}}, true);
  EXPECT_TRUE(physical_cores_from_sysfs(partial, {0, 1}).empty());
  fs::remove_all(partial);
}

TEST(Hardware, CgroupQuotaInWholeCores) {
  EXPECT_EQ(cgroup_core_limit("max 100000"), 0);
  EXPECT_EQ(cgroup_core_limit("200000 100000"), 2);
  EXPECT_EQ(cgroup_core_limit("150000 100000"), 2);  // 1.5 cores: a second core runs part-time
  EXPECT_EQ(cgroup_core_limit(""), 0);
  EXPECT_EQ(cgroup_core_limit("junk here"), 0);
}

MachineProbe probe(const std::string& id, std::vector<std::string> cores, int quota = 0) {
  MachineProbe p;
  p.id = id;
  p.cores = std::move(cores);
  p.quota_cores = quota;
  p.cores_from = "sysfs topology";
  return p;
}

TEST(Hardware, VirtualNodesOnOneMachineCountItsCoresOnce) {
  // the default matrix: 4 ranks as 2 virtual nodes x 2 on a 2-core machine -> 2, not 4
  const MachineProbe m = probe("boot-a", {"0:0", "0:1"});
  const HardwareCount h = count_cpu_hardware({m, m, m, m});
  EXPECT_EQ(h.devices, 2);
  EXPECT_EQ(h.machines, 1);
  EXPECT_EQ(h.physical_cores, 2);
  EXPECT_EQ(h.ranks, 4);
  EXPECT_EQ(count_cpu_hardware({m}).devices, 1);  // 1 rank: one core however many there are
}

TEST(Hardware, TwoMachinesEachMinOfRanksAndCores) {
  const MachineProbe a = probe("boot-a", {"0:0", "0:1"});
  const MachineProbe b = probe("boot-b", {"0:0", "0:1", "0:2", "0:3"});
  const HardwareCount h = count_cpu_hardware({a, a, a, b, b, b});
  EXPECT_EQ(h.machines, 2);
  EXPECT_EQ(h.devices, 2 + 3);
  EXPECT_EQ(h.physical_cores, 6);
}

TEST(Hardware, RanksBoundToOneCoreEachAddUpTheirCores) {
  // mpirun --bind-to core: each rank sees one core; the machine's count is their union
  const HardwareCount h = count_cpu_hardware(
      {probe("m", {"0:0"}), probe("m", {"0:1"}), probe("m", {"0:2"}), probe("m", {"0:0"})});
  EXPECT_EQ(h.physical_cores, 3);
  EXPECT_EQ(h.devices, 3);
}

TEST(Hardware, QuotaCapsTheMachine) {
  const MachineProbe m = probe("m", {"0:0", "0:1", "0:2", "0:3"}, 2);
  const HardwareCount h = count_cpu_hardware({m, m, m, m});
  EXPECT_EQ(h.devices, 2);
  EXPECT_NE(h.cores_from.find("cgroup"), std::string::npos);
}

TEST(Hardware, ProbeRoundTripsAndThisMachineHasACore) {
  const MachineProbe p = probe("2d77-boot", {"0:0", "1:3"}, 3);
  const MachineProbe q = MachineProbe::from_line(p.to_line());
  EXPECT_EQ(q.id, p.id);
  EXPECT_EQ(q.cores, p.cores);
  EXPECT_EQ(q.quota_cores, 3);
  EXPECT_EQ(q.cores_from, p.cores_from);
  EXPECT_THROW(MachineProbe::from_line("no tabs"), std::invalid_argument);
  const MachineProbe here = probe_this_machine();
  EXPECT_FALSE(here.id.empty());
  EXPECT_GE(here.cores.size(), 1u);
  // this process may run on at most its logical CPUs
  EXPECT_LE(here.cores.size(), std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace
}  // namespace sb
