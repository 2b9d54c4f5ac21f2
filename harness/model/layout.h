// The workload's parameters as the strategies see them: named tensors grouped into leaf
// modules (embedding, each layernorm, each linear, the LM head) and segments (embedding,
// block i, head). Also the deterministic initialisation, addressable by element range so any
// shard can be initialised without materialising the whole model. No storage lives here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/model/config.h"

namespace sb {

enum class ModuleKind { kEmbedding, kLayerNorm, kLinear, kLmHead, kRmsNorm };
enum class InitKind { kNormal, kNormalResidual, kZeros, kOnes };

struct ParamTensor {
  std::string name;          // e.g. "h.3.attn.qkv.weight"
  uint64_t numel = 0;
  std::vector<int64_t> shape;  // row-major; linear weights are [out, in]; never empty (a bare
                               // --params count is one 1-D tensor of more than 2^31 elements)
  int segment = 0;           // 0 = embedding, 1..L = block, L+1 = head
  bool decay = false;        // AdamW weight decay applies (matrices and embeddings, as GPT-2)
  InitKind init = InitKind::kZeros;
};

struct LeafModule {
  std::string name;          // e.g. "h.3.attn.qkv"
  ModuleKind kind = ModuleKind::kLinear;
  int segment = 0;
  std::vector<int> tensors;  // indices into ModelLayout::tensors used by this module
};

struct ModelLayout {
  GptConfig config;
  std::vector<ParamTensor> tensors;  // in definition order (embedding, blocks, head)
  std::vector<LeafModule> modules;   // in forward execution order; backward is the reverse
  int num_segments = 0;              // L + 2
  uint64_t num_params() const;
  // For each tensor, the module after whose backward its gradient is complete (the module
  // that uses it and runs last in backward, i.e. the lowest module index).
  std::vector<int> grad_ready_module() const;
  // For each tensor, how many modules use it (2 for a tied token embedding).
  std::vector<int> uses_per_pass() const;
};

ModelLayout make_layout(const GptConfig& c);

// Writes elements [begin, begin+count) of tensor t's initial value (fp32) to out. Deterministic
// in (seed, tensor index, element index) only, so every sharding sees the same initial model.
void init_tensor_range(const ModelLayout& layout, int t, uint64_t begin, uint64_t count,
                       uint64_t seed, float* out);

}  // namespace sb
