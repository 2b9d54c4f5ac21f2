// ZeRO-3's parameters (DeepSpeed stage 3: partition_parameters.py and
// partitioned_param_coordinator.py, 0.19.6): every tensor partitioned on its own over the shard
// group, gathered whole before the module that uses it, prefetched along the recorded trace
// and released after it unless used again within the reuse distance; small tensors persist
// whole. The strategy (strategies/zero3.cc) owns the gradients and the optimizer; ZeRO++
// (strategies/zeropp.cc) changes where a gather reads from and what it sends through the
// virtual hooks at the bottom.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strategies/strategy.h"

namespace sb {

class PartitionedParams {
 public:
  PartitionedParams(const StrategyContext& ctx, GroupKind shard) : ctx_(ctx), shard_(shard) {}
  virtual ~PartitionedParams() = default;

  // Partitions every tensor, calling `each(t)` once its primary partition exists (the
  // strategy's grad partition and optimizer, in the order DeepSpeed allocates them), then
  // records the execution order, plans the releases and gathers the persistent tensors.
  void setup(const std::function<void(int t)>& each);
  void begin_pass() {  // a forward/backward pass starts: the trace cursor back to its start
    cursor_ = 0;
    ++passes_;
  }
  void fetch(int m);    // m's tensors gathered (and, with overlap, the window ahead)
  void release(int m);  // m's tensors released as the trace plans it
  bool at_trace_end() const { return cursor_ + 1 == exec_.size(); }
  void release_all();
  virtual void after_step() { refresh_persistent(); }  // the shards were updated

  TypedBuffer& whole(int t);  // tensor t gathered, waited for and landed
  TypedBuffer& shard(int t) { return shards_[t]; }
  const FlatLayout& flat(int t) const { return flats_[t]; }
  size_t size() const { return flats_.size(); }
  GroupKind shard_group() const { return shard_; }

 protected:
  // A gather on its way into its destination: its handle, then what completes it (qwZ:
  // dequantising the gathered codes).
  struct InFlight {
    CommHandle handle;
    std::function<void()> land;
  };

  virtual void check() const {}  // a knob the group cannot serve: std::invalid_argument
  // What tensor t is gathered from, over which group, and whether it is gathered apart from
  // the primary partitions (ZeRO++ hpZ: a node-local secondary partition).
  virtual TypedBuffer& source(int t) { return shards_[t]; }
  virtual GroupKind group(int t) const { return shard_; }
  virtual bool from_secondary(int t) const { return false; }
  // All-gather n elements at src (this rank's block of dst) into dst over `over`.
  virtual InFlight start_gather(const void* src, void* dst, uint64_t n, DType dt, GroupKind over,
                                const std::string& name);
  virtual void on_release(int t) {}  // tensor t is whole and about to be freed

  int group_size(GroupKind g) const { return ctx_.comm.group(g).size(); }
  int group_index(GroupKind g) const { return ctx_.comm.group(g).index; }
  CommHandle maybe_wait(CommHandle h) const { return wait_unless_overlap(std::move(h), ctx_); }

  const StrategyContext& ctx_;
  GroupKind shard_;
  std::vector<FlatLayout> flats_;
  std::vector<TypedBuffer> shards_, full_;

 private:
  struct FetchBatch {
    std::vector<int> tensors;  // sorted
    GroupKind over = GroupKind::kWorld;
    uint64_t block = 0;  // elements of each rank's block: the tensors' partitions back to back
    TypedBuffer flat;
    InFlight gather;
  };

  void mark_persistent();
  uint64_t prefetch_budget() const;
  void issue_gathers(const std::vector<int>& tensors);
  void gather_one(int t);
  void issue_batch(std::vector<int> need);
  void land(int t);
  void settle(int t);
  void plan_releases();
  void release_tensor(int t);
  void refresh_persistent();
  static void complete(InFlight& f);

  std::vector<InFlight> gather_;                       // per tensor: its own gather
  std::vector<std::shared_ptr<FetchBatch>> batch_of_;  // per tensor: the batch it arrives in
  std::vector<bool> persistent_;
  std::vector<int> exec_;                     // the trace: modules in execution order
  std::vector<std::vector<int>> release_at_;  // per trace position: tensors released after it
  size_t cursor_ = 0;
  int passes_ = 0;  // forward/backward passes started (micro-batches over all steps)
};

}  // namespace sb
