// Counting lives here; the raw bytes come from the RawAllocator (host by default).
#include "harness/memory/tracker.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace sb {

const char* category_name(MemCategory c) {
  switch (c) {
    case MemCategory::kParams: return "params";
    case MemCategory::kGatheredParams: return "gathered_params";
    case MemCategory::kGrads: return "grads";
    case MemCategory::kOptimizer: return "optimizer";
    case MemCategory::kActivations: return "activations";
    case MemCategory::kCommBuffers: return "comm_buffers";
    case MemCategory::kWorkspace: return "workspace";
    case MemCategory::kSecondaryParams: return "secondary_params";
  }
  return "?";
}

RawAllocator host_allocator() {
  RawAllocator a;
  a.allocate = [](size_t bytes) -> void* {
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (p != nullptr) std::memset(p, 0, rounded);  // touch the pages: RSS sees what we count
    return p;
  };
  a.release = [](void* p) { std::free(p); };
  return a;
}

MemoryTracker::MemoryTracker(RawAllocator raw) : raw_(std::move(raw)) {}

uint64_t MemoryTracker::held_bytes(Held h, uint64_t bytes) const {
  if (!policy_.bf16) return bytes;
  switch (h) {
    case Held::kAsStored: return bytes;
    case Held::kBf16: return bytes / 2;
    case Held::kStream: return policy_.stream_bf16 ? bytes / 2 : bytes;
    case Held::kNone: return 0;
  }
  return bytes;
}

void* MemoryTracker::allocate(MemCategory c, size_t bytes, uint64_t held) {
  if (limit_ != 0 && current_total_ + bytes > limit_) {
    std::ostringstream os;
    os << "out of memory: allocating " << bytes << " bytes of " << category_name(c)
       << " would exceed the per-rank limit of " << limit_ << " bytes; in use "
       << current_total_ << " bytes (" << format_breakdown(current_) << ")";
    if (!defer_) throw OutOfMemory(os.str());
    if (overflow_.empty()) overflow_ = os.str();
  }
  void* p = raw_.allocate(bytes);
  if (p == nullptr) throw OutOfMemory(std::string("allocator returned null for ") +
                                      std::to_string(bytes) + " bytes of " + category_name(c));
  current_[int(c)] += bytes;
  current_total_ += bytes;
  if (current_[int(c)] > peak_per_category_[int(c)]) peak_per_category_[int(c)] = current_[int(c)];
  if (current_total_ > peak_total_) {
    peak_total_ = current_total_;
    at_peak_ = current_;
  }
  held_current_[int(c)] += held;
  held_current_total_ += held;
  if (held_current_total_ > held_peak_total_) {
    held_peak_total_ = held_current_total_;
    held_at_peak_ = held_current_;
  }
  return p;
}

void MemoryTracker::release(void* p, MemCategory c, size_t bytes, uint64_t held) {
  raw_.release(p);
  current_[int(c)] -= bytes;
  current_total_ -= bytes;
  held_current_[int(c)] -= held;
  held_current_total_ -= held;
}

void MemoryTracker::reset_peak() {
  peak_total_ = current_total_;
  at_peak_ = current_;
  peak_per_category_ = current_;
  held_peak_total_ = held_current_total_;
  held_at_peak_ = held_current_;
}

std::string MemoryTracker::format_breakdown(const MemBreakdown& b) {
  std::ostringstream os;
  for (int i = 0; i < kNumMemCategories; ++i) {
    if (i) os << ", ";
    os << category_name(MemCategory(i)) << "=" << b[i];
  }
  return os.str();
}

uint64_t MemoryTracker::rss_hwm_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      unsigned long long kb = 0;
      std::sscanf(line.c_str() + 6, "%llu", &kb);
      return kb * 1024ull;
    }
  }
  return 0;
}

}  // namespace sb
