// prefaulted_host_allocator (caching_allocator.h): mmap for large blocks, the sizes kept here
// because munmap needs them and RawAllocator::release has only the pointer.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "harness/memory/caching_allocator.h"

namespace sb {
namespace {

struct Mappings {
  std::mutex mu;
  std::unordered_map<void*, size_t> size;  // mapped block -> its length
};

}  // namespace

RawAllocator prefaulted_host_allocator() {
  auto maps = std::make_shared<Mappings>();
  RawAllocator a;
  a.allocate = [maps](size_t bytes) -> void* {
    const size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded < kMapSize) {
      void* p = std::aligned_alloc(64, rounded);
      if (p != nullptr) std::memset(p, 0, rounded);  // touch the pages: RSS sees what we count
      return p;
    }
    // Anonymous pages are zero; MAP_POPULATE faults them all in now, not in a measured step.
    void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    std::lock_guard<std::mutex> lock(maps->mu);
    maps->size.emplace(p, rounded);
    return p;
  };
  a.release = [maps](void* p) {
    if (p == nullptr) return;
    std::unique_lock<std::mutex> lock(maps->mu);
    auto it = maps->size.find(p);
    if (it == maps->size.end()) {
      lock.unlock();
      std::free(p);
      return;
    }
    const size_t len = it->second;
    maps->size.erase(it);
    lock.unlock();
    munmap(p, len);
  };
  return a;
}

}  // namespace sb
