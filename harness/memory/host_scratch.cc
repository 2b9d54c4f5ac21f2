// The host scratch cache (see header): a CachingAllocator over prefaulted host blocks that
// does not zero a reused block.
#include "harness/memory/host_scratch.h"

#include "harness/memory/caching_allocator.h"

namespace sb {
namespace {

CachingAllocator& scratch_cache() {
  // Never destroyed: a HostVector in a static or a thread still running at exit may release
  // into it after main returns.
  static CachingAllocator* cache =
      new CachingAllocator(prefaulted_host_allocator(), [](void*, size_t) {});
  return *cache;
}

}  // namespace

void* host_scratch_allocate(size_t bytes) { return scratch_cache().allocate(bytes); }

void host_scratch_release(void* p) { scratch_cache().release(p); }

}  // namespace sb
