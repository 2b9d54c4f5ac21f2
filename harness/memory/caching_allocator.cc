// Free lists, the OOM retry and the counters; the bytes come from the backing RawAllocator.
#include "harness/memory/caching_allocator.h"

#include <limits>
#include <sstream>
#include <string>
#include <utility>

#include "harness/common/check.h"

namespace sb {

size_t CachingAllocator::round_size(size_t bytes) {
  const size_t unit = bytes < kSmallSize ? kSmallRound : kLargeRound;
  if (bytes > std::numeric_limits<size_t>::max() - unit) {
    throw OutOfMemory("caching allocator: request of " + std::to_string(bytes) +
                      " bytes cannot be rounded up");
  }
  return (bytes + unit - 1) / unit * unit;
}

CachingAllocator::CachingAllocator(RawAllocator backing,
                                   std::function<void(void*, size_t)> zero_fill)
    : backing_(std::move(backing)), zero_fill_(std::move(zero_fill)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  empty_cache_locked();
}

void* CachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t rounded = round_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);

  auto it = free_.find(rounded);
  if (it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    zero_fill_(p, bytes);  // before the pop: if it throws, the block stays cached
    it->second.pop_back();
    live_.emplace(p, rounded);
    stats_.cached_bytes -= rounded;
    stats_.allocated_bytes += rounded;
    ++stats_.hits;
    return p;
  }

  // A miss: ask the backing allocator; on failure give back every cached block and retry once.
  std::string backing_error;
  auto try_backing = [&]() -> void* {
    backing_error = "returned null";
    try {
      return backing_.allocate(rounded);
    } catch (const OutOfMemory& e) {
      backing_error = e.what();
      return nullptr;
    }
  };
  void* p = try_backing();
  if (p == nullptr) {
    const uint64_t returned = empty_cache_locked();
    if (returned > 0) p = try_backing();
    if (p == nullptr) {
      std::ostringstream os;
      os << "out of memory: caching allocator requested " << bytes << " bytes (rounded to "
         << rounded << "); " << stats_.reserved_bytes << " bytes reserved ("
         << stats_.allocated_bytes << " in live blocks) after the cache was emptied (" << returned
         << " bytes returned to the backing allocator); backing allocator: " << backing_error;
      throw OutOfMemory(os.str());
    }
  }
  live_.emplace(p, rounded);
  stats_.allocated_bytes += rounded;
  stats_.reserved_bytes += rounded;
  if (stats_.reserved_bytes > stats_.peak_reserved_bytes) {
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
  }
  ++stats_.misses;
  return p;
}

void CachingAllocator::release(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  // A double free or a foreign pointer: called from destructors, so abort rather than throw.
  SB_CHECK(it != live_.end(),
           "caching allocator: release of " << p << ", which is not a live block of this cache");
  const size_t rounded = it->second;
  live_.erase(it);
  free_[rounded].push_back(p);
  stats_.allocated_bytes -= rounded;
  stats_.cached_bytes += rounded;
}

RawAllocator CachingAllocator::as_raw() {
  RawAllocator raw;
  raw.allocate = [this](size_t bytes) { return allocate(bytes); };
  raw.release = [this](void* p) { release(p); };
  return raw;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  empty_cache_locked();
}

uint64_t CachingAllocator::empty_cache_locked() {
  uint64_t returned = 0;
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) {
      backing_.release(p);
      returned += size;
      ++stats_.backing_frees;
    }
  }
  free_.clear();
  stats_.cached_bytes -= returned;
  stats_.reserved_bytes -= returned;
  return returned;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

CacheStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace sb
