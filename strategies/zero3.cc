// ZeRO-3 (Rajbhandari et al. 2020 §5.3; DeepSpeed stage 3): every parameter tensor is
// partitioned on its own over the world. Before each leaf module its tensors are all-gathered
// (as shipped one coalesced all-gather per fetch batch, the paper's schedule one per tensor),
// later modules' gathers prefetched within --prefetch-elements and --max-live-elements; freed
// after the module, gathered again in backward. Tensors of at most --persist-elements (within
// --model-persist-elements in all) stay whole on every rank (no gather; refreshed after the step). Gradients are reduce-scattered in buckets of --bucket-mb: each bucket is staged as
// N blocks (block r = rank r's partitions of the bucket's tensors), one reduce-scatter each.
// As DeepSpeed ships it (partitioned_param_coordinator.py __params_to_release), a tensor used
// again within reuse_distance elements of the recorded trace is not released after a module;
// the first step records the trace and releases everything. Reuse distance 0 = the paper's.
// Under gradient accumulation every micro-batch gathers and reduce-scatters as a step does, and
// the reduced partitions are summed (stage3.py partition_grads: copy at micro_step_id 0, add_
// after); the trace is reset at every forward (parameter_offload.py _start_of_forward_hook).
// ZeRO++ (Wang et al. 2023; DeepSpeed zero_hpz_partition_size, zero_quantized_weights): hpZ keeps
// a node-local secondary partition of each tensor when it is released, and gathers from it inside
// the node until the optimizer step invalidates it; qwZ moves int8 codes + fp32 block scales
// (a batch quantised as one tensor: its codes in one all-gather, its scales in another);
// qgZ (zero_quantized_gradients, strategies/qgz.h) reduces each bucket tensor by tensor, a 2-D
// one as int4 over an all-to-all inside the node and then across nodes.
#include <algorithm>
#include <deque>
#include <memory>
#include <stdexcept>

#include "harness/model/checkpointing.h"
#include "strategies/accumulate.h"
#include "strategies/qgz.h"
#include "strategies/quantize.h"
#include "strategies/strategy.h"
#include "strategies/zero3.h"

namespace sb {
namespace {

StrategyDescription zero3_description() {
  StrategyDescription d;
  d.name = "zero3";
  d.family = "zero";
  d.shards_params = d.shards_grads = d.shards_optimizer = true;
  d.shard_group = GroupKind::kWorld;
  d.granularity = Granularity::kTensor;
  return d;
}

class Zero3 final : public Strategy {
 public:
  // desc.shard_group: the group each tensor is partitioned over (the world; MiCS: its
  // partition group); desc.replicate_across_nodes: the grad partitions are then all-reduced
  // over the replica group at the accumulation boundary (strategies/mics.cc).
  Zero3(StrategyContext c, StrategyDescription desc)
      : Strategy(std::move(c)), desc_(std::move(desc)), shard_(desc_.shard_group) {}
  const StrategyDescription& description() const override { return desc_; }

  void setup() override {
    check_hpz();
    const auto& o = ctx_.options;
    const int n = group_size(shard_), r = group_index(shard_);
    const size_t nt = ctx_.model.tensors.size();
    flats_.reserve(nt);
    for (size_t t = 0; t < nt; ++t) flats_.push_back(FlatLayout::build(ctx_.model, {int(t)}, n));
    shards_.resize(nt);
    grad_shards_.resize(nt);
    full_.resize(nt);
    secondary_.resize(nt);
    quant_.resize(nt);
    grad_full_.resize(nt);
    gather_.resize(nt);
    persistent_.resize(nt);
    mark_persistent();
    batch_of_.resize(nt);
    for (size_t t = 0; t < nt; ++t) {
      const uint64_t part = flats_[t].shard_size(n);
      shards_[t] = TypedBuffer(ctx_.memory, MemCategory::kParams, o.param_dtype(), part);
      grad_shards_[t] = TypedBuffer(ctx_.memory, MemCategory::kGrads, o.grad_dtype(), part);
      optim_.push_back(std::make_unique<ShardOptimizer>(ctx_.model, flats_[t], r * part,
                                                        (r + 1) * part, o.param_dtype(), o.adamw,
                                                        o.seed, ctx_.device, ctx_.memory));
      optim_.back()->init_params(shards_[t].data());
      if (persistent_[t])
        full_[t] = TypedBuffer(ctx_.memory, MemCategory::kParams, o.param_dtype(), flats_[t].padded);
    }
    // Execution order of (module, pass) for prefetching, as DeepSpeed's trace records it:
    // forward, then backward reversed, with a checkpointed block's recompute before its
    // backward (CheckpointFunction.backward runs the block's forward: parameter_offload.py's
    // _pre_forward_module_hook records, fetches and, after it, releases its modules again).
    for (const ModuleVisit& v : step_visits(ctx_.model)) exec_.push_back(v.module);
    plan_releases();
    refresh_persistent();
    // stage3.py __init__ "# IPG": with contiguous_gradients the reduce_bucket_size buffer of the
    // communication dtype is allocated here and held for the whole run.
    if (o.zero_contiguous_gradients)
      ipg_ = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, o.grad_dtype(),
                         o.bucket_elements());
    ipg_at_.assign(nt, 0);
  }

  void begin_step() override {
    cursor_ = 0;
    ++passes_;
    micro_ = 0;
  }
  void begin_micro_step(bool sync) override {
    sync_ = sync;
    if (micro_++ == 0) return;  // begin_step started the first one
    cursor_ = 0;
    ++passes_;
  }
  void on_pre_forward(int m) override { fetch(m); }
  void on_pre_backward(int m) override { fetch(m); }
  void on_post_forward(int m) override { release(m); }

  void on_post_backward(int m) override {
    release(m);
    if (cursor_ + 1 == exec_.size()) release_all();  // DeepSpeed's end-of-step release
    for (int t : ctx_.model.modules[m].tensors) {
      if (ready_[t] != m) continue;
      to_ipg(t);
      bucket_.push_back(t);
      bucket_elems_ += flats_[t].padded;
      if (bucket_elems_ >= ctx_.options.bucket_elements()) flush_bucket();
    }
  }

  void finish_backward() override {
    flush_bucket();
    reap_reductions(true);
    holds_sum_ = true;  // a later micro-batch of this step adds into the partitions
    if (sync_ && desc_.replicate_across_nodes) all_reduce_replicas();
  }

  void optimizer_step(int step) override {
    holds_sum_ = false;
    const float scale = mean_grad_scale();
    for (size_t t = 0; t < optim_.size(); ++t)
      optim_[t]->step(shards_[t].data(), grad_shards_[t].data(), grad_shards_[t].dtype(), scale,
                      step);
    // stage3.py _post_step -> invalidate_secondary_tensor: the updated shards make them stale
    for (TypedBuffer& s : secondary_) s.reset();
    refresh_persistent();
  }

  std::vector<float> gather_full_params() override {
    std::vector<float> out;
    for (size_t t = 0; t < flats_.size(); ++t) {
      TypedBuffer full(ctx_.memory, MemCategory::kWorkspace, shards_[t].dtype(), flats_[t].padded);
      ctx_.comm.all_gather(shards_[t].data(), full.data(), shards_[t].size(), full.dtype(),
                           shard_);
      flat_to_full(ctx_.model, flats_[t], full.data(), full.dtype(), ctx_.device, out);
    }
    return out;
  }
  uint64_t padded_params() const override {
    uint64_t n = 0;
    for (const auto& f : flats_) n += f.padded;
    return n;
  }

 protected:
  std::pair<const void*, DType> param_storage(int t) override {
    land(t);
    settle(t);
    return {full_[t].data(), full_[t].dtype()};
  }
  std::pair<void*, DType> grad_storage(int t) override {
    if (grad_full_[t].empty())  // the full grad lives from its first use until its bucket flushes
      grad_full_[t] = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, ctx_.options.grad_dtype(),
                                  flats_[t].padded);
    return {grad_full_[t].data(), grad_full_[t].dtype()};
  }

 private:
  struct Quantized {
    TypedBuffer codes, scales;  // every rank's int8 codes and fp32 block scales, in group order
    uint64_t blocks = 1;        // per rank
    CommHandle scale_gather;
  };
  struct FetchBatch {
    std::vector<int> tensors;  // sorted
    GroupKind over = GroupKind::kWorld;  // set per batch (gather_group)
    uint64_t block = 0;  // elements of each rank's block: the tensors' partitions back to back
    TypedBuffer flat;
    CommHandle handle;
    Quantized quant;  // qwZ: the block's codes and scales
  };
  struct Reduction {
    std::vector<int> tensors;
    TypedBuffer staging, out;
    CommHandle handle;
    std::unique_ptr<QgzReduce> qgz;  // qgZ's all-to-alls in place of `handle`
    bool done() const { return qgz ? qgz->done() : handle.done(); }
  };

  // parameter_offload.py mark_persistent_parameters: in parameter order, a tensor of at most
  // stage3_param_persistence_threshold elements (<=) persists unless it would take the persisted
  // total past stage3_model_persistence_threshold (then it is skipped; a smaller later one may
  // still fit). partition_parameters.py's own rule (_convert_to_deepspeed_param) is dead in
  // 0.19.6: Init.apply_param_persistence is never set.
  void mark_persistent() {
    const auto& o = ctx_.options;
    uint64_t persisted = 0;
    persistent_.assign(ctx_.model.tensors.size(), false);
    for (size_t t = 0; t < ctx_.model.tensors.size(); ++t) {
      const uint64_t numel = ctx_.model.tensors[t].numel;
      if (numel > o.model_persist_elements - persisted || numel > o.persist_elements) continue;
      persistent_[t] = true;
      persisted += numel;
    }
  }

  // Gather m's tensors (one fetch batch), then prefetch along the execution order: the window
  // ahead (materialised or not) within the budget, as a second batch.
  void fetch(int m) {
    while (cursor_ < exec_.size() && exec_[cursor_] != m) ++cursor_;
    issue_gathers(ctx_.model.modules[m].tensors);
    if (!ctx_.options.overlap) return;
    const uint64_t budget = prefetch_budget();
    uint64_t window = 0;
    std::vector<int> ahead;
    for (size_t i = cursor_ + 1; i < exec_.size(); ++i) {
      const std::vector<int>& ts = ctx_.model.modules[exec_[i]].tensors;
      for (int t : ts)
        if (!persistent_[t]) window += flats_[t].padded;
      if (window > budget) break;
      ahead.insert(ahead.end(), ts.begin(), ts.end());
    }
    issue_gathers(ahead);
  }

  // fetch_sub_module: min(stage3_max_live_parameters - elements gathered, prefetch bucket).
  uint64_t prefetch_budget() const {
    uint64_t live = 0;
    for (size_t t = 0; t < full_.size(); ++t)
      if (!persistent_[t] && (!full_[t].empty() || batch_of_[t])) live += flats_[t].padded;
    const uint64_t max_live = ctx_.options.max_live_elements;
    return std::min(ctx_.options.prefetch_elements, max_live > live ? max_live - live : 0);
  }

  // One fetch: the tensors not yet whole or on their way. The paper gathers each alone. As
  // shipped, partitioned_param_coordinator.py __all_gather_params_ splits them into those with an
  // hpZ secondary partition and those without and makes one all_gather_coalesced call of each
  // (secondary first); partition_parameters.py all_gather_coalesced gathers a lone tensor directly
  // (_all_gather_sequential) and several as one batch (_all_gather_coalesced).
  void issue_gathers(const std::vector<int>& tensors) {
    std::vector<int> need;
    for (int t : tensors)
      if (!persistent_[t] && full_[t].empty() && !batch_of_[t] &&
          std::find(need.begin(), need.end(), t) == need.end())
        need.push_back(t);
    if (!ctx_.options.zero3_coalesced_fetch) {
      for (int t : need) gather_one(t);
      return;
    }
    std::vector<int> split[2];  // with a secondary partition, without
    for (int t : need) split[secondary_[t].empty()].push_back(t);
    for (const std::vector<int>& group : split) {
      if (group.size() == 1) gather_one(group[0]);
      if (group.size() > 1) issue_batch(group);
    }
  }

  // qwZ quantises a real gather only: all_gather_coalesced takes _no_gather_coalesced (nothing
  // sent, nothing quantised) when the partition group is one rank (a world of 1).
  bool quantizes(GroupKind over) const {
    return ctx_.options.zero_quantized_weights && group_size(over) > 1;
  }

  // What tensor t is gathered from and over which group: hpZ (all_gather_coalesced: a tensor
  // with a secondary partition goes over zero_param_process_group, the node) or the world.
  TypedBuffer& gather_source(int t) { return secondary_[t].empty() ? shards_[t] : secondary_[t]; }
  GroupKind gather_group(int t) const {
    return secondary_[t].empty() ? shard_ : GroupKind::kIntra;
  }

  // _all_gather_sequential: one tensor straight into its whole buffer; with qwZ its own codes
  // and scales (settle() dequantises).
  void gather_one(int t) {
    full_[t] = TypedBuffer(ctx_.memory, MemCategory::kGatheredParams, shards_[t].dtype(),
                           flats_[t].padded);
    TypedBuffer& in = gather_source(t);
    const GroupKind over = gather_group(t);
    const std::string& name = ctx_.model.tensors[t].name;
    if (quantizes(over)) {
      gather_[t] = gather_quantized(quant_[t], in.data(), in.dtype(), in.size(), over, name);
      return;
    }
    // after this all-gather every rank holds tensor t whole
    gather_[t] = maybe_wait(
        ctx_.comm.all_gather_async(in.data(), full_[t].data(), in.size(), in.dtype(), over, name));
  }

  // _all_gather_coalesced (tensors sorted by ds_id): this rank's partitions (primary, or all
  // secondary: the split keeps a batch one kind) concatenated into its block of one flat buffer,
  // gathered in place (_all_gather_dtype; one dtype here); with qwZ the block is quantised as one
  // tensor and its codes and scales gathered, two collectives. AllGatherCoalescedHandle.wait
  // (land) dequantises the whole buffer and copies each tensor out.
  void issue_batch(std::vector<int> need) {
    std::sort(need.begin(), need.end());
    auto b = std::make_shared<FetchBatch>();
    b->tensors = need;
    b->over = gather_group(need[0]);
    const uint64_t S = uint64_t(group_size(b->over)), me = uint64_t(group_index(b->over));
    for (int t : need) b->block += gather_source(t).size();
    const DType dt = shards_[need[0]].dtype();
    b->flat = TypedBuffer(ctx_.memory, MemCategory::kGatheredParams, dt, b->block * S);
    uint64_t at = me * b->block;
    for (int t : need) {
      const TypedBuffer& in = gather_source(t);
      ctx_.device.copy(b->flat.at(at), in.data(), in.bytes());
      at += in.size();
      batch_of_[t] = b;
    }
    void* mine = b->flat.at(me * b->block);
    if (quantizes(b->over)) {
      b->handle = gather_quantized(b->quant, mine, dt, b->block, b->over, "fetch_batch");
      return;
    }
    // after this all-gather every rank of the group holds every partition of the batch
    b->handle = maybe_wait(ctx_.comm.all_gather_async(mine, b->flat.data(), b->block, dt, b->over,
                                                      "fetch_batch"));
  }

  // Complete the batch tensor t arrives in (if any): every tensor of it copied out whole.
  void land(int t) {
    if (!batch_of_[t]) return;
    const std::shared_ptr<FetchBatch> b = batch_of_[t];
    b->handle.wait();
    if (b->quant.scale_gather.valid()) dequantize(b->quant, b->flat.data(), b->flat.dtype());
    const uint64_t S = uint64_t(group_size(b->over));
    const size_t eb = dtype_bytes(b->flat.dtype());
    uint64_t off = 0;  // the tensor's partition within each rank's block
    for (int u : b->tensors) {
      const uint64_t part = flats_[u].padded / S;
      full_[u] = TypedBuffer(ctx_.memory, MemCategory::kGatheredParams, b->flat.dtype(),
                             flats_[u].padded);
      for (uint64_t q = 0; q < S; ++q)
        ctx_.device.copy(full_[u].at(q * part), b->flat.at(q * b->block + off), part * eb);
      off += part;
      batch_of_[u].reset();
    }
  }

  // qwZ (_all_gather_sequential / _all_gather_coalesced with quantize): my n elements at src
  // quantised as one tensor (CUDAQuantizer.quantize's blocks), then the int8 codes and the fp32
  // block scales each all-gathered over `over`. Returns the codes' handle; dequantize() finishes.
  CommHandle gather_quantized(Quantized& q, const void* src, DType dt, uint64_t n, GroupKind over,
                              const std::string& name) {
    const uint64_t ranks = uint64_t(group_size(over)), me = uint64_t(group_index(over));
    q.blocks = qwz_blocks(n);
    q.codes = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, DType::kI8, n * ranks);
    q.scales = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, DType::kF32, q.blocks * ranks);
    quantize_int8(ctx_.device, src, dt, n, q.blocks, q.codes.at(me * n),
                  q.scales.at(me * q.blocks));
    // after these all-gathers every rank holds every rank's codes and scales
    CommHandle codes = maybe_wait(
        ctx_.comm.all_gather_async(q.codes.at(me * n), q.codes.data(), n, DType::kI8, over, name));
    q.scale_gather = maybe_wait(ctx_.comm.all_gather_async(q.scales.at(me * q.blocks),
                                                           q.scales.data(), q.blocks, DType::kF32,
                                                           over, name + ".scales"));
    return codes;
  }

  // Waits for q's scales and dequantises every rank's block into dst (ranks · n elements).
  void dequantize(Quantized& q, void* dst, DType dt) {
    q.scale_gather.wait();
    const uint64_t ranks = q.scales.size() / q.blocks;
    dequantize_int8(ctx_.device, q.codes.data(), q.scales.data(), q.codes.size() / ranks, q.blocks,
                    ranks, dst, dt);
    q = Quantized();
  }

  // Waits for tensor t's own gather; a quantised one is dequantised into full_[t] here.
  void settle(int t) {
    if (gather_[t].valid()) gather_[t].wait();
    gather_[t] = CommHandle();
    if (quant_[t].scale_gather.valid()) dequantize(quant_[t], full_[t].data(), full_[t].dtype());
  }

  // hpZ's secondary group is the node (DeepSpeed's groups of zero_hpz_partition_size consecutive
  // ranks, as its tutorial sets it: the GPUs of a node).
  void check_hpz() const {
    const int k = ctx_.options.zero_hpz_partition_size;
    if (k > 1 && k != group_size(GroupKind::kIntra))
      throw std::invalid_argument("--zero-hpz-partition-size " + std::to_string(k) +
                                  ": must be 1 or the ranks per node (" +
                                  std::to_string(group_size(GroupKind::kIntra)) + ")");
  }

  // For each trace position i, which of its tensors are released after it: those whose next use
  // j > i comes after reuse_distance elements or more (every tensor of the modules i+1..j-1,
  // whole, as ds_numel counts them) — __params_to_release's walk, which stops at the first
  // module reached with that many elements behind it.
  void plan_releases() {
    const auto& mods = ctx_.model.modules;
    std::vector<uint64_t> before(exec_.size() + 1, 0);  // elements of trace positions [0, p)
    for (size_t p = 0; p < exec_.size(); ++p) {
      before[p + 1] = before[p];
      for (int t : mods[exec_[p]].tensors) before[p + 1] += ctx_.model.tensors[t].numel;
    }
    std::vector<size_t> next_use(ctx_.model.tensors.size(), exec_.size());
    release_at_.assign(exec_.size(), {});
    for (size_t i = exec_.size(); i-- > 0;) {  // backwards, so next_use is the next position
      for (int t : mods[exec_[i]].tensors) {
        const size_t j = next_use[t];
        if (j == exec_.size() || before[j] - before[i + 1] >= ctx_.options.reuse_distance)
          release_at_[i].push_back(t);
      }
      for (int t : mods[exec_[i]].tensors) next_use[t] = i;
    }
  }

  void release(int m) {
    // The first forward/backward records the trace (DeepSpeed releases every tensor then).
    const bool traced = passes_ > 1 && cursor_ < exec_.size() && exec_[cursor_] == m;
    for (int t : traced ? release_at_[cursor_] : ctx_.model.modules[m].tensors) release_tensor(t);
    reap_reductions(false);
  }

  void release_all() {
    for (size_t t = 0; t < full_.size(); ++t) release_tensor(int(t));
  }

  void release_tensor(int t) {
    if (persistent_[t]) return;
    land(t);
    settle(t);
    if (ctx_.options.zero_hpz_partition_size > 1 && secondary_[t].empty() && !full_[t].empty())
      keep_secondary(t);
    full_[t].reset();
  }

  // _partition_param_sec: my slice of the gathered tensor over the node (padded / G elements at
  // my local rank), kept until the optimizer step.
  void keep_secondary(int t) {
    const uint64_t G = uint64_t(group_size(GroupKind::kIntra)), len = flats_[t].padded / G;
    const uint64_t mine = uint64_t(group_index(GroupKind::kIntra)) * len;
    secondary_[t] = TypedBuffer(ctx_.memory, MemCategory::kSecondaryParams, full_[t].dtype(), len);
    ctx_.device.copy(secondary_[t].data(), full_[t].at(mine), secondary_[t].bytes());
  }

  // __add_grad_to_ipg_bucket: a gradient that fits what is left of the IPG buffer is copied into
  // it and its own storage freed (param.grad becomes the view); one that does not keeps its own.
  void to_ipg(int t) {
    const uint64_t n = flats_[t].padded;
    if (ipg_.empty() || grad_full_[t].empty() || bucket_elems_ + n > ipg_.size()) return;
    ctx_.device.copy(ipg_.at(bucket_elems_), grad_full_[t].data(), grad_full_[t].bytes());
    ipg_at_[t] = bucket_elems_;
    grad_full_[t].reset();
  }
  // Tensor t's full gradient, element `at` on: in its own buffer or in the IPG buffer.
  const void* grad_of(int t, uint64_t at = 0) const {
    return grad_full_[t].empty() ? ipg_.at(ipg_at_[t] + at) : grad_full_[t].at(at);
  }

  void flush_bucket() {
    if (bucket_.empty()) return;
    if (qgz_active())
      for (int t : bucket_) reductions_.push_back(qgz_reduction(t));
    else
      reductions_.push_back(bucket_reduction());
    bucket_.clear();
    bucket_elems_ = 0;
    reap_reductions(false);
  }

  // stage3.py __avg_scatter_grads: qgZ only when the world spans more than one node.
  bool qgz_active() const {
    return ctx_.options.zero_quantized_gradients && ctx_.comm.topology().num_nodes() > 1;
  }

  // all_to_all_quant_reduce, one tensor: its qgZ reduction, or (1-D, or numel not a multiple of
  // 2·world) reduce_scatter_coalesced([tensor]): a reduce-scatter of this tensor alone, whose
  // padded flat already holds partition r at r·part.
  Reduction qgz_reduction(int t) {
    const ParamTensor& info = ctx_.model.tensors[t];
    Reduction red;
    red.tensors = {t};
    red.out = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, ctx_.options.grad_dtype(),
                          flats_[t].shard_size(group_size(shard_)));
    if (qgz_eligible(info, world())) {
      red.qgz = std::make_unique<QgzReduce>(
          ctx_.comm, ctx_.device, ctx_.memory, grad_of(t), ctx_.options.grad_dtype(),
          flats_[t].padded, qgz_groups_per_partition(info, world()), ctx_.options.overlap,
          info.name);
      grad_full_[t].reset();
      return red;
    }
    if (grad_full_[t].empty()) {  // in the IPG buffer, which the next bucket reuses
      red.staging = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers,
                                ctx_.options.grad_dtype(), flats_[t].padded);
      ctx_.device.copy(red.staging.data(), grad_of(t), red.staging.bytes());
    } else {
      red.staging = std::move(grad_full_[t]);
    }
    // after this reduce-scatter each rank holds the summed grads of its partition of t
    red.handle = maybe_wait(ctx_.comm.reduce_scatter_async(red.staging.data(), red.out.data(),
                                                           red.out.size(), red.out.dtype(),
                                                           shard_, info.name));
    return red;
  }

  // One reduce-scatter of the bucket, staged as N blocks (block q = every tensor's partition q).
  Reduction bucket_reduction() {
    const int n = group_size(shard_);
    uint64_t block = 0;
    for (int t : bucket_) block += flats_[t].shard_size(n);
    Reduction red;
    red.tensors = bucket_;
    red.staging = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, ctx_.options.grad_dtype(),
                              block * n);
    red.out = TypedBuffer(ctx_.memory, MemCategory::kCommBuffers, ctx_.options.grad_dtype(), block);
    const size_t eb = dtype_bytes(red.staging.dtype());
    for (int q = 0; q < n; ++q) {  // block q = every tensor's partition q, back to back
      uint64_t at = uint64_t(q) * block;
      for (int t : bucket_) {
        const uint64_t part = flats_[t].shard_size(n);
        ctx_.device.copy(red.staging.at(at), grad_of(t, q * part), part * eb);
        at += part;
      }
    }
    for (int t : bucket_) grad_full_[t].reset();
    // after this reduce-scatter each rank holds the summed grads of its partitions
    red.handle = maybe_wait(ctx_.comm.reduce_scatter_async(red.staging.data(), red.out.data(), block,
                                                           red.out.dtype(), shard_,
                                                           "grad_bucket"));
    return red;
  }

  // Copy finished reductions into the grad shards and free their staging.
  void reap_reductions(bool all) {
    while (!reductions_.empty() && (all || reductions_.front().done())) {
      Reduction& red = reductions_.front();
      if (red.qgz)  // as shipped: L x the sum (all_to_all_quant_reduce's / num_nodes)
        red.qgz->finish(red.out, ctx_.options.zero_qgz_variant == QgzVariant::kShipped
                                     ? float(group_size(GroupKind::kIntra))
                                     : 1.0f);
      else
        red.handle.wait();
      uint64_t at = 0;
      const size_t eb = dtype_bytes(red.out.dtype());
      for (int t : red.tensors) {
        if (holds_sum_)
          add_grads(ctx_.device, ctx_.memory, grad_shards_[t].data(), red.out.at(at),
                    grad_shards_[t].size(), grad_shards_[t].dtype());
        else
          ctx_.device.copy(grad_shards_[t].data(), red.out.at(at), grad_shards_[t].size() * eb);
        at += grad_shards_[t].size();
      }
      reductions_.pop_front();
    }
  }

  void refresh_persistent() {
    std::vector<CommHandle> hs;
    for (size_t t = 0; t < flats_.size(); ++t) {
      if (!persistent_[t]) continue;
      // after this all-gather every rank holds the updated persistent tensor whole
      hs.push_back(ctx_.comm.all_gather_async(shards_[t].data(), full_[t].data(), shards_[t].size(),
                                              shards_[t].dtype(), shard_,
                                              ctx_.model.tensors[t].name));
    }
    for (auto& h : hs) h.wait();
  }


  // MiCS_Optimizer.allreduce_mics_shard_grads (mics.py): at the accumulation boundary every
  // grad partition is all-reduced over the replica group, one all_reduce_coalesced (flattened).
  void all_reduce_replicas() {
    if (group_size(GroupKind::kReplica) < 2) return;
    uint64_t n = 0;
    for (const TypedBuffer& g : grad_shards_) n += g.size();
    const DType dt = ctx_.options.grad_dtype();
    TypedBuffer flat(ctx_.memory, MemCategory::kCommBuffers, dt, n);
    uint64_t at = 0;
    for (const TypedBuffer& g : grad_shards_) {
      ctx_.device.copy(flat.at(at), g.data(), g.bytes());
      at += g.size();
    }
    // after this all-reduce every partition also sums the other replicas' gradients
    ctx_.comm.all_reduce(flat.data(), n, dt, GroupKind::kReplica, "replica_grads");
    at = 0;
    for (TypedBuffer& g : grad_shards_) {
      ctx_.device.copy(g.data(), flat.at(at), g.bytes());
      at += g.size();
    }
  }

  StrategyDescription desc_;
  GroupKind shard_ = GroupKind::kWorld;
  bool sync_ = true;  // this micro-batch ends the accumulation
  std::vector<int> ready_ = ctx_.model.grad_ready_module();
  std::vector<FlatLayout> flats_;
  std::vector<TypedBuffer> shards_, grad_shards_, full_, grad_full_, secondary_;
  TypedBuffer ipg_;               // contiguous_gradients' IPG buffer (empty: off)
  std::vector<uint64_t> ipg_at_;  // per tensor: where its gradient sits in it
  std::vector<Quantized> quant_;
  std::vector<CommHandle> gather_;
  std::vector<std::shared_ptr<FetchBatch>> batch_of_;  // per tensor: the batch it arrives in
  std::vector<bool> persistent_;
  std::vector<std::unique_ptr<ShardOptimizer>> optim_;
  std::vector<int> exec_;
  std::vector<std::vector<int>> release_at_;  // per trace position: tensors released after it
  size_t cursor_ = 0;
  int passes_ = 0;  // forward/backward passes started (micro-batches over all steps)
  int micro_ = 0;   // micro-batches started in this step
  bool holds_sum_ = false;  // the grad partitions hold this step's sum so far
  std::vector<int> bucket_;
  uint64_t bucket_elems_ = 0;
  std::deque<Reduction> reductions_;
};

}  // namespace

void register_zero3(std::vector<StrategyEntry>& out) {
  out.push_back({zero3_description(), [](StrategyContext c) -> std::unique_ptr<Strategy> {
                   return std::make_unique<Zero3>(std::move(c), zero3_description());
                 }});
}

std::unique_ptr<Strategy> make_zero3(StrategyContext c, StrategyDescription d) {
  return std::make_unique<Zero3>(std::move(c), std::move(d));
}

}  // namespace sb
