// Host scratch for the suite's own host-side loops (ZeRO++'s quantiser: its staging copies,
// codes and sums). These vectors are made and dropped per tensor, every step. Through glibc
// malloc, one above its mmap threshold is mapped and unmapped each time, so every step faults
// its pages in again (2,100-3,000 minor faults per step on small's qgZ, which made it 2x
// slower than its prediction). This keeps freed blocks for reuse, prefaulted, as the device's
// CachingAllocator does, and does not zero an element on construction (every use writes each
// element before reading it, or constructs with a value). Not counted by any MemoryTracker:
// this is host memory of the CPU implementation, not the training state a GPU would hold.
#pragma once

#include <cstddef>
#include <new>
#include <utility>
#include <vector>

namespace sb {

// A block of at least `bytes` from the process's scratch cache, 64-byte aligned, its pages
// already faulted in; host_scratch_release gives it back for reuse (never to the system).
void* host_scratch_allocate(size_t bytes);
void host_scratch_release(void* p);

template <class T>
struct HostScratchAllocator {
  using value_type = T;
  HostScratchAllocator() = default;
  template <class U>
  HostScratchAllocator(const HostScratchAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    if (n == 0) return nullptr;
    void* p = host_scratch_allocate(n * sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { host_scratch_release(p); }
  // default-initialise: no zero fill of what the loops overwrite anyway
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <class U>
  bool operator==(const HostScratchAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using HostVector = std::vector<T, HostScratchAllocator<T>>;

}  // namespace sb
