// Every knob a strategy may read (StrategyOptions; the CLI fills it from bench/cli/option_rows.cc,
// the results file echoes it) and the enums its knobs take.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/common/dtype.h"
#include "harness/optim/shard_optimizer.h"

namespace sb {

enum class Precision { kFp32, kBf16Mixed };
enum class BackwardPrefetch { kNone, kPre, kPost };
// ZeRO-1/2 gradient reduction. DeepSpeed as shipped (stage_1_and_2.py average_tensor with
// reduce_scatter and use_multi_rank_bucket_allreduce both true, the defaults) all-reduces each
// bucket and keeps the owned slice (allreduce_and_scatter); with
// use_multi_rank_bucket_allreduce false it issues one reduce per owning rank's slice of the
// bucket (allreduce_no_retain(rank=dst) -> allreduce_bucket -> dist.reduce); the ZeRO paper
// reduce-scatters.
enum class ZeroGradReduce { kBucketAllReduce, kReduceScatter, kReducePerOwner };
// Named settings: DeepSpeed's defaults as shipped, or the ZeRO paper's ideal schedule.
enum class ZeroSchedule { kShipped, kPaper };
enum class MicsSchedule { kShipped, kPerUnit };
enum class QgzVariant { kShipped, kSuite };
// FSDP2's reshard_after_forward=None and =True. fully_shard (_fully_shard/_fully_shard.py)
// records auto_reshard_after_forward = reshard_after_forward is None, and FSDPState._lazy_init
// (_fsdp_state.py) clears the root's post_forward_mesh_info only in that case: an explicit True
// or int reshards the root too, whose parameters are then all-gathered again in backward.
inline constexpr int kFsdp2ReshardAuto = -1, kFsdp2ReshardTrue = -2;

// Every knob a strategy may read; the CLI fills it, the JSON echoes it.
struct StrategyOptions {
  Precision precision = Precision::kFp32;
  std::string wrap = "block";            // block | model | every-K
  double bucket_mb = 25.0;               // DDP / ZeRO gradient bucket cap
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kPre;
  bool forward_prefetch = false;
  bool limit_all_gathers = true;         // FSDP: wait on the free event two reshards back
  bool overlap = true;                   // async collectives; off = wait on each at once
  uint64_t prefetch_elements = 50'000'000;  // ZeRO-3 stage3_prefetch_bucket_size
  uint64_t persist_elements = 0;            // ZeRO-3 stage3_param_persistence_threshold
  ZeroGradReduce zero_grad_reduce = ZeroGradReduce::kBucketAllReduce;  // ZeRO-1/2, as shipped
  // ZeRO-3 stage3_max_reuse_distance (elements): a tensor used again within it is kept
  // gathered (partitioned_param_coordinator.py __params_to_release); 0 = always release.
  uint64_t reuse_distance = 1'000'000'000;
  // ZeRO-3 stage3_max_live_parameters: what may be gathered at once bounds the prefetch
  // (partitioned_param_coordinator.py fetch_sub_module: min(max_live - available, prefetch)).
  uint64_t max_live_elements = 1'000'000'000;
  // ZeRO-3 stage3_model_persistence_threshold: the persisted total's cap (parameter_offload.py
  // mark_persistent_parameters); DeepSpeed's default sys.maxsize.
  uint64_t model_persist_elements = 9'223'372'036'854'775'807ULL;
  // ZeRO-3 fetch: one all-gather per fetch batch (DeepSpeed's all_gather_coalesced, as shipped)
  // or one per tensor (the paper schedule).
  bool zero3_coalesced_fetch = true;
  // FSDP2 reshard_after_forward: kFsdp2ReshardAuto (None, fully_shard's default: True except the
  // root), kFsdp2ReshardTrue (True, the root too), 0 False, k >= 1 a post-forward group of k
  // ranks (1 = False, the shard group size = True, else the node; the root too); groups
  // prefetched ahead.
  int fsdp2_reshard_after_forward = -1;
  int fsdp2_prefetch = 1;
  // MiCS: ranks per partition group (0: the node) and the two-level all-gather when a partition
  // spans nodes (DeepSpeed mics_shard_size, mics_hierarchical_params_gather).
  int mics_shard_size = 0;
  bool mics_hierarchical_params_gather = false;
  // MiCS's schedule: DeepSpeed's (mics.py swaps only ZeRO-3's all-gather: ZeRO-3's fetch,
  // release and bucketed reduce over the partition group) or the per-unit one (FSDP2-style).
  MicsSchedule mics_schedule = MicsSchedule::kShipped;
  // FSDP2 MixedPrecisionPolicy.reduce_dtype (_fully_shard/_fsdp_api.py): None, the gradients'
  // own dtype (false), or fp32 (true; torchtitan's mixed_precision_reduce default).
  bool fsdp2_reduce_fp32 = false;
  // ZeRO-3 contiguous_gradients (stage3.py DeepSpeedZeroOptimizer_Stage3.__init__, "# IPG"): one
  // reduce_bucket_size buffer per communication dtype allocated up front, held all run.
  bool zero_contiguous_gradients = true;
  // ZeRO++ on zero3 (DeepSpeed zero/config.py): hpZ, a secondary partition of each gathered
  // parameter over this many ranks (1: off; else the node), gathered in backward; qwZ, int8
  // block-quantised parameter all-gathers (strategies/zeropp.cc).
  int zero_hpz_partition_size = 1;
  bool zero_quantized_weights = false;
  // ZeRO++ qgZ: gradients reduce-scattered as a hierarchical all-to-all of int4 blocks (zero3,
  // across nodes only; strategies/qgz.h).
  bool zero_quantized_gradients = false;
  // DeepSpeed's communication_data_type for ZeRO-3's gradient reduction: the gradients' dtype
  // (false) or fp16 (true: stage3.py casts each gradient to it before reducing; qgZ's quantiser
  // reads fp16, csrc/quantization/pt_binding.cpp).
  bool zero_comm_fp16 = false;
  // qgZ as shipped (fp16 gradients only; the quantised path's output L times the mean,
  // coalesced_collectives.py all_to_all_quant_reduce) or the suite's variant (the gradients'
  // own dtype quantised; the mean on every path).
  QgzVariant zero_qgz_variant = QgzVariant::kShipped;
  AdamWConfig adamw;
  uint64_t seed = 1234;
  // PyTorch DDP as shipped (torch 1.13.1; --ddp-config): see strategies/ddp.cc.
  struct Ddp {
    double bucket_cap_mb = 0;              // 0: --bucket-mb (DDP's bucket_cap_mb, 25)
    double first_bucket_mb = 1.0;          // dist._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB
    bool gradient_as_bucket_view = false;  // false: the bucket is a second copy of the grads
    bool bf16_params = false;  // bf16-mixed: false = autocast (fp32 params, grads, all-reduce)
    std::vector<std::string> ignored;      // accepted --ddp-config keys the suite does not model
  } ddp;
  // Gradient accumulation: micro-batches per optimizer step (each of the run's batch per rank).
  int grad_accum = 1;
  // FSDP under accumulation: true = no_sync() (unsharded grads kept, one reduce-scatter); false
  // = reduce-scatter every micro-batch and accumulate the shards (_saved_grad_shard).
  bool fsdp_no_sync = true;
  // FSDP use_orig_params=True (torch >= 2.0, _flat_param.py): every original tensor starts
  // 16-byte aligned inside its unit's FlatParameter (padding before it).
  bool fsdp_use_orig_params = false;
  // --fsdp-config FILE (bench/cli/fsdp_config.h): the file, the fsdp_* strategy its
  // sharding_strategy selects, and its keys accepted but not modelled.
  struct FsdpConfig {
    std::string file, strategy;
    std::vector<std::string> ignored;
  } fsdp_config;

  DType param_dtype() const { return precision == Precision::kFp32 ? DType::kF32 : DType::kBF16; }
  DType grad_dtype() const { return param_dtype(); }
  uint64_t bucket_elements() const;  // bucket_mb in elements of the grad dtype
};

// The knobs each named ZeRO schedule sets (a spec table: see registry.cc).
void apply_zero_schedule(ZeroSchedule s, StrategyOptions& o);

}  // namespace sb
