// Flat parameters: a set of tensors laid out back to back in one contiguous buffer, padded to a
// multiple of the shard count, so sharding is an offset and a length (FSDP's FlatParameter,
// DeepSpeed's flattened partitions). Padding is reported, never hidden. Holds no storage.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/model/layout.h"

namespace sb {

struct FlatSlot {
  int tensor = 0;
  uint64_t offset = 0;  // first element of the tensor in the flat buffer
  uint64_t numel = 0;
};

struct FlatLayout {
  std::vector<FlatSlot> slots;
  uint64_t numel = 0;   // the tensors and the alignment padding between them
  uint64_t padded = 0;  // numel rounded up to a multiple of the shard count

  // align > 1: each tensor starts at a multiple of `align` elements, padding before it
  // (FSDP's use_orig_params: 16-byte addresses).
  static FlatLayout build(const ModelLayout& model, const std::vector<int>& tensors,
                          uint64_t pad_multiple, uint64_t align = 1);
  uint64_t shard_size(int shards) const { return padded / uint64_t(shards); }
  const FlatSlot* find(int tensor) const;

  // Calls fn(tensor, tensor_offset, flat_offset, len) for each piece of a tensor inside
  // [begin, end); padding is skipped.
  template <class F>
  void for_each_segment(uint64_t begin, uint64_t end, F&& fn) const {
    for (const FlatSlot& s : slots) {
      uint64_t lo = s.offset > begin ? s.offset : begin;
      uint64_t hi = s.offset + s.numel < end ? s.offset + s.numel : end;
      if (lo < hi) fn(s.tensor, lo - s.offset, lo, hi - lo);
    }
  }
};

// Host fp32 initial values of flat elements [begin, end) (padding = 0).
void init_flat_range(const ModelLayout& model, const FlatLayout& flat, uint64_t begin,
                     uint64_t end, uint64_t seed, float* out);

}  // namespace sb
