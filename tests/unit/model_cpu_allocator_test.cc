// The CPU device's memory: a step's buffers, allocated and released again step after step
// through a MemoryTracker on the device's allocator, are served from the cache after the first
// step, with no new block, no block given back and (counted with getrusage) no page faults.
// Sizes span the three paths: heap blocks, mmap'd blocks, and a 64 MiB one, above glibc's
// largest dynamic mmap threshold, which plain malloc maps and unmaps on every step.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "harness/device/device.h"
#include "harness/memory/page_faults.h"

namespace sb {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

// One "step": allocate every buffer, write all of it (as kernels do), release in reverse.
void one_step(MemoryTracker& mem) {
  const std::vector<size_t> sizes = {3000, 100 << 10, 200 << 10, 5 * kMiB, 64 * kMiB};
  std::vector<void*> live;
  for (size_t s : sizes) {
    void* p = mem.allocate(MemCategory::kWorkspace, s);
    std::memset(p, 1, s);
    live.push_back(p);
  }
  for (size_t i = sizes.size(); i-- > 0;) mem.release(live[i], MemCategory::kWorkspace, sizes[i]);
}

TEST(CpuDeviceAllocator, RepeatedStepsReuseBlocksWithoutFaults) {
  auto dev = make_cpu_device();
  MemoryTracker mem(dev->allocator());
  one_step(mem);  // warm-up: every block is made (and faulted in) here
  const CacheStats warm = dev->allocator_stats();
  EXPECT_EQ(warm.misses, 5u);
  for (int step = 0; step < 4; ++step) {
    const PageFaults before = process_page_faults();
    one_step(mem);
    const PageFaults after = process_page_faults();
    EXPECT_LE(after.total() - before.total(), kSteadyStateFaultsPerStep) << "step " << step;
  }
  const CacheStats s = dev->allocator_stats();
  EXPECT_EQ(s.misses, warm.misses) << "a steady-state step asked the OS for a new block";
  EXPECT_EQ(s.backing_frees, 0u) << "a block went back to the OS inside the steps";
  EXPECT_EQ(s.hits - warm.hits, 4u * 5u);
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_GE(s.reserved_bytes, 69 * kMiB);
}

TEST(CpuDeviceAllocator, ReusedBlocksAreZeroAndTrimGivesEverythingBack) {
  auto dev = make_cpu_device();
  MemoryTracker mem(dev->allocator());
  for (size_t s : {size_t(3000), 5 * kMiB}) {
    auto* p = static_cast<unsigned char*>(mem.allocate(MemCategory::kWorkspace, s));
    std::memset(p, 7, s);
    mem.release(p, MemCategory::kWorkspace, s);
    p = static_cast<unsigned char*>(mem.allocate(MemCategory::kWorkspace, s));
    for (size_t i = 0; i < s; i += 4093) ASSERT_EQ(p[i], 0) << "byte " << i << " of " << s;
    ASSERT_EQ(p[s - 1], 0);
    mem.release(p, MemCategory::kWorkspace, s);
  }
  EXPECT_GT(dev->allocator_stats().reserved_bytes, 0u);
  dev->trim_memory();
  EXPECT_EQ(dev->allocator_stats().reserved_bytes, 0u);
  EXPECT_EQ(dev->allocator_stats().backing_frees, 2u);
}

}  // namespace
}  // namespace sb
