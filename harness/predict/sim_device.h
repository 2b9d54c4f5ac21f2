// The predictor's simulated cluster, as seen from one rank: a Device whose allocations are
// sizes only (they go through the tracker, so memory is counted as in a run, but no host
// memory backs them) and whose kernels touch no data and advance a logical clock by a
// roofline cost; and the clock the simulated communication backend (sim_backend.h) shares.
// It does not model kernel-launch overheads, caches or fused kernels.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "harness/device/device.h"
#include "harness/model/config.h"
#include "harness/predict/cluster.h"
#include "harness/predict/kernel_cost.h"
#include "harness/predict/sim_clock.h"

namespace sb {

// PyTorch's CUDA caching allocator over the simulated device's allocations, at its peak:
// what it would reserve from cudaMalloc (segments) for the bytes live, by its size classes
// (c10/cuda/CUDACachingAllocator.cpp: every request rounded up to kMinBlockSize 512 B; requests
// up to kSmallSize 1 MiB share kSmallBuffer 2 MiB segments, those up to kMinLargeAlloc 10 MiB
// kLargeBuffer 20 MiB segments, larger ones get their own segment rounded up to kRoundLarge
// 2 MiB). Packing is perfect and freed blocks are not kept cached: a lower bound on
// max_memory_reserved() - max_memory_allocated().
struct AllocatorModel {
  uint64_t live = 0, peak_live = 0;
  uint64_t small = 0, mid = 0, large = 0;  // live rounded bytes per size class
  uint64_t peak_reserved = 0;
  void add(uint64_t bytes, int sign);
  uint64_t reserved() const;
  uint64_t margin() const { return peak_reserved > peak_live ? peak_reserved - peak_live : 0; }
};

// Kernel costs: kernel_cost.h's rules at the matmul precision in force; a GEMM or attention
// kernel that starts while a collective is in flight runs on the SMs the collective leaves
// (KernelModel::comm_sms); every kernel slowed by the cluster's oversubscription.
// `allocations` (optional) follows every allocation and free of the device.
std::unique_ptr<Device> make_sim_device(const Cluster& cluster, int world, SimClock& clock,
                                        const GptConfig* model, int batch_per_rank,
                                        AllocatorModel* allocations = nullptr);

}  // namespace sb
