// Per-kernel time on the simulated device, from the cluster's KernelModel (cluster.h): GEMMs
// at peak x the device's large-GEMM ceiling x tile and wave quantisation of their shape (NVIDIA
// "Matrix Multiplication Background User's Guide"); fused attention at the flash kernel's
// published efficiency; memory-bound kernels as bytes over the achieved memory bandwidth;
// every kernel at least one launch. Pure functions, so the tests can pin each rule alone.
#pragma once

#include <array>
#include <cstdint>

#include "harness/device/device.h"
#include "harness/predict/cluster.h"

namespace sb {

// What the breakdown of a predicted step sums time by.
enum class KernelClass { kGemm, kAttention, kNorm, kElementwise, kOptimizer, kCopy, kQuantize };
constexpr int kNumKernelClasses = 7;
const char* kernel_class_name(KernelClass k);
using ClassSeconds = std::array<double, kNumKernelClasses>;

// One GEMM shape a step issues: C (m x n) = op(A) op(B) over k, op = transpose where set.
struct GemmCall {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  auto operator<=>(const GemmCall&) const = default;
};

// The fraction of the large-GEMM rate an m x n (x k) GEMM reaches on `sms` free SMs: the best
// tile of cuBLAS's set, each tile's own rate relative to the largest times its output's tile
// and wave quantisation. 1 where the device has no SMs (a CPU core).
double gemm_shape_efficiency(const KernelModel& km, double m, double n, int sms);

// True where the kernel model applies; false: the older peak x compute_efficiency rule (a file
// without a KernelModel, or a CPU whose memory bandwidth was not measured: its fitted
// compute_efficiency already folds the memory-bound kernels in).
bool kernel_model_on(const Cluster& c);

// Seconds of one kernel, before oversubscription and contention.
double gemm_seconds(const Cluster& c, bool bf16, double m, double n, double k, int sms);
// flops: the kernel's model FLOPs as sim_device counts them (non-causal); causal flash kernels
// skip the masked half of the score tiles (FlashAttention-2 counts causal FLOPs as half).
double flash_seconds(const Cluster& c, bool bf16, double flops, bool backward);
double memory_seconds(const Cluster& c, double bytes);
// One pass of ZeRO++'s block quantiser over `elements` values (Device::quantizer_pass). Where
// the cluster carries the host loop's calibrated rate (a CPU run times strategies/quantize.cc
// itself at start, as it times sgemm), elements over that rate; otherwise the GPU kernel
// DeepSpeed runs (csrc/quantization), memory-bound: the values' bytes (`value_bytes` each) and
// the int8 codes once each over the memory bandwidth.
double quantizer_seconds(const Cluster& c, QuantPass pass, double elements, double value_bytes);
// The step-time uncertainty of a class, relative (the constants' stated spread).
double class_uncertainty(KernelClass k);
constexpr double kCommUncertainty = 0.25;   // alpha-beta of nccl-tests bus bandwidth
constexpr double kLaunchUncertainty = 0.5;  // launch floor: an order-of-magnitude figure

}  // namespace sb
