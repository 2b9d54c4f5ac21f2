// Activation checkpointing in the model: gradients identical to the run without it (the
// recompute is the same forward code on the same inputs, so bitwise), the hooks a recompute
// fires (in step_visits' order, recompute hooks rather than forward ones), the activation
// memory the tracker counts against the closed form and an independent per-layer derivation,
// the knob's parsing, and the recompute FLOPs against the model-FLOP formula's block share —
// for the GPT-2 block and the Llama block (grouped-query: 4 query heads on 2 K/V heads).
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "harness/device/device.h"
#include "harness/model/checkpointing.h"
#include "harness/model/config.h"
#include "harness/model/gpt.h"
#include "harness/predict/model_shape.h"
#include "tests/unit/model_test_util.h"

namespace sb::testing {
namespace {

// The shapes every test runs on: model_test_util.h's gpt4() and llama4().
const char* arch_name(const GptConfig& c) { return c.arch == ArchKind::kLlama ? "llama" : "gpt2"; }

using StepResult = TwoSteps;

// Two steps (model_test_util.h's two_steps) at batch 2 with every-K checkpointing.
StepResult train_step(GptConfig c, int every, bool bf16) {
  c.checkpoint_every = every;
  return two_steps(c, bf16, 2);
}

// The recompute runs block_forward again on the block's kept input with the same parameters,
// in the same order of floating-point operations (the CPU kernels are deterministic, one BLAS
// thread), so every activation it rebuilds — bf16-rounded ones included — is the forward's,
// bit for bit, and so is every gradient. Any tolerance would hide a recompute that read a
// neighbour's slot or a stale input.
TEST(ActivationCheckpointing, GradientsAreBitwiseThoseWithout) {
  for (const GptConfig& shape : {gpt4(), llama4()})
    for (AttentionKind att : {AttentionKind::kNaive, AttentionKind::kFused})
      for (bool bf16 : {false, true}) {
        GptConfig c = shape;
        c.attention = att;
        const StepResult ref = train_step(c, 0, bf16);
        for (int every : {1, 2, 3, 4}) {
          const StepResult ac = train_step(c, every, bf16);
          const std::string at = std::string(arch_name(c)) + " " + attention_name(att) +
                                 (bf16 ? " bf16" : " fp32") + " " +
                                 activation_checkpointing_name(every);
          EXPECT_EQ(std::memcmp(&ac.loss, &ref.loss, sizeof(float)), 0) << at;
          ASSERT_EQ(ac.grads.size(), ref.grads.size());
          for (size_t t = 0; t < ref.grads.size(); ++t)
            EXPECT_EQ(std::memcmp(ac.grads[t].data(), ref.grads[t].data(),
                                  ref.grads[t].size() * sizeof(float)),
                      0)
                << at << " tensor " << t;
          // One checkpointed block (every-3, every-4 of 4) gives up its layer for the slot.
          if (4 / every >= 2) EXPECT_LT(ac.activation_bytes, ref.activation_bytes) << at;
          else EXPECT_EQ(ac.activation_bytes, ref.activation_bytes) << at;
        }
      }
}

// Records every hook in order, as (module, pass).
class VisitRecorder : public FullParams {
 public:
  VisitRecorder(const ModelLayout& l, MemoryTracker& m) : FullParams(l, m) {}
  void pre_forward(int m) override { visits.push_back({m, ModulePass::kForward}); }
  void pre_recompute(int m) override { visits.push_back({m, ModulePass::kRecompute}); }
  void pre_backward(int m) override { visits.push_back({m, ModulePass::kBackward}); }
  void post_forward(int m) override { close(m); }
  void post_recompute(int m) override { close(m); }
  void post_backward(int m) override { close(m); }
  std::vector<ModuleVisit> visits;
  int mismatched_posts = 0;

 private:
  void close(int m) { mismatched_posts += visits.back().module != m; }
};

// Every-2 over 4 blocks checkpoints blocks 1 and 3 (torchtitan's every K-th): their six modules
// are recomputed, in forward order, right before their backward; nothing else is.
TEST(ActivationCheckpointing, RecomputeFiresRecomputeHooksInStepVisitOrder) {
  for (GptConfig c : {gpt4(), llama4()}) {
    SCOPED_TRACE(arch_name(c));
    c.checkpoint_every = 2;
    auto dev = make_cpu_device();
    MemoryTracker mem(dev->allocator());
    GptModel model(c, 1, *dev, mem);
    VisitRecorder hooks(model.layout(), mem);
    std::vector<int> tok(size_t(c.seq_len), 1);
    model.forward(tok.data(), tok.data(), hooks);
    model.backward(hooks);
    const std::vector<ModuleVisit> expected = step_visits(model.layout());
    ASSERT_EQ(hooks.visits.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(hooks.visits[i].module, expected[i].module) << i;
      EXPECT_EQ(int(hooks.visits[i].pass), int(expected[i].pass)) << i;
    }
    EXPECT_EQ(hooks.mismatched_posts, 0);
    // Independently of step_visits: 2 checkpointed blocks x 6 modules recomputed, blocks 1 and 3.
    int recomputed = 0;
    for (const ModuleVisit& v : hooks.visits) {
      if (v.pass != ModulePass::kRecompute) continue;
      ++recomputed;
      const int seg = model.layout().modules[size_t(v.module)].segment;
      EXPECT_TRUE(seg == 2 || seg == 4) << "module " << v.module << " of segment " << seg;
    }
    EXPECT_EQ(recomputed, 12);
  }
}

// For every checkpoint interval of c (none, every-1 .. every-L): the tracker's activation bytes
// after building the model equal activation_bytes(), and each interval saves (n - 1) layers'
// `per_layer` bytes against none, n = L / every checkpointed layers.
void expect_tracked_bytes_and_saving(GptConfig c, uint64_t B, bool bf16, uint64_t per_layer,
                                     const std::string& label) {
  const uint64_t none = activation_bytes(c, int(B), bf16), L = uint64_t(c.n_layer);
  for (int every = 0; every <= int(L); ++every) {
    c.checkpoint_every = every;
    auto dev = make_cpu_device();
    MemoryTracker mem(dev->allocator());
    GptModel model(c, int(B), *dev, mem, bf16);
    const std::string at = label + " " + attention_name(c.attention) +
                           (bf16 ? " bf16 " : " fp32 ") + activation_checkpointing_name(every);
    EXPECT_EQ(mem.current(MemCategory::kActivations), activation_bytes(c, int(B), bf16)) << at;
    const uint64_t n = every == 0 ? 0 : L / uint64_t(every);
    EXPECT_EQ(none - activation_bytes(c, int(B), bf16), n == 0 ? 0 : (n - 1) * per_layer) << at;
  }
}

// The tracker's activation bytes equal activation_bytes() for every setting, and the saving
// is derived here per layer, from gpt.cc's buffer list rather than the formula: a checkpointed
// layer keeps its block output (B*T*C fp32) and gives up, beyond the one shared slot,
//   fp32:  residual2 B*T*C + 16 saved B*T*C + 4 LayerNorm statistics B*T + attention A
//   bf16:  the same with the 16 saved B*T*C at 2 bytes.
TEST(ActivationCheckpointing, ActivationBytesMatchTheTrackerAndThePerLayerSaving) {
  for (AttentionKind att : {AttentionKind::kNaive, AttentionKind::kFused})
    for (bool bf16 : {false, true})
      for (const char* spec : {"tiny", "small", "5,48,6,20,97"}) {
        GptConfig c = parse_model(spec);
        c.attention = att;
        const uint64_t B = 3, T = c.seq_len, C = c.n_embd, NH = c.n_head;
        const uint64_t A = att == AttentionKind::kFused ? B * NH * T : B * NH * T * T;
        const uint64_t per_layer =
            4 * (B * T * C + 4 * B * T + A) + (bf16 ? 2 : 4) * 16 * B * T * C;
        expect_tracked_bytes_and_saving(c, B, bf16, per_layer, spec);
      }
}

// The same for the Llama block, derived from llama.cc's buffer list: a checkpointed layer keeps
// residual3 (its block output, B*T*C fp32) and gives up, beyond the one shared slot,
//   fp32:  residual2 B*T*C + the six saved tensors B*T*(6C + 3F) + the two norms' rstd 2*B*T
//          + attention A
//   bf16:  the same with the six saved tensors at 2 bytes.
TEST(ActivationCheckpointing, LlamaActivationBytesMatchTheTrackerAndThePerLayerSaving) {
  for (AttentionKind att : {AttentionKind::kNaive, AttentionKind::kFused})
    for (bool bf16 : {false, true})
      for (GptConfig c : {parse_model("llama-tiny"), parse_model("llama-tiny-pad"), llama4()}) {
        c.attention = att;
        const uint64_t B = 3, T = c.seq_len, C = c.n_embd, H = c.n_head, L = c.n_layer,
                       F = c.ffn_hidden;
        const uint64_t A = att == AttentionKind::kFused ? B * H * T : B * H * T * T;
        const uint64_t per_layer =
            4 * (B * T * C + 2 * B * T + A) + (bf16 ? 2 : 4) * B * T * (6 * C + 3 * F);
        expect_tracked_bytes_and_saving(c, B, bf16, per_layer,
                                        std::to_string(L) + "x" + std::to_string(C));
      }
}

TEST(ActivationCheckpointing, ParsesTheKnobAndNamesTheFlagOnBadValues) {
  EXPECT_EQ(parse_activation_checkpointing("none", 4), 0);
  EXPECT_EQ(parse_activation_checkpointing("block", 4), 1);
  EXPECT_EQ(parse_activation_checkpointing("every-3", 4), 3);
  EXPECT_EQ(activation_checkpointing_name(parse_activation_checkpointing("every-4", 4)), "every-4");
  for (const char* bad : {"every-0", "every-5", "every-", "every-2x", "all", "Block", ""}) {
    try {
      parse_activation_checkpointing(bad, 4);
      ADD_FAILURE() << bad << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--activation-checkpointing"), std::string::npos) << bad;
    }
  }
  GptConfig c = parse_model("tiny");
  c.checkpoint_every = 3;  // more than its 2 layers
  EXPECT_THROW(validate(c), std::invalid_argument);
}

// HFU's numerator: model FLOPs plus each checkpointed block's forward once more. The block
// share of flops_per_step (6 * 12C^2 per token for its matmuls, 12*C*T for attention, forward
// and backward) is three forwards' worth (backward = 2 x forward), so the recompute is a third
// of it per checkpointed block; the embedding and LM head are never recomputed.
TEST(ActivationCheckpointing, RecomputeFlopsAreAThirdOfEachCheckpointedBlocksShare) {
  GptConfig c = parse_model("small");
  const uint64_t tokens = 4 * uint64_t(c.seq_len);
  GptConfig one_more = c;
  one_more.n_layer = c.n_layer + 1;
  const double block_share = flops_per_step(one_more, tokens) - flops_per_step(c, tokens);
  EXPECT_EQ(recompute_flops_per_step(c, tokens), 0.0);
  c.checkpoint_every = 1;
  EXPECT_DOUBLE_EQ(recompute_flops_per_step(c, tokens), c.n_layer * block_share / 3);
  c.checkpoint_every = 2;
  EXPECT_DOUBLE_EQ(recompute_flops_per_step(c, tokens), (c.n_layer / 2) * block_share / 3);
}

// The Llama block's share of llama_flops_per_step (6·(2C² + 2·C·KV·hd + 3·C·F) per token for its
// matmuls, 12·C·T for attention) is three forwards' worth too; checked on published shapes with
// grouped-query K/V (llama2-70b: 8 K/V heads of 64) and without (llama2-7b).
TEST(ActivationCheckpointing, LlamaRecomputeFlopsAreAThirdOfEachCheckpointedBlocksShare) {
  for (const char* name : {"llama2-7b", "llama2-70b", "llama3-8b"}) {
    GptConfig c = parse_model(name);
    const uint64_t tokens = 2 * uint64_t(c.seq_len);
    GptConfig one_more = c;
    one_more.n_layer = c.n_layer + 1;
    const double block_share = flops_per_step(one_more, tokens) - flops_per_step(c, tokens);
    c.checkpoint_every = 1;
    EXPECT_DOUBLE_EQ(recompute_flops_per_step(c, tokens), c.n_layer * block_share / 3) << name;
    c.checkpoint_every = 4;
    EXPECT_DOUBLE_EQ(recompute_flops_per_step(c, tokens), (c.n_layer / 4) * block_share / 3)
        << name;
    EXPECT_NE(std::string(hardware_flop_formula(c)), hardware_flop_formula()) << name;
  }
}

}  // namespace
}  // namespace sb::testing
