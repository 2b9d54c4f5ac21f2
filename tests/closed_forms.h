// The closed forms the strategy tests hold the real runs (tests/mpi/run_bytes_test.cc,
// run_memory_test.cc) and the predictor (tests/unit/run_predict_closed_forms_test.cc) to:
// bytes sent per step and model-state bytes per rank, for every strategy, with the real padded
// sizes. Written from the papers, not from the strategy code, so that they check it; the
// derivations are the comments. Header-only; needs the model layout and nothing else.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>
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
// With use_orig_params (align = 16 bytes / b_p elements) each tensor of a unit first rounds the
// unit's running length up to a multiple of align (padding before it; _flat_param.py
// _init_flat_param_and_metadata), then the unit pads to S as before.
inline std::pair<uint64_t, uint64_t> fsdp_padded(const ModelLayout& l, uint64_t S,
                                                 uint64_t align = 1) {
  std::map<int, uint64_t> unit;  // 0 = root, b + 1 = block b
  const int L = l.config.n_layer;
  for (const auto& t : l.tensors) {  // layout order: a unit's tensors in flat order
    uint64_t& n = unit[(t.segment == 0 || t.segment == L + 1) ? 0 : t.segment];
    n = round_up(n, align) + t.numel;
  }
  uint64_t all = 0;
  for (auto& [u, n] : unit) all += round_up(n, S);
  return {all, round_up(unit[0], S)};
}

// Activation checkpointing (l.config.checkpoint_every = K; 0 none, 1 block, -1 op): block b
// (segment b + 1) is recomputed in backward when (b + 1) % K == 0 — torchtitan's every K-th
// block; under op every block's forward runs again (its saved ops served from the cache, as
// torch's selective checkpoint does, its modules' hooks firing all the same).
inline bool recomputed_segment(const ModelLayout& l, int segment) {
  const int K = l.config.checkpoint_every, L = l.config.n_layer;
  return (K > 0 || K == -1) && segment >= 1 && segment <= L && (K == -1 || segment % K == 0);
}

// FSDP2 (fully_shard) pads each parameter on its own: dim 0 (rows) is chunked over the shard group
// S and every chunk padded to the first's size (torch.chunk), so a tensor of `rows` rows of
// `row` elements takes ceil(rows / S)·S·row elements. MiCS (DeepSpeed ZeRO-3 partitioning)
// pads the flattened tensor instead: round_up(numel, S) (rows = false). Returns {Ψ_pad, the
// root group's part} for --wrap block (the root: segments 0 and L + 1, as FSDP's).
inline std::pair<uint64_t, uint64_t> fsdp2_padded(const ModelLayout& l, uint64_t S,
                                                  bool rows = true) {
  const int L = l.config.n_layer;
  uint64_t all = 0, root = 0;
  for (const auto& t : l.tensors) {
    const uint64_t row = rows ? t.numel / uint64_t(t.shape.front()) : 1;
    const uint64_t pad = round_up(t.numel, S * row);
    all += pad;
    if (t.segment == 0 || t.segment == L + 1) root += pad;
  }
  return {all, root};
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

// Hops of every ring of a group kind that leave a node, for N ranks in consecutive nodes of G:
// rings of n ranks, member k of ring c at first(c) + k·stride. Summed over all the rings.
inline double leaving_hops(double N, double G, double n, double rings, double stride,
                           double ring_step) {
  double out = 0;
  for (double c = 0; c < rings; ++c)
    for (double k = 0; k < n; ++k) {
      const double first = c * ring_step, a = first + k * stride,
                   b = first + std::fmod(k + 1, n) * stride;
      out += n > 1 && std::floor(a / G) != std::floor(b / G);
    }
  return out;
}

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
// - ZeRO-1/2, paper (ZeRO §7): reduce-scatter of the gradients + all-gather of the updated
//   parameters over the flat buffer padded to N: (N-1)/N·Ψ_pad·(b_g + b_p).
// - ZeRO-1/2 as DeepSpeed ships them (stage_1_and_2.py average_tensor with reduce_scatter and
//   use_multi_rank_bucket_allreduce true -> allreduce_and_scatter): every gradient bucket is
//   all-reduced whole, unpadded (a bucket never exceeds reduce_bucket_size, so
//   allreduce_and_scatter issues one all-reduce for it), and the buckets partition the
//   gradients: 2(N-1)/N·Ψ·b_g, DDP's volume; the parameter all-gather after the step is
//   unchanged: total (N-1)/N·(2Ψ·b_g + Ψ_pad·b_p), the 1.5× of the paper's figure.
// - ZeRO-1/2 with use_multi_rank_bucket_allreduce false (average_tensor -> allreduce_no_retain(
//   rank=dst) -> dist.reduce): per bucket of ψ_b elements (unpadded) and chunk c_b = ψ_b,pad/N,
//   one reduce per owner r of its slice ℓ_r = clamp(ψ_b − r·c_b, 0, c_b). A reduce is a chain
//   to the root along the ring (ring_schedule.h): every rank but the root sends ℓ_r once, to its
//   successor. Rank i therefore sends Σ_b (ψ_b − ℓ_i)·b_g, and summed over the ranks
//   (N-1)·Σ_b ψ_b·b_g = (N-1)·Ψ·b_g exactly, bucket layout or not: the paper's reduce-scatter
//   volume without its padding, (N-1)/N·Ψ·b_g per rank where the buckets divide by N (the hop
//   classes then split as for any world ring: M × per-rank inter), plus the same all-gather.
// - ZeRO-3 partitions each tensor on its own (padded to N) and gathers it before every leaf
//   module that uses it, in forward and again in backward: 2·uses_t gathers (a tied embedding
//   has two users per pass); tensors smaller than the persistence threshold stay whole and are
//   gathered once, after the step: (N-1)/N·Σ_t ψ_t,pad·(b_g + (persistent ? 1 : 2·uses_t)·b_p).
//   Untied, threshold 0: 3Ψ, the ZeRO paper's figure. That is the paper's schedule (reuse
//   distance 0). As DeepSpeed ships it (stage3_max_reuse_distance 1e9,
//   partitioned_param_coordinator.py __params_to_release), after the first step a tensor used
//   again within the distance, counted in elements of the trace in between, is not released:
//   once the distance reaches the trace's whole length (2Ψ: every module's tensors in forward
//   and again in backward) every tensor is gathered once per step: factor 1 in place of
//   2·uses_t. Distances between 0 and 2Ψ have no closed form here (the parity and predictor
//   tests run them).
//   Persistence is DeepSpeed's <= (partition_parameters.py _convert_to_deepspeed_param).
//   Activation checkpointing: the recompute runs the block's forward inside backward, and
//   DeepSpeed's module hooks fire on it as on any forward (checkpointing.py
//   CheckpointFunction.backward -> run_function; parameter_offload.py's forward pre/post hooks:
//   fetch_sub_module, release_sub_module). Paper schedule: a non-persistent tensor of a
//   recomputed block was released after its forward and is released again after the recompute,
//   so it is gathered 2·uses_t + 1 times. Shipped (distance >= the trace, now 2Ψ + the
//   recomputed blocks' elements): still once. MiCS (the same hooks over its partition groups):
//   a recomputed block's group is gathered a third time, +(P-1)/P·Σ_recomputed ψ_t,pad·b_p.
//   FSDP and FSDP2 do not change: the recompute runs inside the unit's pre-backward unshard
//   (FSDP 1.13.1: FSDP(checkpoint_wrapper(block)) recomputes the wrapped block, not
//   FSDP.forward; FSDP2: FSDPState._pre_forward returns in PRE_BACKWARD), nor do DDP and
//   ZeRO-1/2, which hold whole parameters and reduce the same gradients.
// - FULL_SHARD gathers every unit in forward and again in backward except the root unit, which
//   stays gathered (as PyTorch FSDP's root): (S-1)/S·((2Ψ_pad − Ψ_root)·b_p + Ψ_pad·b_g).
//   SHARD_GRAD_OP keeps units gathered from forward through backward: (S-1)/S·Ψ_pad·(b_p + b_g).
// - HYBRID: the same inside each node (S = G, all intra), plus an all-reduce of every rank's
//   Ψ_pad/G gradient shard across the M nodes: G rings of M ranks, each hop inter-node,
//   2(M-1)/M·Ψ_pad/G·b_g per rank, 2(M-1)·Ψ_pad·b_g summed over the N ranks.
// - FSDP2 moves what FULL_SHARD moves (one all-gather of the group in forward, again in backward
//   except the root; one reduce-scatter per group) over its per-parameter Ψ_pad; fsdp2_hsdp as
//   HYBRID. reshard_after_forward=False (0) gathers once, like SHARD_GRAD_OP. An int k (the node,
//   k = G) keeps a 1/k share after forward, so the backward all-gather of every group is a ring
//   over the node: (G-1)/G·Ψ_pad·b_p per rank, every hop intra, while the forward gather and the
//   reduce-scatter stay world rings of (N-1)/N·Ψ_pad·b. The root is kept unsharded (gathered
//   once) only with reshard_after_forward=None, the default (fully_shard's
//   auto_reshard_after_forward; FSDPState._lazy_init): an explicit True gathers it again in
//   backward, 2Ψ_pad in place of 2Ψ_pad − Ψ_root, and an int reshards it to the node as well.
//
// FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) (torchtitan's default):
//   foreach_reduce casts the unsharded grads to fp32 before the reduce-scatter, so b_g = 4 in
//   the reduce-scatter (and HSDP's all-reduce) term: twice the bf16 bytes; the sharded grads
//   stay fp32 (4·Ψ_pad/S of model state) while the gathers still move b_p = 2.
//
// MiCS, partitions of P consecutive ranks (R = N/P replicas, per-tensor flat padding to P): the
// FULL_SHARD volume over each partition ring, (P-1)/P·((2Ψ_pad − Ψ_root)·b_p + Ψ_pad·b_g) per
// rank, plus the all-reduce of the Ψ_pad/P gradient shard over the R ranks at the same position
// of every partition, 2(R-1)/R·Ψ_pad/P·b_g per rank. A ring's inter-node bytes are its hops that
// leave a node times the per-rank bytes (equal on every rank: the shards divide by P; the
// replica all-reduce's Ψ_pad/P need not divide by R, so the shapes tested keep its hops of one
// class). With mics_hierarchical_params_gather and P = k·G: an all-gather over the k ranks of
// the partition with my local rank (every hop inter), (k-1)·C per rank for a shard of C, then
// one inside the node, (G-1)·k·C per rank: inter (k-1)/P, intra (G-1)/G of the gathered volume.
inline Bytes mics_bytes(const ModelLayout& l, double bp, double bg, double N, double G, double P,
                        bool hierarchical) {
  const auto [pad, root] = fsdp2_padded(l, uint64_t(P), false);
  double recomputed = 0;  // activation checkpointing's third gather of a block's group
  for (const auto& t : l.tensors)
    if (recomputed_segment(l, t.segment)) recomputed += double(round_up(t.numel, uint64_t(P)));
  const double R = N / P, gathered = (2.0 * double(pad) - double(root) + recomputed) * bp;
  const double part_out = leaving_hops(N, G, P, R, 1, P);   // partition rings
  const double repl_out = leaving_hops(N, G, R, P, P, 1);   // replica rings
  const double rs = (P - 1) / P * double(pad) * bg, ar = 2 * (R - 1) / R * double(pad) / P * bg;
  Bytes b{(N - part_out) * rs + (N - repl_out) * ar, part_out * rs + repl_out * ar};
  if (hierarchical) {
    const double k = P / G;
    b.inter += N * (k - 1) / P * gathered;
    b.intra += N * (G - 1) / G * gathered;
  } else {
    const double ag = (P - 1) / P * gathered;
    b.intra += (N - part_out) * ag;
    b.inter += part_out * ag;
  }
  return b;
}

// MiCS as DeepSpeed ships it (mics.py: ZeRO-3's coordinator, only the all-gather swapped to the
// partition group of P consecutive ranks; MiCS_Optimizer.allreduce_mics_shard_grads): ZeRO-3's
// shipped volume over each partition ring (each tensor padded to P, gathered once per step while
// the reuse distance covers the trace, recompute included; persistent ones refreshed once after
// the step; its gradient reduce-scattered once), (P-1)/P·Σ_t ψ_t,pad·(b_p + b_g) per rank, plus
// one all-reduce of the Σ_t ψ_t,pad/P gradient partitions over the R = N/P replicas,
// 2(R-1)/R·Σ_t ψ_t,pad/P·b_g per rank. Hop classes as for the per-unit form above.
inline Bytes mics_shipped_bytes(const ModelLayout& l, double bp, double bg, double N, double G,
                                double P) {
  double pad = 0;
  for (const auto& t : l.tensors) pad += double(round_up(t.numel, uint64_t(P)));
  const double R = N / P;
  const double part_out = leaving_hops(N, G, P, R, 1, P), repl_out = leaving_hops(N, G, R, P, P, 1);
  const double part = (P - 1) / P * pad * (bp + bg), ar = 2 * (R - 1) / R * pad / P * bg;
  return {(N - part_out) * part + (N - repl_out) * ar, part_out * part + repl_out * ar};
}

// ZeRO-3's persistent tensors (DeepSpeed parameter_offload.py mark_persistent_parameters): in
// parameter order, numel <= persist unless it would take the persisted total past model_persist.
inline std::vector<bool> zero3_persistent(const ModelLayout& l, uint64_t persist,
                                          uint64_t model_persist = UINT64_MAX) {
  std::vector<bool> out(l.tensors.size(), false);
  uint64_t total = 0;
  for (size_t t = 0; t < l.tensors.size(); ++t) {
    const uint64_t n = l.tensors[t].numel;
    if (n > persist || total + n > model_persist) continue;
    out[t] = true;
    total += n;
  }
  return out;
}

inline Bytes expected_bytes(const std::string& s, const ModelLayout& l, Precision precision,
                            uint64_t persist_elements, double N, double G,
                            ZeroGradReduce reduce = StrategyOptions{}.zero_grad_reduce,
                            uint64_t reuse_distance = StrategyOptions{}.reuse_distance,
                            int fsdp2_reshard_after_forward = -1, double P = 0,
                            bool hierarchical = false,
                            bool ddp_bf16_params = false,
                            uint64_t model_persist = UINT64_MAX,
                            bool fsdp2_reduce_fp32 = false,
                            MicsSchedule mics = MicsSchedule::kShipped) {
  const double M = N / G, bp = param_bytes(precision);
  const bool fsdp2_rows = s == "fsdp2" || s == "fsdp2_hsdp";
  const double bg = fsdp2_rows && fsdp2_reduce_fp32 ? 4 : bp;  // FSDP2's reduce_dtype
  auto world_ring = [&](double per_rank) {
    const double inter_hops = M > 1 ? M : 0;
    return Bytes{(N - inter_hops) * per_rank, inter_hops * per_rank};
  };
  if (s == "ddp")
    return world_ring(2 * (N - 1) / N * double(l.num_params()) *
                      ddp_param_bytes(precision, ddp_bf16_params));
  const double psi_pad = double(round_up(l.num_params(), uint64_t(N)));
  if ((s == "zero1" || s == "zero2") && reduce == ZeroGradReduce::kReduceScatter)
    return world_ring((N - 1) / N * psi_pad * (bg + bp));
  if ((s == "zero1" || s == "zero2") && reduce == ZeroGradReduce::kReducePerOwner) {
    const Bytes owners = world_ring((N - 1) / N * double(l.num_params()) * bg);
    const Bytes gather = world_ring((N - 1) / N * psi_pad * bp);
    return {owners.intra + gather.intra, owners.inter + gather.inter};
  }
  if (s == "zero1" || s == "zero2") {  // DDP's all-reduce + the paper's all-gather, each exact
    const Bytes reduce = world_ring(2 * (N - 1) / N * double(l.num_params()) * bg);
    const Bytes gather = world_ring((N - 1) / N * psi_pad * bp);
    return {reduce.intra + gather.intra, reduce.inter + gather.inter};
  }
  if (s == "zero3") {
    const std::vector<int> uses = l.uses_per_pass();
    uint64_t trace = 2 * l.num_params();  // elements of the recorded trace
    for (const auto& t : l.tensors)
      if (recomputed_segment(l, t.segment)) trace += t.numel;
    const bool once = reuse_distance >= trace;
    if (!once && reuse_distance != 0) throw std::invalid_argument("no closed form: reuse distance");
    double sum = 0;
    const std::vector<bool> persistent = zero3_persistent(l, persist_elements, model_persist);
    for (size_t t = 0; t < l.tensors.size(); ++t) {
      const double pad = double(round_up(l.tensors[t].numel, uint64_t(N)));
      const bool persist = persistent[t];
      const double gathers = 2.0 * uses[t] + (recomputed_segment(l, l.tensors[t].segment) ? 1 : 0);
      sum += pad * (bg + (persist ? bp : (once ? 1.0 : gathers) * bp));
    }
    return world_ring((N - 1) / N * sum);
  }
  if (s == "mics" && mics == MicsSchedule::kShipped) {
    if (reuse_distance < 2 * l.num_params() + l.num_params() || hierarchical)
      throw std::invalid_argument("no closed form: MiCS shipped with reuse or hierarchy");
    return mics_shipped_bytes(l, bp, bg, N, G, P > 0 ? P : G);
  }
  if (s == "mics") return mics_bytes(l, bp, bg, N, G, P > 0 ? P : G, hierarchical);
  const bool fsdp2 = s.rfind("fsdp2", 0) == 0;
  const bool hybrid = s.find("hybrid") != std::string::npos || s == "fsdp2_hsdp";
  const double S = hybrid ? G : N;
  const int k = fsdp2_reshard_after_forward;
  const bool full = s == "fsdp_full_shard" || s == "fsdp_hybrid_shard" ||
                    (fsdp2 && (k < 0 || double(k) == S));
  const auto [pad, root] = fsdp2 ? fsdp2_padded(l, uint64_t(S)) : fsdp_padded(l, uint64_t(S));
  // the root is gathered once per step, unless FSDP2 was given True or an int explicitly
  const double kept = !fsdp2 || k == kFsdp2ReshardAuto ? double(root) : 0;
  if (fsdp2 && k > 1 && double(k) < S) {  // fsdp2 resharding to the node after forward
    const Bytes world = world_ring((N - 1) / N * double(pad) * (bp + bg));
    const double node = N * (G - 1) / G * (double(pad) - kept) * bp;
    return {world.intra + node, world.inter};
  }
  const double gathered = full ? 2.0 * double(pad) - kept : double(pad);
  const double shard_group = (S - 1) / S * (gathered * bp + double(pad) * bg);
  if (!hybrid) return world_ring(shard_group);
  return {N * shard_group, 2 * (M - 1) * double(pad) * bg};
}

// ZeRO++ on zero3 (tests/mpi/run_zeropp_test.cc), N ranks in nodes of G, hpZ partition = G.
// - hpZ (partition_parameters.py _partition_param_sec, all_gather_coalesced): a tensor's first
//   release of the step keeps a secondary partition (padded / G elements, my local rank's slice);
//   every later gather of the step comes from it over the node, until the optimizer step
//   invalidates it (stage3.py invalidate_secondary_tensor). So of a tensor's g_t gathers per step
//   (2·uses_t with the paper's reuse distance 0; 1 as shipped after the first step) the first is
//   a world ring, (N-1)/N·pad·b per rank, and the other g_t - 1 node rings, (G-1)/G·pad·b per rank,
//   every hop intra: N·(G-1)/G·pad·b summed over the ranks. Untied, reuse 0, M > 1 nodes: the
//   parameter traffic leaving the nodes drops from 2Ψ·b to Ψ·b per step.
// - qwZ (_all_gather_sequential / _all_gather_coalesced with quantize): a gather of partitions
//   of n elements in all (one tensor's, or a batch's back to back, quantised as one tensor) moves
//   int8 codes, 1 byte per element, and one fp32 scale per block of n (quantize.h qwz_blocks(n)):
//   over S ranks it sends (S-1)·(n + 4·blocks(n)) bytes per rank in place of (S-1)·n·b, with n =
//   Σ pad/N from the primary shards, Σ pad/G from the secondary ones. Persistent tensors'
//   refresh after the step is not quantised (Init's all_gather default quantize=False).
// - The gathers of a step (zero3_gather_groups): per tensor with the paper's per-tensor fetch;
//   with the coalesced fetch each fetch's missing tensors split into those with a secondary
//   partition and those without (partitioned_param_coordinator.py __all_gather_params_), each
//   part one gather (a lone tensor alone, _all_gather_sequential; several as one batch).
// The gradient reduce-scatter is zero3's: (N-1)/N·pad·b_g per rank over the world ring.
// Blocks per partition of n, restated from CUDAQuantizer.quantize (target 8000 elements; more
// blocks until 8·blocks divides n; doubled while 16·blocks divides n and blocks exceed 8000;
// where DeepSpeed asserts, n % 8 != 0, the suite's ceil(n / 8000)).
inline uint64_t ds_quant_blocks(uint64_t n) {
  const uint64_t first = (n + 7999) / 8000;
  if (n % 8 != 0) return first;
  uint64_t g = first;
  while (n % (8 * g) != 0) ++g;
  while (n % (16 * g) == 0 && n / g > 8000) g *= 2;
  return g;
}
// - qgZ (coalesced_collectives.py all_to_all_quant_reduce, only with M > 1 nodes): a tensor of
//   2+ dimensions whose numel is a multiple of 2N goes as int4 codes (half a byte per element)
//   plus one fp32 scale per quantisation group, max(shape[0], shape[1], N) groups over the
//   tensor, g = that / N per partition of pad/N elements; a "slot" (one partition's codes and
//   scales) is pad/(2N) + 4g bytes. The node's all-to-all: each rank sends each of its G-1 node
//   peers the M slots of that peer's local index, (G-1)·M slots, all intra; the nodes' all-to-
//   all: one slot to each of the M-1 ranks of its local index elsewhere, all inter. Summed over
//   the N ranks: N·(G-1)·M and N·(M-1) slots. Other tensors: their own reduce-scatter, as above.
inline bool qgz_all_to_all(const ParamTensor& t, double N) {
  return t.shape.size() >= 2 && t.numel % (2 * uint64_t(N)) == 0;
}

// One parameter gather of a step: its tensors, and whether from hpZ's secondary partitions.
struct GatherGroup {
  std::vector<int> tensors;
  bool secondary = false;
};
// ZeRO-3's gathers of a steady step without activation checkpointing. Reuse 0 (`once` false):
// every module visit (forward in order, backward in reverse) gathers its non-persistent tensors.
// Reuse >= the trace (`once`): each tensor at its first forward use only; with the prefetch on
// and every budget above the model (tiny), the first module's tensors, then all the others in
// one prefetch batch (coalesced reuse 0 with the prefetch has no form here; per tensor the
// prefetch changes no gather). A tensor gathered before in
// the step has a secondary partition when hpZ is on.
inline std::vector<GatherGroup> zero3_gather_groups(const ModelLayout& l,
                                                    const std::vector<bool>& persistent,
                                                    bool once, bool prefetch, bool coalesced,
                                                    bool hpz) {
  if (coalesced && prefetch && !once)
    throw std::invalid_argument("no closed form: reuse 0 with the prefetch");
  std::vector<int> visits;
  for (size_t m = 0; m < l.modules.size(); ++m) visits.push_back(int(m));
  for (size_t m = l.modules.size(); m-- > 0 && !once;) visits.push_back(int(m));
  std::vector<bool> seen(l.tensors.size(), false);
  std::vector<GatherGroup> out;
  auto add = [&](const std::vector<int>& need) {
    GatherGroup parts[2];  // with a secondary partition, without
    for (int t : need) parts[hpz && seen[t] ? 0 : 1].tensors.push_back(t);
    parts[0].secondary = true;
    for (const GatherGroup& g : parts)
      for (size_t i = 0; i < g.tensors.size(); i += coalesced ? g.tensors.size() : 1)
        out.push_back(coalesced ? g : GatherGroup{{g.tensors[i]}, g.secondary});
    for (int t : need) seen[t] = true;
  };
  for (size_t i = 0; i < visits.size(); ++i) {
    std::vector<int> need;
    for (int t : l.modules[visits[i]].tensors)
      if (!persistent[t] && !(once && seen[t])) need.push_back(t);
    add(need);
    if (!(prefetch && once && i == 0)) continue;
    need.clear();
    for (size_t t = 0; t < l.tensors.size(); ++t)
      if (!persistent[t] && !seen[t]) need.push_back(int(t));
    add(need);
  }
  return out;
}

struct ZeroppKnobs {
  bool hpz = false, qwz = false;
  bool coalesced = false, prefetch = false;  // the fetch (see zero3_gather_groups)
  bool qgz = false;
};
inline Bytes zeropp_bytes(const ModelLayout& l, Precision precision, uint64_t persist, double N,
                          double G, uint64_t reuse_distance, ZeroppKnobs k) {
  const double M = N / G, bp = param_bytes(precision), bg = bp;
  const bool once = reuse_distance >= 2 * l.num_params();
  if (!once && reuse_distance != 0) throw std::invalid_argument("no closed form: reuse distance");
  const double inter_hops = M > 1 ? M : 0;
  const std::vector<bool> persistent = zero3_persistent(l, persist);
  Bytes b;
  auto world_ring = [&](double per_rank) {
    b.intra += (N - inter_hops) * per_rank;
    b.inter += inter_hops * per_rank;
  };
  for (size_t t = 0; t < l.tensors.size(); ++t) {
    const ParamTensor& info = l.tensors[t];
    const double pad = double(round_up(info.numel, uint64_t(N)));
    if (k.qgz && M > 1 && qgz_all_to_all(info, N)) {
      const double groups = std::max({double(info.shape[0]), double(info.shape[1]), N});
      const double slot = pad / (2 * N) + 4 * std::max(1.0, std::floor(groups / N));
      b.intra += N * (G - 1) * M * slot;
      b.inter += N * (M - 1) * slot;
    } else {
      world_ring((N - 1) / N * pad * bg);  // the gradient reduce-scatter
    }
    if (persistent[t]) world_ring((N - 1) / N * pad * bp);  // the refresh after the step
  }
  for (const GatherGroup& g : zero3_gather_groups(l, persistent, once, k.prefetch, k.coalesced,
                                                  k.hpz)) {
    const double S = g.secondary ? G : N;
    double n = 0;  // elements of each rank's block
    for (int t : g.tensors) n += double(round_up(l.tensors[t].numel, uint64_t(N))) / S;
    const double sent = (S - 1) * (k.qwz ? n + 4.0 * double(ds_quant_blocks(uint64_t(n))) : n * bp);
    if (g.secondary)
      b.intra += N * sent;
    else
      world_ring(sent);
  }
  return b;
}

// hpZ's secondary partitions at the peak: as shipped (reuse 1e9) every non-persistent tensor is
// released at the end of backward and keeps its padded / G slice until the step; their sum.
inline uint64_t hpz_secondary_bytes(const ModelLayout& l, Precision precision, uint64_t persist,
                                    uint64_t N, uint64_t G) {
  uint64_t sum = 0;
  for (const auto& t : l.tensors)
    if (t.numel > persist) sum += round_up(t.numel, N) / G;
  return sum * uint64_t(param_bytes(precision));
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
// unit padded to S; FSDP2 the same with each parameter padded to S rows (fsdp2_padded).
inline ModelState expected_state(const std::string& s, const ModelLayout& l, Precision precision,
                                 uint64_t persist_elements, uint64_t N, uint64_t G,
                                 uint64_t P = 0,
                                 bool ddp_bf16_params = false,
                                 uint64_t model_persist = UINT64_MAX,
                                 bool fsdp2_reduce_fp32 = false) {
  const uint64_t bp = uint64_t(param_bytes(precision));
  const bool fsdp2_rows = s == "fsdp2" || s == "fsdp2_hsdp";
  const uint64_t bg = fsdp2_rows && fsdp2_reduce_fp32 ? 4 : bp;  // the fp32 sharded grads
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
    const std::vector<bool> persists = zero3_persistent(l, persist_elements, model_persist);
    for (size_t t = 0; t < l.tensors.size(); ++t) {
      pad += round_up(l.tensors[t].numel, N);
      if (persists[t]) persistent += round_up(l.tensors[t].numel, N);  // whole: params only
    }
    return {bp * (pad / N + persistent), bg * pad / N, K * pad / N};
  }
  if (s == "mics") {  // each parameter flat, padded to the partition of P
    const uint64_t part = P > 0 ? P : G, pad = fsdp2_padded(l, part, false).first;
    return {bp * pad / part, bg * pad / part, K * pad / part};
  }
  const bool hybrid = s.find("hybrid") != std::string::npos || s == "fsdp2_hsdp";
  const uint64_t S = hybrid ? G : N;
  const uint64_t pad =
      s.rfind("fsdp2", 0) == 0 ? fsdp2_padded(l, S).first : fsdp_padded(l, S).first;
  return {bp * pad / S, bg * pad / S, K * pad / S};
}

}  // namespace sb::closed_forms
