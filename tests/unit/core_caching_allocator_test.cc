// The caching allocator on the host allocator: size classes, reuse without a backing call,
// zero-filled reuse, the empty-and-retry on OutOfMemory, its counters, and that it stays
// consistent under a MemoryTracker and under two threads.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "harness/memory/caching_allocator.h"
#include "harness/memory/tracker.h"

namespace sb {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

// A real allocator (the host one) that counts what passes through it and, given a budget,
// refuses past it: by throwing OutOfMemory as cudaMalloc's wrapper does, or by returning null.
class CountingBacking {
 public:
  // Past budget_bytes (0 = unlimited) allocations fail: OutOfMemory, or null when fail_with_null.
  explicit CountingBacking(uint64_t budget = 0, bool null = false)
      : budget_bytes(budget), fail_with_null(null) {}
  uint64_t budget_bytes;
  bool fail_with_null;

  RawAllocator raw() {
    RawAllocator r;
    r.allocate = [this](size_t bytes) -> void* {
      std::lock_guard<std::mutex> lock(mu_);
      if (budget_bytes != 0 && live_bytes_ + bytes > budget_bytes) {
        if (fail_with_null) return nullptr;
        throw OutOfMemory("backing: " + std::to_string(bytes) + " bytes over budget");
      }
      void* p = host_.allocate(bytes);
      sizes_[p] = bytes;
      live_bytes_ += bytes;
      ++allocs_;
      return p;
    };
    r.release = [this](void* p) {
      std::lock_guard<std::mutex> lock(mu_);
      live_bytes_ -= sizes_.at(p);
      sizes_.erase(p);
      ++releases_;
      host_.release(p);
    };
    return r;
  }
  size_t allocs() const {
    std::lock_guard<std::mutex> l(mu_);
    return allocs_;
  }
  size_t releases() const {
    std::lock_guard<std::mutex> l(mu_);
    return releases_;
  }
  uint64_t live_bytes() const {
    std::lock_guard<std::mutex> l(mu_);
    return live_bytes_;
  }
  size_t size_of(void* p) const {
    std::lock_guard<std::mutex> l(mu_);
    return sizes_.at(p);
  }

 private:
  RawAllocator host_ = host_allocator();
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> sizes_;
  uint64_t live_bytes_ = 0;
  size_t allocs_ = 0;
  size_t releases_ = 0;
};

// zero_fill as the CUDA device will do it (cudaMemsetAsync), here memset, with a call count.
struct CountingZeroFill {
  size_t calls = 0;
  size_t last_bytes = 0;
  std::function<void(void*, size_t)> fn() {
    return [this](void* p, size_t bytes) {
      ++calls;
      last_bytes = bytes;
      std::memset(p, 0, bytes);
    };
  }
};

auto memset_zero() {
  return [](void* p, size_t bytes) { std::memset(p, 0, bytes); };
}

TEST(CachingAllocator, RoundsTo512BelowOneMiBAndTo2MiBFromOneMiB) {
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(kMiB - 1), kMiB);
  EXPECT_EQ(CachingAllocator::round_size(kMiB), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::round_size(kMiB + 1), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::round_size(2 * kMiB), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::round_size(2 * kMiB + 1), 4 * kMiB);

  CountingBacking backing;
  CachingAllocator cache(backing.raw(), memset_zero());
  void* p = cache.allocate(1);
  EXPECT_EQ(backing.size_of(p), 512u);  // the backing allocator is asked for the rounded size
  void* q = cache.allocate(kMiB + 1);
  EXPECT_EQ(backing.size_of(q), 2 * kMiB);
  cache.release(p);
  cache.release(q);
}

TEST(CachingAllocator, ZeroBytesIsNullAndReleasingNullIsANoOp) {
  CountingBacking backing;
  CachingAllocator cache(backing.raw(), memset_zero());
  EXPECT_EQ(cache.allocate(0), nullptr);
  cache.release(nullptr);
  const CacheStats s = cache.stats();
  EXPECT_EQ(backing.allocs(), 0u);
  EXPECT_EQ(s.hits + s.misses, 0u);
  EXPECT_EQ(s.reserved_bytes, 0u);
}

TEST(CachingAllocator, FreedBlockOfTheSameClassIsReusedWithoutABackingCall) {
  CountingBacking backing;
  CachingAllocator cache(backing.raw(), memset_zero());
  void* p = cache.allocate(1000);  // class 1024
  cache.release(p);
  void* q = cache.allocate(700);  // also class 1024
  EXPECT_EQ(q, p);
  EXPECT_EQ(backing.allocs(), 1u);
  EXPECT_EQ(backing.releases(), 0u);
  const CacheStats s = cache.stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 1u);
  cache.release(q);
}

TEST(CachingAllocator, ReusedBlockIsZeroFilledFreshBlockIsNot) {
  CountingBacking backing;
  CountingZeroFill zero;
  CachingAllocator cache(backing.raw(), zero.fn());
  RawAllocator raw = cache.as_raw();
  auto* p = static_cast<unsigned char*>(raw.allocate(4000));
  EXPECT_EQ(zero.calls, 0u);  // fresh from the backing allocator: already zero
  for (size_t i = 0; i < 4000; ++i) EXPECT_EQ(p[i], 0) << i;
  std::memset(p, 0xAB, 4000);
  raw.release(p);
  auto* q = static_cast<unsigned char*>(raw.allocate(4000));
  ASSERT_EQ(q, p);
  EXPECT_EQ(zero.calls, 1u);
  EXPECT_EQ(zero.last_bytes, 4000u);
  for (size_t i = 0; i < 4000; ++i) ASSERT_EQ(q[i], 0) << i;
  raw.release(q);
}

TEST(CachingAllocator, DifferentSizeClassesDoNotShareBlocks) {
  CountingBacking backing;
  CachingAllocator cache(backing.raw(), memset_zero());
  void* small = cache.allocate(512);
  cache.release(small);
  void* bigger = cache.allocate(1024);  // class 1024: the cached 512-byte block does not fit
  EXPECT_NE(bigger, small);
  void* large = cache.allocate(3 * kMiB);
  cache.release(large);
  void* larger = cache.allocate(5 * kMiB);  // class 6 MiB, not 4 MiB
  EXPECT_NE(larger, large);
  EXPECT_EQ(backing.allocs(), 4u);
  const CacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.cached_bytes, 512u + 4 * kMiB);
  cache.release(bigger);
  cache.release(larger);
}

TEST(CachingAllocator, BackingOutOfMemoryEmptiesTheCacheAndRetries) {
  for (bool null : {false, true}) {
    SCOPED_TRACE(null ? "backing returns null" : "backing throws OutOfMemory");
    CountingBacking backing(4 * kMiB, null);
    CachingAllocator cache(backing.raw(), memset_zero());
    cache.release(cache.allocate(2 * kMiB));  // 2 MiB cached
    void* p = cache.allocate(3 * kMiB);       // 4 MiB: fits only once the cache is emptied
    ASSERT_NE(p, nullptr);
    const CacheStats s = cache.stats();
    EXPECT_EQ(s.backing_frees, 1u);
    EXPECT_EQ(s.cached_bytes, 0u);
    EXPECT_EQ(s.reserved_bytes, 4 * kMiB);
    EXPECT_EQ(s.allocated_bytes, 4 * kMiB);
    EXPECT_EQ(s.misses, 2u);
    EXPECT_EQ(backing.live_bytes(), 4 * kMiB);
    cache.release(p);
  }
}

TEST(CachingAllocator, FailureEvenAfterEmptyingThrowsOutOfMemory) {
  for (bool null : {false, true}) {
    SCOPED_TRACE(null ? "backing returns null" : "backing throws OutOfMemory");
    CountingBacking backing(4 * kMiB, null);
    CachingAllocator cache(backing.raw(), memset_zero());
    void* live = cache.allocate(2 * kMiB);
    cache.release(cache.allocate(1000));  // 1024 B cached
    try {
      cache.allocate(3 * kMiB);
      FAIL() << "expected OutOfMemory";
    } catch (const OutOfMemory& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("requested 3145728 bytes"), std::string::npos) << msg;
      EXPECT_NE(msg.find("2097152 bytes reserved"), std::string::npos) << msg;
      EXPECT_NE(msg.find("cache was emptied"), std::string::npos) << msg;
    }
    const CacheStats s = cache.stats();
    EXPECT_EQ(s.cached_bytes, 0u);
    EXPECT_EQ(s.backing_frees, 1u);
    EXPECT_EQ(s.reserved_bytes, 2 * kMiB);
    EXPECT_EQ(s.allocated_bytes, 2 * kMiB);
    EXPECT_EQ(backing.live_bytes(), 2 * kMiB);
    cache.release(live);
  }
}

TEST(CachingAllocator, StatsFollowASequence) {
  CountingBacking backing;
  CachingAllocator cache(backing.raw(), memset_zero());
  void* a = cache.allocate(1000);      // 1024
  void* b = cache.allocate(3 * kMiB);  // 4 MiB
  CacheStats s = cache.stats();
  EXPECT_EQ(s.allocated_bytes, 1024 + 4 * kMiB);
  EXPECT_EQ(s.reserved_bytes, 1024 + 4 * kMiB);
  EXPECT_EQ(s.peak_reserved_bytes, 1024 + 4 * kMiB);
  EXPECT_EQ(s.cached_bytes, 0u);

  cache.release(b);
  s = cache.stats();
  EXPECT_EQ(s.allocated_bytes, 1024u);
  EXPECT_EQ(s.reserved_bytes, 1024 + 4 * kMiB);  // still held from the backing allocator
  EXPECT_EQ(s.cached_bytes, 4 * kMiB);

  cache.empty_cache();
  s = cache.stats();
  EXPECT_EQ(s.reserved_bytes, 1024u);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.peak_reserved_bytes, 1024 + 4 * kMiB);  // the peak survives until reset_peak
  EXPECT_EQ(s.backing_frees, 1u);

  cache.reset_peak();
  EXPECT_EQ(cache.stats().peak_reserved_bytes, 1024u);
  void* c = cache.allocate(600);  // 1024: a new block, the peak follows
  EXPECT_EQ(cache.stats().peak_reserved_bytes, 2048u);
  cache.release(a);
  cache.release(c);
  s = cache.stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, 2048u);
  EXPECT_EQ(s.cached_bytes, 2048u);
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.hits, 0u);
}

TEST(CachingAllocator, EmptyCacheReturnsEveryFreeBlockToTheBacking) {
  CountingBacking backing;
  CachingAllocator cache(backing.raw(), memset_zero());
  std::vector<void*> blocks;
  for (size_t bytes : {size_t(100), size_t(100), size_t(5000), 3 * kMiB})
    blocks.push_back(cache.allocate(bytes));
  void* kept = cache.allocate(700);
  for (void* p : blocks) cache.release(p);
  cache.empty_cache();
  EXPECT_EQ(backing.releases(), 4u);
  EXPECT_EQ(backing.live_bytes(), 1024u);  // only the live block remains
  EXPECT_EQ(cache.stats().backing_frees, 4u);
  cache.release(kept);
}

TEST(CachingAllocator, DestructorReturnsCachedBlocksButNotLiveOnes) {
  CountingBacking backing;
  RawAllocator backing_raw = backing.raw();
  void* live = nullptr;
  {
    CachingAllocator cache(backing_raw, memset_zero());
    live = cache.allocate(3000);  // 3072
    cache.release(cache.allocate(kMiB));
  }
  EXPECT_EQ(backing.live_bytes(), 3072u);  // the owner of `live` still has it
  backing_raw.release(live);
}

TEST(CachingAllocatorDeathTest, ReleasingAPointerThatIsNotALiveBlockAborts) {
  CountingBacking backing;
  CachingAllocator cache(backing.raw(), memset_zero());
  int foreign = 0;
  EXPECT_DEATH(cache.release(&foreign), "not a live block");
  void* p = cache.allocate(64);
  cache.release(p);
  EXPECT_DEATH(cache.release(p), "not a live block");  // a double free
}

TEST(CachingAllocator, TrackerOnTopCountsLogicalBytesWhileTheCacheReservesRounded) {
  CountingBacking backing;
  CachingAllocator cache(backing.raw(), memset_zero());
  MemoryTracker tracker(cache.as_raw());
  {
    TrackedBuffer<float> a(tracker, MemCategory::kParams, 100);  // 400 B -> 512
    EXPECT_EQ(tracker.current_total(), 400u);
    EXPECT_EQ(cache.stats().allocated_bytes, 512u);
    for (size_t i = 0; i < a.size(); ++i) a[i] = 1.0f;
  }
  EXPECT_EQ(tracker.current_total(), 0u);
  EXPECT_EQ(cache.stats().cached_bytes, 512u);
  {
    TrackedBuffer<float> g(tracker, MemCategory::kGrads, 120);  // 480 B: the same block
    EXPECT_EQ(tracker.current(MemCategory::kGrads), 480u);
    EXPECT_EQ(tracker.peak_total(), 480u);
    for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], 0.0f) << i;
    TrackedBuffer<uint8_t> w(tracker, MemCategory::kWorkspace, 3 * kMiB);
    EXPECT_EQ(tracker.current_total(), 480 + 3 * kMiB);
    const CacheStats s = cache.stats();
    EXPECT_EQ(s.allocated_bytes, 512 + 4 * kMiB);
    EXPECT_EQ(s.hits, 1u);
  }
  EXPECT_EQ(tracker.current_total(), 0u);
  EXPECT_EQ(cache.stats().reserved_bytes, 512 + 4 * kMiB);
  EXPECT_EQ(backing.allocs(), 2u);
}

TEST(CachingAllocator, TwoThreadsAllocatingAndReleasingKeepStatsConsistent) {
  CountingBacking backing;
  CachingAllocator cache(backing.raw(), memset_zero());
  constexpr int kIterations = 3000;
  const size_t sizes[] = {100, 512, 700, 4096, 70000, kMiB + 5};
  auto worker = [&](unsigned char tag) {
    std::vector<std::pair<unsigned char*, size_t>> held;
    for (int i = 0; i < kIterations; ++i) {
      const size_t bytes = sizes[(i * 7 + tag) % 6];
      auto* p = static_cast<unsigned char*>(cache.allocate(bytes));
      ASSERT_EQ(p[0], 0);
      ASSERT_EQ(p[bytes - 1], 0);
      std::memset(p, tag, bytes);  // a block handed to both threads at once would be caught
      held.emplace_back(p, bytes);
      if (held.size() > 3 || i % 5 == 0) {
        auto [q, n] = held.front();
        ASSERT_EQ(q[0], tag);
        ASSERT_EQ(q[n - 1], tag);
        cache.release(q);
        held.erase(held.begin());
      }
    }
    for (auto [q, n] : held) cache.release(q);
  };
  std::thread t1(worker, 1), t2(worker, 2);
  t1.join();
  t2.join();
  const CacheStats s = cache.stats();
  EXPECT_EQ(s.hits + s.misses, 2u * kIterations);
  EXPECT_EQ(s.misses, backing.allocs());
  EXPECT_GT(s.hits, s.misses);
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.cached_bytes, s.reserved_bytes);
  EXPECT_EQ(s.reserved_bytes, backing.live_bytes());
  EXPECT_LE(s.reserved_bytes, s.peak_reserved_bytes);
  cache.empty_cache();
  EXPECT_EQ(backing.live_bytes(), 0u);
  EXPECT_EQ(backing.releases(), backing.allocs());
}

}  // namespace
}  // namespace sb
