// Activation memory per mode, against derivations written here from the models' buffer lists
// (not from the predictor's activation_terms.h): --activation-checkpointing op (torchtitan's
// per-op selective AC) and --cross-entropy full|chunked, each in fp32 and bf16-mixed, on the
// GPT-2 and the Llama block. Also: op checkpointing's gradients are bitwise those without it,
// the chunked loss agrees with the full one, the predictor's GPU-only memory categories (CUDA
// context, NCCL buffers, caching-allocator margin) and the allocator model's size classes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "harness/model/checkpointing.h"
#include "harness/model/gpt.h"
#include "harness/model/llama_layout.h"
#include "harness/predict/predict.h"
#include "harness/predict/sim_device.h"
#include "tests/unit/model_test_util.h"

namespace sb::testing {
namespace {

std::string label(const GptConfig& c, bool bf16) {
  return std::string(arch_name(c.arch)) + " " + activation_checkpointing_name(c.checkpoint_every) +
         " " + cross_entropy_name(c.cross_entropy) + (bf16 ? " bf16" : " fp32");
}

using Step = TwoSteps;

Step train_step(const GptConfig& c, bool bf16, int batch = 2) {
  return two_steps(c, bf16, batch);
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// op recomputes the ops it does not keep from the block input and the kept outputs, with the
// same kernels on the same values: every gradient bit for bit, the loss too, and less memory.
TEST(OpCheckpointing, GradientsAreBitwiseThoseWithoutAndMemoryIsBelow) {
  for (GptConfig c : {gpt4(), llama4()})
    for (AttentionKind att : {AttentionKind::kNaive, AttentionKind::kFused})
      for (bool bf16 : {false, true}) {
        c.attention = att;
        c.checkpoint_every = 0;
        const Step ref = train_step(c, bf16);
        c.checkpoint_every = kCheckpointOp;
        const Step op = train_step(c, bf16);
        const std::string at = label(c, bf16) + " " + attention_name(att);
        EXPECT_EQ(std::memcmp(&op.loss, &ref.loss, sizeof(float)), 0) << at;
        ASSERT_EQ(op.grads.size(), ref.grads.size());
        for (size_t t = 0; t < ref.grads.size(); ++t)
          EXPECT_EQ(std::memcmp(op.grads[t].data(), ref.grads[t].data(),
                                ref.grads[t].size() * sizeof(float)),
                    0)
              << at << " tensor " << t;
        EXPECT_LT(op.activation_bytes, ref.activation_bytes) << at;
      }
}

// What op frees per layer beyond the one shared slot, from gpt.cc's and llama.cc's buffer
// lists: everything per layer but residual3, what op keeps (GPT-2 qkv 3C, atty C, fc 4C; Llama
// qkv 3C, atty C, w1|w3 2F) and attention's saved floats. So none - op = (L - 1) x
//   GPT-2: fp32 residual2 B*T*C + 4 LayerNorm statistics B*T, and ln1, attn.proj, ln2, GELU
//          and fc_proj (8*B*T*C) at 4 bytes, 2 under bf16-mixed;
//   Llama: fp32 residual2 B*T*C + 2 rstd B*T, and the two norms' outputs and SwiGLU's
//          (B*T*(2C + F)) at 4 bytes, 2 under bf16-mixed.
// And block - op = L x what op keeps (minus the one slot block already has): the kept tensors
// over L layers against one slot's, plus attention's floats (L - 1) x A.
TEST(OpCheckpointing, ActivationBytesMatchTheTrackerAndThePerLayerDerivation) {
  for (GptConfig c : {gpt4(), llama4(), parse_model("tiny"), parse_model("llama-tiny-pad")})
    for (AttentionKind att : {AttentionKind::kNaive, AttentionKind::kFused})
      for (bool bf16 : {false, true}) {
        c.attention = att;
        const uint64_t B = 3, T = c.seq_len, C = c.n_embd, H = c.n_head, L = c.n_layer,
                       F = c.ffn_hidden, BT = B * T;
        const uint64_t A = att == AttentionKind::kFused ? B * H * T : B * H * T * T;
        const uint64_t w = bf16 ? 2 : 4;
        const bool llama = c.arch == ArchKind::kLlama;
        const uint64_t freed = llama ? 4 * (BT * C + 2 * BT) + w * BT * (2 * C + F)
                                     : 4 * (BT * C + 4 * BT) + w * 8 * BT * C;
        const uint64_t kept = w * BT * (llama ? 4 * C + 2 * F : 8 * C);
        c.checkpoint_every = 0;
        const uint64_t none = train_step(c, bf16, int(B)).activation_bytes;
        c.checkpoint_every = 1;
        const uint64_t block = train_step(c, bf16, int(B)).activation_bytes;
        c.checkpoint_every = kCheckpointOp;
        const uint64_t op = train_step(c, bf16, int(B)).activation_bytes;
        const std::string at = label(c, bf16) + " " + attention_name(att);
        EXPECT_EQ(op, activation_bytes(c, int(B), bf16)) << at;
        EXPECT_EQ(none - op, (L - 1) * freed) << at;
        EXPECT_EQ(op - block, (L - 1) * (kept + 4 * A)) << at;
      }
}

// The recompute's FLOPs under op: the forward of the matmuls it does not keep, from the layout
// (attn.proj and fc_proj; Llama wo and w2: the second and fourth matmul of each block), 2 per
// weight element per token.
TEST(OpCheckpointing, RecomputeFlopsAreTheUnsavedMatmulsForward) {
  for (GptConfig c : {parse_model("small"), parse_model("llama2-7b")}) {
    c.checkpoint_every = kCheckpointOp;
    const ModelLayout l = make_layout(c);
    const int per_block = c.arch == ArchKind::kLlama ? kLlamaModulesPerBlock : 6;
    uint64_t weights = 0;
    for (int b = 0; b < c.n_layer; ++b)
      for (int m : {2, 5}) {  // GPT-2 attn.proj, fc_proj; Llama wo, w2 (the module order)
        const LeafModule& mod = l.modules[size_t(1 + per_block * b + m)];
        ASSERT_EQ(int(mod.kind), int(ModuleKind::kLinear)) << mod.name;
        weights += l.tensors[size_t(mod.tensors[0])].numel;
      }
    const uint64_t tokens = 4 * uint64_t(c.seq_len);
    EXPECT_DOUBLE_EQ(recompute_flops_per_step(c, tokens), 2.0 * double(weights) * double(tokens))
        << c.name;
  }
  EXPECT_EQ(parse_activation_checkpointing("op", 4), kCheckpointOp);
  EXPECT_EQ(activation_checkpointing_name(kCheckpointOp), "op");
}

// The loss's storage per mode, from model_glue.cc's DecoderEnds (R = ceil(B*T / 8) rows):
//   full fp32 8*B*T*V (logits, probabilities); full bf16 + 2*B*T*V (the bf16 logits);
//   chunked fp32 4*B*T*V + 4*R*V; chunked bf16 2*B*T*V + 8*R*V.
// Everything else is the same, so full - chunked is the difference of these.
TEST(CrossEntropy, ActivationBytesPerModeMatchTheTrackerAndTheLossDerivation) {
  for (GptConfig c : {gpt4(), llama4(), parse_model("tiny")})
    for (int ac : {0, 1, kCheckpointOp})
      for (bool bf16 : {false, true})
        for (int B : {1, 3}) {
          c.checkpoint_every = ac;
          const uint64_t BTV = uint64_t(B) * c.seq_len * c.vocab;
          const uint64_t RV = (uint64_t(B) * c.seq_len + 7) / 8 * c.vocab;
          c.cross_entropy = CrossEntropyKind::kFull;
          const uint64_t full = train_step(c, bf16, B).activation_bytes;
          EXPECT_EQ(full, activation_bytes(c, B, bf16)) << label(c, bf16);
          c.cross_entropy = CrossEntropyKind::kChunked;
          const uint64_t chunked = train_step(c, bf16, B).activation_bytes;
          EXPECT_EQ(chunked, activation_bytes(c, B, bf16)) << label(c, bf16);
          const uint64_t loss_full = bf16 ? 10 * BTV : 8 * BTV;
          const uint64_t loss_chunked = bf16 ? 2 * BTV + 8 * RV : 4 * BTV + 4 * RV;
          EXPECT_EQ(full - chunked, loss_full - loss_chunked) << label(c, bf16) << " B " << B;
        }
}

// The chunked loss is the same mean cross-entropy and the same gradients: in fp32 up to the
// summation order of the loss (gradients from the same per-row kernels), under bf16-mixed
// within the rounding of d loss / d logits to bf16 (kept in the logits' bf16 storage).
TEST(CrossEntropy, ChunkedAgreesWithFull) {
  for (GptConfig c : {gpt4(), llama4()})
    for (bool bf16 : {false, true}) {
      c.cross_entropy = CrossEntropyKind::kFull;
      const Step full = train_step(c, bf16, 3);
      c.cross_entropy = CrossEntropyKind::kChunked;
      const Step chunked = train_step(c, bf16, 3);
      EXPECT_NEAR(chunked.loss, full.loss, 1e-5 * std::abs(full.loss)) << label(c, bf16);
      for (size_t t = 0; t < full.grads.size(); ++t)
        EXPECT_LT(rel_diff(chunked.grads[t], full.grads[t]), bf16 ? 2e-2 : 1e-5)
            << label(c, bf16) << " tensor " << t;
      EXPECT_LT(chunked.activation_bytes, full.activation_bytes) << label(c, bf16);
    }
  EXPECT_EQ(parse_cross_entropy("chunked"), CrossEntropyKind::kChunked);
  try {
    parse_cross_entropy("fused");
    ADD_FAILURE() << "fused accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--cross-entropy"), std::string::npos);
  }
}

// The caching allocator's size classes: 512-byte blocks, small requests packed in 2 MiB
// segments, 1-10 MiB ones in 20 MiB segments, larger ones rounded up to 2 MiB each.
TEST(AllocatorModel, ReservesByPyTorchSizeClasses) {
  const uint64_t MiB = 1 << 20;
  AllocatorModel m;
  m.add(100, +1);  // 512 B of a 2 MiB segment
  EXPECT_EQ(m.reserved(), 2 * MiB);
  m.add(3 * MiB, +1);  // a 20 MiB segment
  EXPECT_EQ(m.reserved(), 22 * MiB);
  m.add(11 * MiB + 1, +1);  // its own segment, 12 MiB
  EXPECT_EQ(m.reserved(), 34 * MiB);
  EXPECT_EQ(m.margin(), 34 * MiB - (100 + 3 * MiB + 11 * MiB + 1));
  m.add(11 * MiB + 1, -1);
  EXPECT_EQ(m.reserved(), 22 * MiB);
  EXPECT_EQ(m.peak_reserved, 34 * MiB);
}

// GPU clusters carry the CUDA context, NCCL buffers (4 MiB x channels x 2 ring peers per
// communicator with traffic) and the allocator margin on top of the tracker's peak, and fits
// compares that sum; CPU clusters carry none of them.
TEST(RuntimeMemory, GpuClustersAddContextNcclAndAllocatorMargin) {
  PredictConfig cfg;
  cfg.model = model_shape(parse_model("small"));
  cfg.world = 4;
  cfg.ranks_per_node = 2;
  for (const char* cluster : {"dgx-a100-80g", "cpu-local"}) {
    const Cluster cl = load_cluster(cluster);
    for (const char* s : {"ddp", "fsdp_hybrid_shard"}) {
      const Prediction p = predict(cfg, s, cl);
      const std::string at = std::string(cluster) + " " + s;
      if (cl.host_cores > 0) {
        EXPECT_EQ(p.device_peak, p.peak) << at;
        EXPECT_EQ(p.cuda_context + p.nccl_buffers + p.allocator_margin, 0u) << at;
        continue;
      }
      EXPECT_EQ(p.communicators, std::string(s) == "ddp" ? 1 : 2) << at;
      EXPECT_EQ(p.nccl_buffers, uint64_t(4 << 20) * 16 * 2 * uint64_t(p.communicators)) << at;
      EXPECT_EQ(p.cuda_context, uint64_t(500) << 20) << at;
      EXPECT_GT(p.allocator_margin, 0u) << at;
      EXPECT_EQ(p.device_peak, p.peak + p.cuda_context + p.nccl_buffers + p.allocator_margin)
          << at;
    }
  }
}

}  // namespace
}  // namespace sb::testing
