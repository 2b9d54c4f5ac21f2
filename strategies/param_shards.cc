// Per-parameter shard layout and its copies (see header).
#include "strategies/param_shards.h"

#include <stdexcept>

namespace sb {

ParamShards ParamShards::build(const ModelLayout& model, const std::vector<int>& tensors,
                               int shards, bool pad_rows) {
  ParamShards s;
  s.shards = uint64_t(shards);
  s.params.reserve(tensors.size());  // optimizers keep a reference to `flat`
  for (int t : tensors) {
    const ParamTensor& p = model.tensors[t];
    // A 0-d tensor has no dim 0 to chunk (torch.chunk refuses one too); every layout gives
    // each tensor its shape, a bare --params count included (model_shape.cc).
    if (p.shape.empty()) throw std::logic_error(p.name + ": a parameter without a shape");
    const uint64_t row = pad_rows ? p.numel / uint64_t(p.shape.front()) : 1;
    ParamShard& P = s.params.emplace_back();
    P.tensor = t;
    P.flat = FlatLayout::build(model, {t}, s.shards * row);
    P.chunk = P.flat.padded / s.shards;
    P.shard_off = s.chunk_total;
    P.full_off = s.chunk_total * s.shards;
    s.chunk_total += P.chunk;
  }
  return s;
}

const ParamShard& ParamShards::find(int tensor) const {
  for (const ParamShard& P : params)
    if (P.tensor == tensor) return P;
  throw std::logic_error("tensor not in its parameter group");
}

uint64_t ParamShards::rank_of(uint64_t b, uint64_t node_size) const {
  if (node_size == 0) return b;
  const uint64_t nodes = shards / node_size;
  return b % nodes * node_size + b / nodes;
}

void ParamShards::copy(Device& device, void* full, void* gathered, size_t elem_bytes,
                       uint64_t first, uint64_t n, bool to_full, uint64_t node_size) const {
  auto* f = static_cast<char*>(full);
  auto* g = static_cast<char*>(gathered);
  for (uint64_t b = 0; b < n; ++b)
    for (const ParamShard& P : params) {
      char* at_full = f + (P.full_off + rank_of(first + b, node_size) * P.chunk) * elem_bytes;
      char* at_gathered = g + (b * chunk_total + P.shard_off) * elem_bytes;
      if (to_full)
        device.copy(at_full, at_gathered, P.chunk * elem_bytes);
      else
        device.copy(at_gathered, at_full, P.chunk * elem_bytes);
    }
}

}  // namespace sb
