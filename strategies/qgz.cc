// ZeRO++ qgZ: the hierarchical int4 all-to-all reduction of one tensor's gradient (see header).
#include "strategies/qgz.h"

#include <algorithm>

#include "harness/common/check.h"
#include "strategies/quantize.h"

namespace sb {

bool qgz_eligible(const ParamTensor& t, int world) {
  return t.shape.size() >= 2 && t.numel % (2 * uint64_t(world)) == 0;
}

uint64_t qgz_groups_per_partition(const ParamTensor& t, int world) {
  const uint64_t W = uint64_t(world);
  const uint64_t groups = std::max({uint64_t(t.shape.at(0)), uint64_t(t.shape.at(1)), W});
  return std::max<uint64_t>(1, groups / W);
}

QgzReduce::QgzReduce(Communicator& comm, Device& device, MemoryTracker& memory, const void* grad,
                     DType t, uint64_t padded, uint64_t groups_per_part, bool overlap,
                     const std::string& tag)
    : comm_(comm), device_(device), memory_(memory), groups_(groups_per_part),
      tag_(tag) {
  const uint64_t W = uint64_t(comm.topology().world_size());
  const uint64_t L = uint64_t(comm.group(GroupKind::kIntra).size());
  const uint64_t N = uint64_t(comm.group(GroupKind::kInter).size());
  part_ = padded / W;
  SB_CHECK(part_ % 2 == 0 && part_ * W == padded, "qgZ: partition of " << part_ << " elements");
  HostVector<float> swizzled;  // the partitions in wire order (swizzle_quant)
  if (device.holds_data()) {
    swizzled.resize(padded);
    const std::vector<int> order = wire_order();
    const size_t es = dtype_bytes(t);
    for (uint64_t s = 0; s < W; ++s)
      device_to_f32(device, static_cast<const char*>(grad) + uint64_t(order[s]) * part_ * es, t,
                    part_, swizzled.data() + s * part_);
  } else if (staged()) {
    device.copy_to_host(nullptr, grad, padded * dtype_bytes(t));  // bf16's widening: uncharged
  }
  Wire intra_recv;
  {
    Wire intra_send = quantise(swizzled, W);
    // after these all-to-alls block j holds local rank j's codes of my node's partitions
    intra_recv = exchange(intra_send, N, GroupKind::kIntra);
    wait_from_issue();
  }
  inter_send_ = quantise(dequantise_sum(intra_recv, L, N), N);  // quantized_reduction
  intra_recv = Wire();
  // after these all-to-alls block m holds node m's sum of my partition
  inter_recv_ = exchange(inter_send_, 1, GroupKind::kInter);
  if (!overlap) wait_from_issue();
}

// Both all-to-alls were issued together and nothing ran since: all of the time until the codes
// arrive counts as blocked, and only the time after it for the scales (not the same span twice).
void QgzReduce::wait_from_issue() {
  codes_handle_.wait_from_issue();
  scales_handle_.wait();
}

void QgzReduce::finish(TypedBuffer& out, float scale) {
  codes_handle_.wait();
  scales_handle_.wait();
  const uint64_t N = uint64_t(comm_.group(GroupKind::kInter).size());
  HostVector<float> sum = dequantise_sum(inter_recv_, N, 1);  // empty where no data is held
  if (device_.holds_data()) {
    for (float& x : sum) x *= scale;
    f32_to_device(device_, sum.data(), sum.size(), out.data(), out.dtype());
  } else if (staged()) {
    device_.copy_to_device(out.data(), nullptr, out.bytes());
  }
  inter_send_ = Wire();
  inter_recv_ = Wire();
}

// Slot s = j·N + m holds the partition of the m-th rank (ascending) with local index j: block j
// goes to local rank j, whose inter-node group is exactly those ranks (GroupKind::kInter).
std::vector<int> QgzReduce::wire_order() const {
  const Topology& topo = comm_.topology();
  std::vector<std::vector<int>> by_local;  // [local index]: ranks, ascending
  std::vector<int> seen(size_t(topo.world_size()), 0);  // per node id: its ranks met so far
  for (int r = 0; r < topo.world_size(); ++r) {
    const size_t j = size_t(seen[size_t(topo.node_of(r))]++);
    if (j >= by_local.size()) by_local.resize(j + 1);
    by_local[j].push_back(r);
  }
  SB_CHECK(by_local.at(size_t(topo.local_rank())) == comm_.group(GroupKind::kInter).ranks,
           "qgZ: the inter-node group is not the ranks with my local index");
  std::vector<int> order;
  for (const auto& ranks : by_local) order.insert(order.end(), ranks.begin(), ranks.end());
  return order;
}

QgzReduce::Wire QgzReduce::quantise(const HostVector<float>& parts, uint64_t slots) {
  Wire w{TypedBuffer(memory_, MemCategory::kCommBuffers, DType::kI8, slots * part_ / 2),
         TypedBuffer(memory_, MemCategory::kCommBuffers, DType::kF32, slots * groups_)};
  const bool data = device_.holds_data();
  HostVector<uint8_t> packed(data ? w.codes.bytes() : 0);
  HostVector<float> scales(data ? w.scales.size() : 0);
  if (data)
    quantize_int4_parts(parts.data(), slots, part_, groups_, packed.data(), scales.data());
  else
    device_.quantizer_pass(QuantPass::kQuantizeInt4, slots * part_);
  if (data || staged()) {
    device_.copy_to_device(w.codes.data(), packed.data(), w.codes.bytes());
    device_.copy_to_device(w.scales.data(), scales.data(), w.scales.bytes());
  }
  return w;
}

// The element-wise sum over `blocks` blocks of `slots` dequantised partitions each.
HostVector<float> QgzReduce::dequantise_sum(const Wire& w, uint64_t blocks, uint64_t slots) {
  const bool data = device_.holds_data();
  HostVector<uint8_t> packed(data ? w.codes.bytes() : 0);
  HostVector<float> scales(data ? w.scales.size() : 0);
  if (data || staged()) {
    device_.copy_to_host(packed.data(), w.codes.data(), w.codes.bytes());
    device_.copy_to_host(scales.data(), w.scales.data(), w.scales.bytes());
  }
  if (!data) {
    device_.quantizer_pass(QuantPass::kDequantizeInt4Sum, blocks * slots * part_);
    return {};
  }
  return dequantize_int4_sum(packed.data(), scales.data(), blocks, slots, part_, groups_);
}

// All-to-all of codes, then of scales (all_to_all_single twice), `slots_per_peer` partitions
// to each rank of g; the handles are kept.
QgzReduce::Wire QgzReduce::exchange(Wire& send, uint64_t slots_per_peer, GroupKind g) {
  Wire recv{TypedBuffer(memory_, MemCategory::kCommBuffers, DType::kI8, send.codes.size()),
            TypedBuffer(memory_, MemCategory::kCommBuffers, DType::kF32, send.scales.size())};
  codes_handle_ = comm_.all_to_all_async(send.codes.data(), recv.codes.data(),
                                         slots_per_peer * part_ / 2, DType::kI8, g,
                                         tag_ + " qgZ codes");
  scales_handle_ = comm_.all_to_all_async(send.scales.data(), recv.scales.data(),
                                          slots_per_peer * groups_, DType::kF32, g,
                                          tag_ + " qgZ scales");
  return recv;
}

}  // namespace sb
