// What a bf16-mixed PyTorch / DeepSpeed step holds (tracker.h's Held), beside what this
// implementation holds: the tracker's second ledger against the closed form
// (held_activation_bytes) and against per-layer derivations written here from the models'
// buffer lists; fp32 leaves both ledgers equal; the predictor reports the stack's ledger on a
// GPU cluster and this implementation's on CPU and for a run's own prediction, with model state
// and bytes unchanged.
#include <gtest/gtest.h>

#include <string>

#include "harness/model/checkpointing.h"
#include "harness/model/gpt.h"
#include "harness/predict/predict.h"
#include "tests/unit/model_test_util.h"

namespace sb::testing {
namespace {

struct Ledgers {
  uint64_t bytes = 0, held = 0;
};

// The activations a freshly built model holds in both ledgers.
Ledgers model_activations(const GptConfig& c, int batch, bool bf16, bool stream_bf16) {
  auto dev = make_cpu_device();
  MemoryTracker mem(dev->allocator());
  mem.set_held_policy({bf16, stream_bf16});
  GptModel model(c, batch, *dev, mem, bf16);
  return {mem.current(MemCategory::kActivations), mem.held_current(MemCategory::kActivations)};
}

std::string label(const GptConfig& c, bool bf16, bool stream) {
  return std::string(arch_name(c.arch)) + " " + attention_name(c.attention) + " " +
         activation_checkpointing_name(c.checkpoint_every) + " " +
         cross_entropy_name(c.cross_entropy) + (bf16 ? " bf16" : " fp32") +
         (stream ? " stream-bf16" : " stream-fp32");
}

// Every mode: the tracker's held bytes equal the closed form; fp32 holds the same in both
// ledgers; bf16 holds less in the stack's.
TEST(HeldMemory, TrackerEqualsTheClosedFormInEveryMode) {
  for (GptConfig c : {gpt4(), llama4()})
    for (AttentionKind att : {AttentionKind::kFused, AttentionKind::kNaive})
      for (const char* ac : {"none", "block", "every-2", "op"})
        for (CrossEntropyKind ce : {CrossEntropyKind::kFull, CrossEntropyKind::kChunked})
          for (bool bf16 : {false, true})
            for (bool stream : {false, true}) {
              c.attention = att;
              c.checkpoint_every = parse_activation_checkpointing(ac, c.n_layer);
              c.cross_entropy = ce;
              const std::string at = label(c, bf16, stream);
              const Ledgers h = model_activations(c, 3, bf16, bf16 && stream);
              EXPECT_EQ(h.bytes, activation_bytes(c, 3, bf16)) << at;
              EXPECT_EQ(h.held, held_activation_bytes(c, 3, bf16, bf16 && stream)) << at;
              if (bf16) EXPECT_LT(h.held, h.bytes) << at;
              else EXPECT_EQ(h.held, h.bytes) << at;
            }
}

// Per kept GPT-2 layer and token, derived from gpt.cc's buffers: the stack keeps residual3 and
// residual2 (the stream: 2 bytes each per C when the parameters are bf16), the LayerNorm
// statistics (4 fp32), the 14·C saved bf16 tensors backward reads (ln1, qkv 3, atty, ln2, fch 4,
// fch_gelu 4) and, fused, H log-sum-exps per token; the two projections' outputs (attproj,
// fcproj) only for the layer being computed. So none − block = (L − 1)·(the kept layer less
// residual3).
TEST(HeldMemory, GptKeptLayerIsThirtyTwoBytesPerTokenAndChannelInBf16) {
  GptConfig none = gpt4(), block = gpt4();
  block.checkpoint_every = parse_activation_checkpointing("block", block.n_layer);
  const uint64_t B = 3, T = uint64_t(none.seq_len), C = uint64_t(none.n_embd),
                 H = uint64_t(none.n_head), L = uint64_t(none.n_layer);
  const uint64_t per_layer_but_residual3 = B * T * (2 * C + 4 * 4 + 2 * 14 * C + 4 * H);
  const Ledgers a = model_activations(none, int(B), true, true);
  const Ledgers b = model_activations(block, int(B), true, true);
  EXPECT_EQ(a.held - b.held, (L - 1) * per_layer_but_residual3);
  // With fp32 parameters (DDP's autocast) the stream is fp32: 2 more bytes per C for residual2.
  const Ledgers a32 = model_activations(none, int(B), true, false);
  const Ledgers b32 = model_activations(block, int(B), true, false);
  EXPECT_EQ(a32.held - b32.held, (L - 1) * (per_layer_but_residual3 + B * T * 2 * C));
}

// The predictor: on a GPU cluster under bf16-mixed, the stack's peak (below this
// implementation's, which it still reports; equal under fp32); model state and bytes are the
// same; on CPU and for a run's own prediction, this implementation's.
TEST(HeldMemory, PredictReportsTheStackOnGpuClustersOnly) {
  PredictConfig cfg;
  cfg.model = model_shape(parse_model("small"));
  cfg.world = 4;
  cfg.ranks_per_node = 2;
  cfg.batch_per_rank = 2;
  for (const char* s : {"ddp", "zero2", "zero3", "fsdp_full_shard", "fsdp2"}) {
    for (Precision prec : {Precision::kFp32, Precision::kBf16Mixed}) {
      cfg.options.precision = prec;
      const bool bf16 = prec == Precision::kBf16Mixed;
      const std::string at = std::string(s) + (bf16 ? " bf16" : " fp32");
      const Prediction gpu = predict(cfg, s, load_cluster("dgx-a100-80g"));
      const Prediction cpu = predict(cfg, s, load_cluster("cpu-local"));
      PredictConfig own = cfg;
      own.stack_memory = false;
      const Prediction run = predict(own, s, load_cluster("dgx-a100-80g"));
      EXPECT_EQ(std::string(gpu.memory_of), "stack") << at;
      EXPECT_EQ(std::string(cpu.memory_of), "implementation") << at;
      EXPECT_EQ(std::string(run.memory_of), "implementation") << at;
      EXPECT_EQ(gpu.implementation_peak, run.peak) << at;
      EXPECT_EQ(gpu.state_params + gpu.state_grads + gpu.state_optimizer,
                cpu.state_params + cpu.state_grads + cpu.state_optimizer) << at;
      EXPECT_EQ(gpu.traffic.sent_intra + gpu.traffic.sent_inter,
                cpu.traffic.sent_intra + cpu.traffic.sent_inter) << at;
      if (bf16) {
        EXPECT_LT(gpu.peak, gpu.implementation_peak) << at;
        EXPECT_LT(gpu.activations, run.activations) << at;
      } else {
        EXPECT_EQ(gpu.peak, gpu.implementation_peak) << at;
      }
    }
  }
}

}  // namespace
}  // namespace sb::testing
