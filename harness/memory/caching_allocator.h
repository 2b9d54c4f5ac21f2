// Caching allocator for device memory, after PyTorch's CUDACachingAllocator: cudaFree syncs the
// whole device and would serialise FSDP's per-unit gather/free, so freed blocks are kept per
// rounded size and reused. Wraps any RawAllocator (tested on the host); sits under MemoryTracker.
// No block splitting, no per-stream pools: all device memory is used in order on the one compute
// stream, and the comm stream waits on it and is synchronised before a collective's buffers go.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "harness/memory/tracker.h"

namespace sb {

struct CacheStats {
  uint64_t allocated_bytes = 0;      // live blocks, rounded sizes
  uint64_t reserved_bytes = 0;       // held from the backing allocator: live + cached
  uint64_t peak_reserved_bytes = 0;  // highest reserved_bytes since construction / reset_peak()
  uint64_t cached_bytes = 0;         // free blocks kept for reuse
  uint64_t hits = 0;                 // allocations served from the cache
  uint64_t misses = 0;               // allocations that called the backing allocator
  uint64_t backing_frees = 0;        // blocks returned to the backing allocator
};

class CachingAllocator {
 public:
  // Sizes below kSmallSize round up to kSmallRound, others to kLargeRound: the waste per block
  // is bounded (under 512 B for small blocks, under 2 MiB for large ones), and buffers of
  // slightly different sizes share a size class, so they can reuse each other's blocks.
  static constexpr size_t kSmallSize = size_t(1) << 20;
  static constexpr size_t kSmallRound = 512;
  static constexpr size_t kLargeRound = size_t(2) << 20;
  static size_t round_size(size_t bytes);

  // zero_fill(p, bytes) zeroes a reused block (RawAllocator's contract is zero-filled memory);
  // a fresh block from `backing` must already be zero.
  CachingAllocator(RawAllocator backing, std::function<void(void*, size_t)> zero_fill);
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  ~CachingAllocator();  // returns cached blocks; live blocks stay their owners' to release

  // allocate(0) is nullptr. On OutOfMemory (or nullptr) from the backing allocator, empties the
  // cache and retries once; then throws OutOfMemory.
  void* allocate(size_t bytes);
  // release(nullptr) is a no-op; a pointer that is not a live block of this cache aborts the job.
  void release(void* p);

  // allocate/release through this cache; they capture `this`, so the cache must outlive them.
  RawAllocator as_raw();

  void empty_cache();  // returns every free block to the backing allocator
  void reset_peak();   // peak_reserved_bytes := reserved_bytes
  CacheStats stats() const;

 private:
  uint64_t empty_cache_locked();  // returns the bytes given back

  RawAllocator backing_;
  std::function<void(void*, size_t)> zero_fill_;
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> live_;               // block -> rounded size
  std::unordered_map<size_t, std::vector<void*>> free_;  // rounded size -> free blocks
  CacheStats stats_;
};

// The CPU device's backing for its CachingAllocator: zero-filled host blocks, every page
// faulted in when the block is made (so a block's first use in a step faults nothing). Blocks
// of kMapSize and more are their own mmap(MAP_POPULATE) mapping, unmapped on release: they
// never pass through glibc malloc, whose mmap and trim thresholds move with what was freed
// before (so the matrix's earlier strategies would change where a later one's memory comes
// from). Smaller blocks are aligned_alloc + memset, below glibc's mmap threshold.
RawAllocator prefaulted_host_allocator();
constexpr size_t kMapSize = size_t(128) << 10;  // glibc's default M_MMAP_THRESHOLD

}  // namespace sb
