// ZeRO++'s qgZ (Wang et al. 2023 §3.3): a tensor's gradient reduce-scattered as two all-to-alls
// of int4 blocks, inside the node and then across nodes, so what leaves a node is a quarter of
// bf16 and already summed over the node. As DeepSpeed 0.19.6 ships it
// (runtime/comm/coalesced_collectives.py all_to_all_quant_reduce, called by stage3.py
// __avg_scatter_grads only when there is more than one node):
// - a 1-D tensor, or one whose numel is not a multiple of 2·world (PR 5056's fallback), goes
//   through reduce_scatter_coalesced([tensor]) alone: one reduce-scatter of that tensor;
// - otherwise swizzle_quant quantises it in max(shape[0], shape[1], world) groups, 4 bits,
//   Symmetric, ordering the partitions so that block j holds those of the ranks with local
//   index j, node by node (csrc/quantization/swizzled_quantize.cu); all_to_all_single of the
//   codes, then of the scales, over the node; quantized_reduction dequantises the node's blocks,
//   sums them and requantises (the same group length); all_to_all_single of codes and scales
//   across nodes (the ranks with my local index); dequantise and sum the nodes' chunks.
// Each rank ends with its partition of the tensor summed over the world; the optimizer divides
// by the world as for every reduce-scatter here. DeepSpeed divides the quantised path's sum by
// num_nodes = world // device_count() only (all_to_all_quant_reduce's final chunk mean), L times
// the mean for L ranks per node, while the 1-D fallback (reduce_scatter_coalesced) divides by
// the world: as shipped (QgzVariant::kShipped) finish() multiplies the sum by L, so the
// optimizer sees L x the mean on that path and the mean on the fallback, as DeepSpeed does
// (Adam's update all but cancels the factor; momentum mixes tensors of both paths only per
// tensor). The suite's variant (kSuite) keeps the mean. The suite takes device_count() to be the
// ranks per node (every GPU of a node visible to each rank, the launcher's default).
// DeepSpeed sums in fp16 (__half2); here fp32. Its kernels read the gradient as fp16
// (pt_binding.cpp ds_swizzle_quant casts to __half*), so as shipped qgZ needs fp16 gradients:
// bf16 training with communication_data_type fp16 (stage3.py __avg_scatter_grads casts each
// gradient first); the CLI refuses anything else unless the suite's variant is asked for, which
// quantises fp32 and bf16 gradients from their values. fp16 is modelled by its size (2 bytes);
// the values keep the bf16 rounding (the suite has no fp16 type). A group count that does not
// divide by the world makes DeepSpeed's equal-split all_to_all_single fail; here it is rounded
// down per partition (groups of ceil(part / groups), the last one shorter): the suite's own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/device/device.h"
#include "harness/memory/host_scratch.h"
#include "harness/memory/typed_buffer.h"
#include "harness/model/layout.h"

namespace sb {

// Whether all_to_all_quant_reduce takes this tensor's all-to-all path (see above).
bool qgz_eligible(const ParamTensor& t, int world);
// Quantisation groups in one rank's partition: swizzle_quant's max(shape[0], shape[1], world)
// groups spread over the world's partitions (at least 1; groups never straddle partitions;
// where the count does not divide by the world DeepSpeed fails, see above).
uint64_t qgz_groups_per_partition(const ParamTensor& t, int world);

// One tensor's qgZ reduction. The intra-node stage is waited on at construction: the
// dequantise-reduce-requantise between the stages runs on this thread, where DeepSpeed runs a
// kernel on its reduce stream, and the inter-node stage must be issued at the same point of the
// collective order on every rank. The inter-node stage is left in flight until finish().
class QgzReduce {
 public:
  // `grad`: the tensor's full gradient, `padded` elements of dtype t in device memory, rank r's
  // partition at r · padded / world. Quantises it, runs the intra-node all-to-alls, reduces,
  // requantises and issues the inter-node all-to-alls (waited on here when `overlap` is off).
  QgzReduce(Communicator& comm, Device& device, MemoryTracker& memory, const void* grad, DType t,
            uint64_t padded, uint64_t groups_per_part, bool overlap, const std::string& tag);
  bool done() const { return codes_handle_.done() && scales_handle_.done(); }
  // Waits for the inter-node stage; `out` (padded / world elements) then holds this rank's
  // partition summed over the world, times `scale` (as shipped: the ranks per node).
  void finish(TypedBuffer& out, float scale = 1);

 private:
  struct Wire {  // int4 codes (two per byte) and fp32 group scales of some partitions
    TypedBuffer codes, scales;
  };
  Wire quantise(const HostVector<float>& parts, uint64_t slots);
  HostVector<float> dequantise_sum(const Wire& w, uint64_t blocks, uint64_t slots);
  Wire exchange(Wire& send, uint64_t slots_per_peer, GroupKind g);
  std::vector<int> wire_order() const;
  // The suite's quantiser runs on the host: each stage copies its input out of device memory
  // and its codes back in. A dry run on a host device charges the same copies; on a GPU
  // cluster it predicts DeepSpeed's kernels, which read device memory in place.
  bool staged() const { return !device_.holds_data() && device_.is_host(); }
  void wait_from_issue();

  Communicator& comm_;
  Device& device_;
  MemoryTracker& memory_;
  uint64_t part_ = 0, groups_;
  std::string tag_;
  Wire inter_send_, inter_recv_;
  CommHandle codes_handle_, scales_handle_;
};

}  // namespace sb
