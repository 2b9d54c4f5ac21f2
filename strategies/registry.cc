// Name -> factory for every strategy, in the matrix's order; and the shared helpers of the
// strategy files (bucket element counts, gradient-ready order).
#include <algorithm>
#include <numeric>

#include "strategies/strategy.h"

namespace sb {

uint64_t StrategyOptions::bucket_elements() const {
  const double bytes = bucket_mb * 1024.0 * 1024.0;
  return std::max<uint64_t>(1, uint64_t(bytes / double(dtype_bytes(grad_dtype()))));
}

StrategyDescription fully_sharded(const char* name, const char* family, GroupKind group,
                                  Granularity granularity, bool replicated) {
  StrategyDescription d;
  d.name = name;
  d.family = family;
  d.shards_params = d.shards_grads = d.shards_optimizer = true;
  d.shard_group = group;
  d.replicate_across_nodes = replicated;
  d.granularity = granularity;
  return d;
}

namespace {
struct ZeroScheduleSpec {
  ZeroSchedule schedule;
  ZeroGradReduce grad_reduce;
  uint64_t reuse_distance;
  bool zero3_coalesced_fetch;
};
// shipped: DeepSpeed's defaults (zero/config.py: reduce_scatter, use_multi_rank_bucket_allreduce,
// stage3_max_reuse_distance 1e9, coalesced fetches); paper: ZeRO §5 (reduce-scatter; every
// gather released; one all-gather per tensor).
constexpr ZeroScheduleSpec kZeroSchedules[] = {
    {ZeroSchedule::kShipped, ZeroGradReduce::kBucketAllReduce, 1'000'000'000, true},
    {ZeroSchedule::kPaper, ZeroGradReduce::kReduceScatter, 0, false},
};
}  // namespace

void apply_zero_schedule(ZeroSchedule s, StrategyOptions& o) {
  for (const auto& spec : kZeroSchedules)
    if (spec.schedule == s) {
      o.zero_grad_reduce = spec.grad_reduce;
      o.reuse_distance = spec.reuse_distance;
      o.zero3_coalesced_fetch = spec.zero3_coalesced_fetch;
    }
}

const std::vector<StrategyEntry>& strategy_registry() {
  static const std::vector<StrategyEntry> registry = [] {
    std::vector<StrategyEntry> r;
    register_ddp(r);
    register_zero(r);
    register_zero3(r);
    register_fsdp(r);
    register_fsdp2(r);
    register_mics(r);
    return r;
  }();
  return registry;
}

const StrategyEntry* find_strategy(const std::string& name) {
  for (const auto& e : strategy_registry())
    if (e.description.name == name) return &e;
  return nullptr;
}

std::vector<std::string> strategy_names() {
  std::vector<std::string> v;
  for (const auto& e : strategy_registry()) v.push_back(e.description.name);
  return v;
}

std::vector<int> tensors_in_grad_ready_order(const ModelLayout& model) {
  const std::vector<int> ready = model.grad_ready_module();
  std::vector<int> order(model.tensors.size());
  std::iota(order.begin(), order.end(), 0);
  // Backward runs modules from last to first, so a later ready-module is ready earlier.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ready[a] > ready[b]; });
  return order;
}

std::vector<uint64_t> full_offsets(const ModelLayout& model) {
  std::vector<uint64_t> off(model.tensors.size());
  uint64_t at = 0;
  for (size_t t = 0; t < model.tensors.size(); ++t) {
    off[t] = at;
    at += model.tensors[t].numel;
  }
  return off;
}

void flat_to_full(const ModelLayout& model, const FlatLayout& flat, const void* data, DType dtype,
                  Device& device, std::vector<float>& out) {
  const std::vector<uint64_t> off = full_offsets(model);
  out.resize(model.num_params());
  std::vector<uint8_t> host(flat.padded * dtype_bytes(dtype));
  device.copy_to_host(host.data(), data, host.size());
  for (const FlatSlot& s : flat.slots) {
    for (uint64_t i = 0; i < s.numel; ++i) {
      const uint64_t e = s.offset + i;
      out[off[s.tensor] + i] =
          dtype == DType::kF32 ? reinterpret_cast<const float*>(host.data())[e]
                               : bf16_to_f32(reinterpret_cast<const uint16_t*>(host.data())[e]);
    }
  }
}

}  // namespace sb
