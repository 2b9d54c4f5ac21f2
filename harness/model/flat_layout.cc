// Flat layout construction and range initialisation.
#include "harness/model/flat_layout.h"

#include <algorithm>

#include "harness/common/check.h"

namespace sb {

FlatLayout FlatLayout::build(const ModelLayout& model, const std::vector<int>& tensors,
                             uint64_t pad_multiple, uint64_t align) {
  SB_CHECK(pad_multiple >= 1 && align >= 1, "pad multiple and alignment must be positive");
  FlatLayout f;
  for (int t : tensors) {
    f.numel = (f.numel + align - 1) / align * align;
    f.slots.push_back({t, f.numel, model.tensors[t].numel});
    f.numel += model.tensors[t].numel;
  }
  f.padded = (f.numel + pad_multiple - 1) / pad_multiple * pad_multiple;
  return f;
}

const FlatSlot* FlatLayout::find(int tensor) const {
  for (const FlatSlot& s : slots)
    if (s.tensor == tensor) return &s;
  return nullptr;
}

void init_flat_range(const ModelLayout& model, const FlatLayout& flat, uint64_t begin,
                     uint64_t end, uint64_t seed, float* out) {
  std::fill(out, out + (end - begin), 0.0f);
  flat.for_each_segment(begin, end, [&](int t, uint64_t toff, uint64_t foff, uint64_t len) {
    init_tensor_range(model, t, toff, len, seed, out + (foff - begin));
  });
}

}  // namespace sb
