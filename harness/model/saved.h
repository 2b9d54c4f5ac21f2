// The per-layer activations a block keeps for backward, shared by the GPT-2 block (gpt.cc) and
// the Llama block (llama.cc): which slot each layer's tensors live in under activation
// checkpointing, and one saved tensor's storage (fp32 slices, or bf16 under bf16-mixed).
#pragma once

#include <cstdint>
#include <vector>

#include "harness/device/device.h"
#include "harness/memory/tracker.h"
#include "harness/model/checkpointing.h"

namespace sb {

// Layer l's slot in the per-layer buffers: one per layer kept, and one shared by every
// checkpointed layer (its forward's transient, then backward's recompute). S = count.
// for_op_saved: the slots of the tensors op checkpointing keeps (kCheckpointOp: one per
// layer; otherwise the same as the others').
struct LayerSlots {
  std::vector<int> of;
  size_t count = 0;
  explicit LayerSlots(const GptConfig& c) {
    const size_t L = size_t(c.n_layer), kept = L - size_t(checkpointed_blocks(c));
    count = kept + (kept < L ? 1 : 0);
    for (size_t l = 0, k = 0; l < L; ++l)
      of.push_back(is_checkpointed(c, int(l)) ? int(count - 1) : int(k++));
  }
  LayerSlots() = default;
  static LayerSlots for_op_saved(const GptConfig& c) {
    if (!is_op_checkpointing(c)) return LayerSlots(c);
    LayerSlots s;
    s.count = size_t(c.n_layer);
    for (int l = 0; l < c.n_layer; ++l) s.of.push_back(l);
    return s;
  }
};

// One per-layer tensor saved for backward, [S, n]: layer l lives in slot slots.of[l]. In fp32
// it is the slices of one fp32 buffer. Under bf16-mixed it is a tensor autocast keeps in bf16
// (a matmul's output, or the bf16 copy autocast makes of a matmul's input): layer l computes in
// one layer of fp32 work, store() rounds the work into layer l's bf16 slice and leaves the
// rounded values in the work (what the rest of the forward sees, as under autocast), load()
// brings them back for backward.
class SavedPerLayer {
 public:
  SavedPerLayer() = default;
  // backward_reads false: a tensor llm.c's layout keeps per layer that backward never reads
  // (a projection's output, added into the residual); the stack holds it only while its layer
  // runs, one layer of bf16 (the work's Held), and saves nothing (torch's linear saves its
  // input and weight, not its output: torch/csrc/autograd/FunctionsManual.cpp, derivatives.yaml).
  SavedPerLayer(MemoryTracker& m, const LayerSlots& slots, size_t n, bool bf16,
                bool backward_reads = true)
      : slots_(slots.of), n_(n), bf16_(bf16),
        // Under bf16 the fp32 work is this implementation's: the stack writes the op's bf16
        // output straight into the saved tensor (Held::kNone).
        f32_(m, MemCategory::kActivations, bf16 ? n : slots.count * n,
             !bf16 ? Held::kAsStored : backward_reads ? Held::kNone : Held::kBf16) {
    if (bf16)
      half_ = TrackedBuffer<uint16_t>(m, MemCategory::kActivations, slots.count * n,
                                      backward_reads ? Held::kAsStored : Held::kNone);
  }
  float* at(int l) { return bf16_ ? f32_.data() : f32_.data() + slot(l) * n_; }
  void store(Device& d, int l) {
    if (!bf16_) return;
    d.f32_to_bf16(half_.data() + slot(l) * n_, f32_.data(), n_);
    d.bf16_to_f32(f32_.data(), half_.data() + slot(l) * n_, n_);
  }
  void load(Device& d, int l) {
    if (bf16_) d.bf16_to_f32(f32_.data(), half_.data() + slot(l) * n_, n_);
  }

 private:
  size_t slot(int l) const { return size_t(slots_[size_t(l)]); }
  std::vector<int> slots_;
  size_t n_ = 0;
  bool bf16_ = false;
  TrackedBuffer<float> f32_;
  TrackedBuffer<uint16_t> half_;
};

// The models' fp32 activation buffers, each counted in the stack's ledger as its Held says
// (tracker.h): f32 as stored (statistics, fused attention's log-sum-exps and row deltas),
// stream (the residual stream and its gradient), half (autocast's bf16 outputs and their
// gradients); attention: naive attention's probabilities are the stream's dtype.
struct ActivationBuffers {
  ActivationBuffers(MemoryTracker& mem, const GptConfig& c)
      : m(mem), attention(c.attention == AttentionKind::kNaive ? Held::kStream : Held::kAsStored) {}
  TrackedBuffer<float> f32(size_t n, Held h = Held::kAsStored) const {
    return TrackedBuffer<float>(m, MemCategory::kActivations, n, h);
  }
  TrackedBuffer<float> stream(size_t n) const { return f32(n, Held::kStream); }
  TrackedBuffer<float> half(size_t n) const { return f32(n, Held::kBf16); }
  MemoryTracker& m;
  Held attention;
};

// One op whose output op checkpointing keeps (qkv, attention, fc / w1|w3): computed and saved in
// a forward; in op's recompute (cached) served from what was saved, as torch's selective
// checkpoint serves a MUST_SAVE op from its cache — the fp32 work reloaded, nothing computed.
template <class Compute>
void run_kept_op(Device& d, SavedPerLayer& out, int l, bool cached, Compute&& compute) {
  if (cached) return out.load(d, l);
  compute();
  out.store(d, l);
}

}  // namespace sb
