// Kernel time rules of the simulated device (see header). Constants live in the cluster's
// KernelModel with their sources (cluster.cc); only the shape rules are here.
#include "harness/predict/kernel_cost.h"

#include <algorithm>
#include <cmath>

namespace sb {
namespace {

// cuBLAS's tile set as the Matrix Multiplication Background guide describes it: the largest
// tile (256 x 128) reuses each loaded operand most and is the fastest per output element;
// smaller tiles trade rate for fewer idle SMs on small outputs. The relative rates are this
// model's assumption, ordered by each tile's operand reuse (tm*tn / (tm+tn): 85, 64, 43, 32).
struct Tile {
  double m, n, rate;
};
constexpr Tile kTiles[] = {{256, 128, 1.0}, {128, 256, 1.0}, {128, 128, 0.9},
                           {128, 64, 0.75}, {64, 128, 0.75}, {64, 64, 0.55}};

}  // namespace

const char* kernel_class_name(KernelClass k) {
  switch (k) {
    case KernelClass::kGemm: return "gemm";
    case KernelClass::kAttention: return "attention";
    case KernelClass::kNorm: return "norm";
    case KernelClass::kElementwise: return "elementwise";
    case KernelClass::kOptimizer: return "optimizer";
    case KernelClass::kCopy: return "copy";
    case KernelClass::kQuantize: return "quantize";
  }
  return "?";
}

double gemm_shape_efficiency(const KernelModel& km, double m, double n, int sms) {
  if (km.sm_count <= 0 || m <= 0 || n <= 0) return 1.0;
  sms = std::max(1, sms);
  double best = 0;
  // Time of the tiled GEMM: waves x one tile's time on one SM; the ideal is m*n spread over
  // every SM of the device at the largest tile's rate.
  for (const Tile& t : kTiles) {
    const double tiles = std::ceil(m / t.m) * std::ceil(n / t.n);
    const double waves = std::ceil(tiles / sms);
    best = std::max(best, t.rate * m * n / (waves * t.m * t.n * km.sm_count));
  }
  return std::min(1.0, best);
}

bool kernel_model_on(const Cluster& c) {
  return c.kernels.gemm_ceiling > 0 && (c.kernels.sm_count > 0 || c.memory_bw_bytes_per_s > 0);
}

double gemm_seconds(const Cluster& c, bool bf16, double m, double n, double k, int sms) {
  const double flops = 2.0 * m * n * k;
  if (!kernel_model_on(c)) return flops / (c.peak_flops(bf16) * c.compute_efficiency);
  const double eff = c.kernels.gemm_ceiling * gemm_shape_efficiency(c.kernels, m, n, sms);
  return flops / (c.peak_flops(bf16) * eff);
}

double flash_seconds(const Cluster& c, bool bf16, double flops, bool backward) {
  if (!kernel_model_on(c)) return flops / (c.peak_flops(bf16) * c.compute_efficiency);
  const KernelModel& km = c.kernels;
  double eff = backward ? km.flash_bwd : km.flash_fwd;
  if (eff <= 0) eff = km.gemm_ceiling;
  // A GPU's flash kernel skips the causal mask's empty tiles; the CPU device computes them all.
  const double work = km.sm_count > 0 ? 0.5 * flops : flops;
  return work / (c.peak_flops(bf16) * eff);
}

double memory_seconds(const Cluster& c, double bytes) {
  if (c.memory_bw_bytes_per_s <= 0) return 0;
  const double frac = kernel_model_on(c) && c.kernels.mem_bw_fraction > 0
                          ? c.kernels.mem_bw_fraction : 1.0;
  return bytes / (c.memory_bw_bytes_per_s * frac);
}

double quantizer_seconds(const Cluster& c, QuantPass pass, double elements, double value_bytes) {
  const KernelModel& k = c.kernels;
  double rate = 0;
  switch (pass) {
    case QuantPass::kQuantize: rate = k.quantize_elems_per_s; break;
    case QuantPass::kDequantize: rate = k.dequantize_elems_per_s; break;
    // qgZ's loops where they were timed, else the int8 loop of the same direction (a cluster
    // written before they were)
    case QuantPass::kQuantizeInt4:
      rate = k.quantize_int4_elems_per_s > 0 ? k.quantize_int4_elems_per_s
                                             : k.quantize_elems_per_s;
      break;
    case QuantPass::kDequantizeInt4Sum:
      rate = k.dequantize_int4_sum_elems_per_s > 0 ? k.dequantize_int4_sum_elems_per_s
                                                   : k.dequantize_elems_per_s;
      break;
  }
  if (rate > 0) return elements / rate;
  return memory_seconds(c, elements * (value_bytes + 1.0));
}

// Spread of each class's constant: GEMM ceilings are one shape's best (MAMF) and real shapes
// vary +-10 %; flash efficiencies are read off the FlashAttention papers' ranges (50-73 % on
// A100); memory-bound kernels: achieved bandwidth and fp32 byte counts, +-20 %.
double class_uncertainty(KernelClass k) {
  switch (k) {
    case KernelClass::kGemm: return 0.10;
    case KernelClass::kAttention: return 0.20;
    default: return 0.20;
  }
}

}  // namespace sb
