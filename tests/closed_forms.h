// The closed forms the strategy tests hold the real runs (tests/mpi/run_bytes_test.cc,
// run_memory_test.cc) and the predictor (tests/unit/run_predict_closed_forms_test.cc) to:
// bytes sent per step and model-state bytes per rank, for every strategy, with the real padded
// sizes. Written from the papers, not from the strategy code, so that they check it; the
// derivations are the comments. Header-only; needs the model layout and nothing else.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "harness/model/layout.h"
#include "strategies/strategy.h"

namespace sb::closed_forms {

inline uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

// Bytes per parameter (b_p) and per gradient (b_g): fp32 4 and 4; bf16-mixed keeps params and
// grads in bf16, 2 and 2 (the fp32 master copy is optimizer state).
inline double param_bytes(Precision p) { return p == Precision::kFp32 ? 4 : 2; }

// DDP as PyTorch ships it (torch 1.13.1): under bf16-mixed the model runs under autocast, which
// casts operands for compute only, so the parameters, their .grad and the Reducer's buckets
// (built from the parameters' dtype: reducer.cpp, Reducer::initialize_buckets) stay fp32 and
// the all-reduce moves 4 bytes per element — unless the model itself was cast to bf16
// (--ddp-config bf16_params). Adam's m and v follow the parameters: fp32, K = 8, no master.
inline double ddp_param_bytes(Precision p, bool bf16_params) {
  return bf16_params ? param_bytes(p) : 4;
}

// FSDP with --wrap block: one flat parameter per transformer block, and the root unit
// (embeddings, the final LayerNorm, the tied head: segments 0 and L + 1). Each unit's flat
// buffer is padded to a multiple of the shard group S, so Ψ_pad = Σ_units round_up(ψ_u, S).
// Returns {Ψ_pad, the root unit's padded size}.
inline std::pair<uint64_t, uint64_t> fsdp_padded(const ModelLayout& l, uint64_t S) {
  std::map<int, uint64_t> unit;  // 0 = root, b + 1 = block b
  const int L = l.config.n_layer;
  for (const auto& t : l.tensors)
    unit[(t.segment == 0 || t.segment == L + 1) ? 0 : t.segment] += t.numel;
  uint64_t all = 0;
  for (auto& [u, n] : unit) all += round_up(n, S);
  return {all, round_up(unit[0], S)};
}

// PyTorch DDP's extra buffer (torch 1.13.1 reducer.cpp, Reducer::initialize_buckets and
// mark_variable_ready_dense): with gradient_as_bucket_view=False (the default) each bucket is
// its own flat tensor the .grad tensors are copied into, so Ψ·b_g more per rank for the whole
// run; with True the .grad tensors are views into the buckets, and nothing more.
inline uint64_t ddp_bucket_copy_bytes(const ModelLayout& l, Precision p, bool bf16_params,
                                      bool gradient_as_bucket_view) {
  return gradient_as_bucket_view ? 0 : uint64_t(ddp_param_bytes(p, bf16_params)) * l.num_params();
}

// Bytes sent in one training step, summed over all ranks, split by the hop class of each send.
struct Bytes {
  double intra = 0, inter = 0;
};

// Ring volumes (nccl-tests PERFORMANCE.md): over a ring of n ranks and a buffer of S bytes,
// each rank sends (n-1)/n·S for a reduce-scatter or an all-gather and 2(n-1)/n·S for an
// all-reduce (a reduce-scatter then an all-gather). With uneven chunks (S not a multiple of n)
// the ranks send different amounts, but summed over the ring every chunk still crosses n - 1
// hops per phase, so n × the per-rank form stays exact for the sum.
//
// Hop classes: a rank sends only to its ring successor. A world ring over N ranks in M > 1
// consecutive virtual nodes crosses a node boundary M times (once leaving each node) and stays
// inside a node N - M times, so inter = M × per-rank and intra = (N - M) × per-rank — when each
// rank sends the same bytes, i.e. the buffers divide by N (always for the padded shards; for
// DDP's unpadded buckets only if they do). With M = 1 (one node) or G = 1 (one rank per node)
// every hop is of one class and no divisibility is needed: the shapes a world of 3 runs.
//
// Strategy volumes per rank per step (ZeRO paper §7; FSDP paper §3), Ψ the parameter count:
// - DDP: all-reduce of the gradients, 2(N-1)/N·Ψ·b_g (b_g of ddp_param_bytes: fp32 under
//   autocast). The Reducer's buckets partition the gradients, so their sizes do not change it.
// - ZeRO-1/2: reduce-scatter of the gradients + all-gather of the updated parameters over the
//   flat buffer padded to N: (N-1)/N·Ψ_pad·(b_g + b_p).
// - ZeRO-3 partitions each tensor on its own (padded to N) and gathers it before every leaf
//   module that uses it, in forward and again in backward: 2·uses_t gathers (a tied embedding
//   has two users per pass); tensors smaller than the persistence threshold stay whole and are
//   gathered once, after the step: (N-1)/N·Σ_t ψ_t,pad·(b_g + (persistent ? 1 : 2·uses_t)·b_p).
//   Untied, threshold 0: 3Ψ, the ZeRO paper's figure.
// - FULL_SHARD gathers every unit in forward and again in backward except the root unit, which
//   stays gathered (as PyTorch FSDP's root): (S-1)/S·((2Ψ_pad − Ψ_root)·b_p + Ψ_pad·b_g).
//   SHARD_GRAD_OP keeps units gathered from forward through backward: (S-1)/S·Ψ_pad·(b_p + b_g).
// - HYBRID: the same inside each node (S = G, all intra), plus an all-reduce of every rank's
//   Ψ_pad/G gradient shard across the M nodes: G rings of M ranks, each hop inter-node,
//   2(M-1)/M·Ψ_pad/G·b_g per rank, 2(M-1)·Ψ_pad·b_g summed over the N ranks.
inline Bytes expected_bytes(const std::string& s, const ModelLayout& l, Precision precision,
                            uint64_t persist_elements, double N, double G,
                            bool ddp_bf16_params = false) {
  const double M = N / G, bp = param_bytes(precision), bg = bp;
  auto world_ring = [&](double per_rank) {
    const double inter_hops = M > 1 ? M : 0;
    return Bytes{(N - inter_hops) * per_rank, inter_hops * per_rank};
  };
  if (s == "ddp")
    return world_ring(2 * (N - 1) / N * double(l.num_params()) *
                      ddp_param_bytes(precision, ddp_bf16_params));
  if (s == "zero1" || s == "zero2")
    return world_ring((N - 1) / N * double(round_up(l.num_params(), uint64_t(N))) * (bg + bp));
  if (s == "zero3") {
    const std::vector<int> uses = l.uses_per_pass();
    double sum = 0;
    for (size_t t = 0; t < l.tensors.size(); ++t) {
      const double pad = double(round_up(l.tensors[t].numel, uint64_t(N)));
      const bool persist = l.tensors[t].numel < persist_elements;
      sum += pad * (bg + (persist ? bp : 2.0 * uses[t] * bp));
    }
    return world_ring((N - 1) / N * sum);
  }
  const bool hybrid = s.find("hybrid") != std::string::npos;
  const bool full = s == "fsdp_full_shard" || s == "fsdp_hybrid_shard";
  const double S = hybrid ? G : N;
  const auto [pad, root] = fsdp_padded(l, uint64_t(S));
  const double gathered = full ? 2.0 * double(pad) - double(root) : double(pad);
  const double shard_group = (S - 1) / S * (gathered * bp + double(pad) * bg);
  if (!hybrid) return world_ring(shard_group);
  return {N * shard_group, 2 * (M - 1) * double(pad) * bg};
}

// Model state per rank at rest, in bytes.
struct ModelState {
  uint64_t params = 0, grads = 0, optimizer = 0;
};

// ZeRO paper §5: (b_p + b_g + K)·Ψ per rank for DDP (b of ddp_param_bytes; the Reducer's bucket
// copy when gradient_as_bucket_view is false is a communication buffer, +Ψ·b_g at the peak, not
// model state: see ddp_bucket_copy_bytes), where K is the optimizer's bytes per
// parameter: 8 for fp32 Adam (m, v), 12 for mixed precision (fp32 master + m + v). ZeRO-1
// divides K·Ψ by N, ZeRO-2 also b_g·Ψ, ZeRO-3 all three — over the buffer padded to N (flat
// for ZeRO-1/2, each tensor for ZeRO-3, whose persistent tensors also keep a whole b_p copy).
// FSDP divides all three over its shard group S (the world, or the node for HYBRID) with each
// unit padded to S.
inline ModelState expected_state(const std::string& s, const ModelLayout& l, Precision precision,
                                 uint64_t persist_elements, uint64_t N, uint64_t G,
                                 bool ddp_bf16_params = false) {
  const uint64_t bp = uint64_t(param_bytes(precision)), bg = bp;
  const uint64_t K = precision == Precision::kFp32 ? 8 : 12;
  const uint64_t psi = l.num_params(), psi_n = round_up(psi, N);
  if (s == "ddp") {
    const uint64_t b = uint64_t(ddp_param_bytes(precision, ddp_bf16_params));
    return {b * psi, b * psi, (b == 4 ? 8 : 12) * psi};
  }
  if (s == "zero1") return {bp * psi_n, bg * psi_n, K * psi_n / N};
  if (s == "zero2") return {bp * psi_n, bg * psi_n / N, K * psi_n / N};
  if (s == "zero3") {
    uint64_t pad = 0, persistent = 0;
    for (const auto& t : l.tensors) {
      pad += round_up(t.numel, N);
      if (t.numel < persist_elements) persistent += round_up(t.numel, N);  // whole: params only
    }
    return {bp * (pad / N + persistent), bg * pad / N, K * pad / N};
  }
  const uint64_t S = s.find("hybrid") != std::string::npos ? G : N;
  const uint64_t pad = fsdp_padded(l, S).first;
  return {bp * pad / S, bg * pad / S, K * pad / S};
}

}  // namespace sb::closed_forms
