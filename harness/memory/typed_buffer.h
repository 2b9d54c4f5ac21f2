// A tracked buffer whose element type is chosen at run time (fp32 or bf16): parameters and
// gradients are stored in the run's precision, so one strategy serves both.
#pragma once

#include "harness/common/dtype.h"
#include "harness/memory/tracker.h"

namespace sb {

class TypedBuffer {
 public:
  TypedBuffer() = default;
  TypedBuffer(MemoryTracker& t, MemCategory c, DType d, size_t n)
      : dtype_(d), count_(n), raw_(t, c, n * dtype_bytes(d)) {}
  void* data() { return raw_.data(); }
  const void* data() const { return raw_.data(); }
  void* at(size_t elem) { return raw_.data() + elem * dtype_bytes(dtype_); }
  const void* at(size_t elem) const { return raw_.data() + elem * dtype_bytes(dtype_); }
  DType dtype() const { return dtype_; }
  size_t size() const { return count_; }
  size_t bytes() const { return raw_.bytes(); }
  bool empty() const { return raw_.empty(); }
  void reset() { raw_.reset(); count_ = 0; }

 private:
  DType dtype_ = DType::kF32;
  size_t count_ = 0;
  TrackedBuffer<uint8_t> raw_;
};

}  // namespace sb
