// Per-parameter shards of one parameter group, for FSDP2 and MiCS per unit (strategies/param_groups.h): each
// tensor is chunked over S ranks and padded on its own — dim 0 padded to S rows (FSDP2's
// torch.chunk) or the flat tensor padded to S (DeepSpeed's partitions) — and a rank's chunks
// back to back form its flat shard. A gathered buffer holds the S shards one after another; the
// unsharded buffer holds each tensor whole. Layout and the copies between the two; no storage.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/device/device.h"
#include "harness/model/flat_layout.h"

namespace sb {

struct ParamShard {
  int tensor = 0;
  uint64_t chunk = 0;      // elements per rank
  uint64_t shard_off = 0;  // in a rank's flat shard
  uint64_t full_off = 0;   // in the unsharded buffer; rank r's chunk at full_off + r * chunk
  FlatLayout flat;         // the tensor alone, padded to S chunks (an optimizer's view of it)
};

struct ParamShards {
  std::vector<ParamShard> params;
  uint64_t chunk_total = 0;  // elements of one rank's shard
  uint64_t shards = 1;

  static ParamShards build(const ModelLayout& model, const std::vector<int>& tensors, int shards,
                           bool pad_rows);
  uint64_t padded() const { return chunk_total * shards; }
  const ParamShard& find(int tensor) const;
  // Copies blocks [first, first + n) of a gathered buffer (`gathered`, block b = the shard of
  // rank rank_of(b)) to the unsharded buffer (`full`) when to_full, else the other way.
  // node_size > 0: blocks in the two-level gather's order (node-local index outer).
  void copy(Device& device, void* full, void* gathered, size_t elem_bytes, uint64_t first,
            uint64_t n, bool to_full, uint64_t node_size = 0) const;
  // Block b's rank after an all-gather across nodes then inside them: l·(S/G) + j holds the
  // shard of rank j·G + l (G = node_size).
  uint64_t rank_of(uint64_t b, uint64_t node_size) const;
};

}  // namespace sb
