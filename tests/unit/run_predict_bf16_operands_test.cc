// The CUDA device's bf16 operand slots as the predictor models them: bf16_operand_bytes equals
// the largest op(A) and op(B) over every matmul of a step, enumerated here from gpt.cc's calls
// and cuda_device.cu's batching (attention batched over heads per sequence); the prediction
// adds exactly that to a bf16-mixed peak on a GPU cluster and nothing in fp32 or on the CPU
// (this implementation's memory; the stack's ledger, tracker.h's Held, holds no slots).
// (On a GPU, tests/unit/cuda_numerics_test.cc checks the device's slots against this form.)
#include <gtest/gtest.h>

#include <algorithm>

#include "harness/predict/cluster.h"
#include "harness/predict/predict.h"

namespace sb {
namespace {

// Stored size of op(A) [m, k] and op(B) [k, n] for every matmul of one step, batch included.
uint64_t enumerated_slot_bytes(const GptConfig& c, int batch) {
  const uint64_t BT = uint64_t(batch) * c.seq_len, C = c.n_embd, T = c.seq_len, V = c.vocab,
                 NH = c.n_head;
  uint64_t a = 0, b = 0;
  auto call = [&](uint64_t op_a, uint64_t op_b) {
    a = std::max(a, op_a);
    b = std::max(b, op_b);
  };
  // linear layers (in, out): forward x W^T; backward dx = dout W, dW += dout^T x. The Llama
  // block's: wq|wk|wv (C + 2 K/V widths), wo, w1|w3 (2F), w2, the head (llama.cc).
  const uint64_t F = c.ffn_hidden, KVD = uint64_t(c.kv_heads()) * c.head_dim();
  const std::vector<std::pair<uint64_t, uint64_t>> linears =
      c.arch == ArchKind::kLlama
          ? std::vector<std::pair<uint64_t, uint64_t>>{{C, C + 2 * KVD}, {C, C}, {C, 2 * F},
                                                       {F, C}, {C, V}}
          : std::vector<std::pair<uint64_t, uint64_t>>{{C, 3 * C}, {C, C}, {C, 4 * C},
                                                       {4 * C, C}, {C, V}};
  for (auto [in, out] : linears) {
    call(BT * in, out * in);    // forward
    call(BT * out, out * in);   // dx
    call(BT * out, BT * in);    // dW
  }
  // naive attention, per sequence over NH heads: scores Q K^T, out = att V; backward
  // datt = dout V^T, dV = att^T dout, dQ = dS K, dK = dS^T Q. Fused attention is one fp32
  // kernel (no cuBLAS call, no bf16 operands).
  if (c.attention == AttentionKind::kFused) return 2 * (a + b);
  call(T * C, T * C);
  call(NH * T * T, T * C);
  call(T * C, T * C);
  call(NH * T * T, T * C);
  call(NH * T * T, T * C);
  call(NH * T * T, T * C);
  return 2 * (a + b);
}

TEST(Bf16OperandSlots, ClosedFormEqualsTheEnumeratedMatmuls) {
  for (AttentionKind att : {AttentionKind::kNaive, AttentionKind::kFused})
    for (const char* model :
         {"tiny", "small", "gpt2-124m", "gpt2-350m", "llama-tiny", "llama2-7b", "llama2-70b"})
      for (int batch : {1, 4, 16}) {
        GptConfig c = parse_model(model);
        c.attention = att;
        EXPECT_EQ(bf16_operand_bytes(c, batch), enumerated_slot_bytes(c, batch))
            << model << " batch " << batch << " " << attention_name(att);
      }
  // Shapes where the other terms win: long context (NH*T^2) and a wide, short model (4*C^2).
  GptConfig c = parse_model("tiny");
  c.attention = AttentionKind::kNaive;
  c.vocab = 64;
  c.seq_len = 512;
  c.n_head = 8;
  EXPECT_EQ(bf16_operand_bytes(c, 1), enumerated_slot_bytes(c, 1)) << "attention-bound";
  c = parse_model("tiny");
  c.vocab = 64;
  c.seq_len = 4;
  c.n_embd = 512;
  c.n_head = 8;
  EXPECT_EQ(bf16_operand_bytes(c, 1), enumerated_slot_bytes(c, 1)) << "weight-bound";
}

TEST(Bf16OperandSlots, PredictionAddsThemOnlyForBf16MatmulsOnAGpu) {
  PredictConfig cfg;
  cfg.model = model_shape(parse_model("small"));
  cfg.world = 8;
  cfg.ranks_per_node = 8;
  cfg.batch_per_rank = 4;
  const uint64_t slots = bf16_operand_bytes(cfg.model->config, cfg.batch_per_rank);
  Cluster gpu = load_cluster("h200");
  Cluster no_bf16 = gpu;
  no_bf16.bf16_matmul = false;
  // The slots are this implementation's (a CUDA run's own prediction); the stack's cuBLAS
  // calls read bf16 tensors, so a GPU prediction of the stack's memory holds none of them.
  cfg.stack_memory = false;
  for (const char* s : {"ddp", "zero3", "fsdp_full_shard"}) {
    cfg.options.precision = Precision::kBf16Mixed;
    PredictConfig stack = cfg;
    stack.stack_memory = true;
    EXPECT_EQ(predict(stack, s, gpu).peak, predict(stack, s, no_bf16).peak) << s;
    const Prediction with = predict(cfg, s, gpu), without = predict(cfg, s, no_bf16);
    EXPECT_EQ(with.peak, without.peak + slots) << s;
    EXPECT_EQ(with.at_peak[int(MemCategory::kWorkspace)],
              without.at_peak[int(MemCategory::kWorkspace)] + slots)
        << s;
    EXPECT_EQ(predict(cfg, s, load_cluster("cpu-local")).peak, without.peak)
        << s << ": the CPU device keeps fp32 matmuls";
    cfg.options.precision = Precision::kFp32;
    EXPECT_EQ(predict(cfg, s, gpu).peak, predict(cfg, s, no_bf16).peak) << s << " fp32";
  }
}

TEST(Bf16OperandSlots, ClusterFileSaysWhetherTheDeviceHasBf16Matmuls) {
  EXPECT_TRUE(load_cluster("h200").bf16_matmul);
  EXPECT_FALSE(load_cluster("cpu-local").bf16_matmul);
  EXPECT_FALSE(cluster_from_json({{"base", "h200"}, {"bf16_matmul", false}}).bf16_matmul);
  EXPECT_EQ(cluster_json(load_cluster("cpu-local"))["bf16_matmul"], false);
  EXPECT_THROW(cluster_from_json({{"base", "h200"}, {"bf16_matmul", 1}}), std::invalid_argument);
}

}  // namespace
}  // namespace sb
