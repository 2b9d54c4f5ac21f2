// ZeRO-3's parameter partitions, fetches and releases (see header).
#include "strategies/zero3_params.h"

#include <algorithm>

#include "harness/model/checkpointing.h"

namespace sb {

void PartitionedParams::setup(const std::function<void(int t)>& each) {
  check();
  const int n = group_size(shard_);
  const size_t nt = ctx_.model.tensors.size();
  flats_.reserve(nt);
  for (size_t t = 0; t < nt; ++t) flats_.push_back(FlatLayout::build(ctx_.model, {int(t)}, n));
  shards_.resize(nt);
  full_.resize(nt);
  gather_.resize(nt);
  mark_persistent();
  batch_of_.resize(nt);
  for (size_t t = 0; t < nt; ++t) {
    shards_[t] = TypedBuffer(ctx_.memory, MemCategory::kParams, ctx_.options.param_dtype(),
                             flats_[t].shard_size(n));
    each(int(t));
    if (persistent_[t])
      full_[t] = TypedBuffer(ctx_.memory, MemCategory::kParams, ctx_.options.param_dtype(),
                             flats_[t].padded);
  }
  // Execution order of (module, pass) for prefetching, as DeepSpeed's trace records it:
  // forward, then backward reversed, with a checkpointed block's recompute before its
  // backward (CheckpointFunction.backward runs the block's forward: parameter_offload.py's
  // _pre_forward_module_hook records, fetches and, after it, releases its modules again).
  for (const ModuleVisit& v : step_visits(ctx_.model)) exec_.push_back(v.module);
  plan_releases();
  refresh_persistent();
}

// parameter_offload.py mark_persistent_parameters: in parameter order, a tensor of at most
// stage3_param_persistence_threshold elements (<=) persists unless it would take the persisted
// total past stage3_model_persistence_threshold (then it is skipped; a smaller later one may
// still fit). partition_parameters.py's own rule (_convert_to_deepspeed_param) is dead in
// 0.19.6: Init.apply_param_persistence is never set.
void PartitionedParams::mark_persistent() {
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
void PartitionedParams::fetch(int m) {
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
uint64_t PartitionedParams::prefetch_budget() const {
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
void PartitionedParams::issue_gathers(const std::vector<int>& tensors) {
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
  for (int t : need) split[!from_secondary(t)].push_back(t);
  for (const std::vector<int>& group : split) {
    if (group.size() == 1) gather_one(group[0]);
    if (group.size() > 1) issue_batch(group);
  }
}

PartitionedParams::InFlight PartitionedParams::start_gather(const void* src, void* dst,
                                                            uint64_t n, DType dt, GroupKind over,
                                                            const std::string& name) {
  // after this all-gather every rank of `over` holds every rank's block
  return {maybe_wait(ctx_.comm.all_gather_async(src, dst, n, dt, over, name)), {}};
}

// _all_gather_sequential: one tensor straight into its whole buffer.
void PartitionedParams::gather_one(int t) {
  full_[t] = TypedBuffer(ctx_.memory, MemCategory::kGatheredParams, shards_[t].dtype(),
                         flats_[t].padded);
  TypedBuffer& in = source(t);
  gather_[t] = start_gather(in.data(), full_[t].data(), in.size(), in.dtype(), group(t),
                            ctx_.model.tensors[t].name);
}

// _all_gather_coalesced (tensors sorted by ds_id): this rank's partitions (primary, or all
// secondary: the split keeps a batch one kind) concatenated into its block of one flat buffer,
// gathered in place (_all_gather_dtype; one dtype here). AllGatherCoalescedHandle.wait (land)
// copies each tensor out.
void PartitionedParams::issue_batch(std::vector<int> need) {
  std::sort(need.begin(), need.end());
  auto b = std::make_shared<FetchBatch>();
  b->tensors = need;
  b->over = group(need[0]);
  const uint64_t S = uint64_t(group_size(b->over)), me = uint64_t(group_index(b->over));
  for (int t : need) b->block += source(t).size();
  const DType dt = shards_[need[0]].dtype();
  b->flat = TypedBuffer(ctx_.memory, MemCategory::kGatheredParams, dt, b->block * S);
  uint64_t at = me * b->block;
  for (int t : need) {
    const TypedBuffer& in = source(t);
    ctx_.device.copy(b->flat.at(at), in.data(), in.bytes());
    at += in.size();
    batch_of_[t] = b;
  }
  b->gather = start_gather(b->flat.at(me * b->block), b->flat.data(), b->block, dt, b->over,
                           "fetch_batch");
}

void PartitionedParams::complete(InFlight& f) {
  if (f.handle.valid()) f.handle.wait();
  f.handle = CommHandle();
  if (!f.land) return;
  const std::function<void()> finish = std::move(f.land);
  f.land = nullptr;
  finish();
}

// Complete the batch tensor t arrives in (if any): every tensor of it copied out whole.
void PartitionedParams::land(int t) {
  if (!batch_of_[t]) return;
  const std::shared_ptr<FetchBatch> b = batch_of_[t];
  complete(b->gather);
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

void PartitionedParams::settle(int t) { complete(gather_[t]); }

TypedBuffer& PartitionedParams::whole(int t) {
  land(t);
  settle(t);
  return full_[t];
}

// For each trace position i, which of its tensors are released after it: those whose next use
// j > i comes after reuse_distance elements or more (every tensor of the modules i+1..j-1,
// whole, as ds_numel counts them) — __params_to_release's walk, which stops at the first
// module reached with that many elements behind it.
void PartitionedParams::plan_releases() {
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

void PartitionedParams::release(int m) {
  // The first forward/backward records the trace (DeepSpeed releases every tensor then).
  const bool traced = passes_ > 1 && cursor_ < exec_.size() && exec_[cursor_] == m;
  for (int t : traced ? release_at_[cursor_] : ctx_.model.modules[m].tensors) release_tensor(t);
}

void PartitionedParams::release_all() {
  for (size_t t = 0; t < full_.size(); ++t) release_tensor(int(t));
}

void PartitionedParams::release_tensor(int t) {
  if (persistent_[t]) return;
  whole(t);
  if (!full_[t].empty()) on_release(t);
  full_[t].reset();
}

void PartitionedParams::refresh_persistent() {
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

}  // namespace sb
