// The simulated device's per-kernel time rules (kernel_cost.h), each pinned against its own
// closed form; the predicted step's breakdown partitioning the compute time; the CPU preset
// keeping its fitted rule until its memory bandwidth is measured; and the stated uncertainty.
#include <gtest/gtest.h>

#include <cmath>

#include "harness/model/layout.h"
#include "harness/predict/predict.h"
#include "harness/predict/sim_device.h"
#include "strategies/qgz.h"

namespace sb {
namespace {

TEST(KernelCost, GemmWavesOfTheLargestTileAreFullAndOneTileMoreCostsAWave) {
  const Cluster a100 = load_cluster("dgx-a100-80g");
  const KernelModel& km = a100.kernels;
  ASSERT_EQ(km.sm_count, 108);
  // 12 x 9 tiles of 256 x 128 = 108: one full wave at the largest tile's rate.
  EXPECT_DOUBLE_EQ(gemm_shape_efficiency(km, 256 * 12, 128 * 9, 108), 1.0);
  // One more row of 256 x 128 tiles (117 tiles) needs a second wave of that tile: the best tile
  // is at most what 128 x 128 tiles give (24 x 9 = 216 tiles, 2 full waves, rate 0.9).
  const double e = gemm_shape_efficiency(km, 256 * 13, 128 * 9, 108);
  EXPECT_LT(e, 0.95);
  EXPECT_GE(e, 117.0 * 256 * 128 / (2.0 * 256 * 128 * 108) - 1e-12);
  // Fewer free SMs (a collective holds 24): the one-wave shape needs two waves now.
  EXPECT_LT(gemm_shape_efficiency(km, 256 * 12, 128 * 9, 108 - 24), 0.9);
  // A CPU core has no waves.
  EXPECT_DOUBLE_EQ(gemm_shape_efficiency(KernelModel{}, 7, 13, 0), 1.0);
  // The time of a full-wave GEMM is its FLOPs at the ceiling: 267.9 TF/s (the MAMF figure).
  const double m = 256 * 12, n = 128 * 9, k = 4096;
  EXPECT_NEAR(gemm_seconds(a100, true, m, n, k, 108), 2 * m * n * k / 267.9e12, 1e-15);
}

TEST(KernelCost, FlashAttentionSkipsTheCausalHalfAtThePublishedEfficiency) {
  const Cluster h100 = load_cluster("dgx-h100");
  const double flops = 1e12;
  EXPECT_NEAR(flash_seconds(h100, true, flops, false), 0.5 * flops / (989.5e12 * 0.35), 1e-15);
  const Cluster a100 = load_cluster("dgx-a100-80g");
  EXPECT_NEAR(flash_seconds(a100, true, flops, true), 0.5 * flops / (312e12 * 0.63), 1e-15);
  EXPECT_NEAR(memory_seconds(a100, 1e9), 1e9 / (2.039e12 * 0.9), 1e-15);
}

TEST(KernelCost, CpuPresetKeepsItsFittedRuleUntilItsBandwidthIsMeasured) {
  Cluster cpu = load_cluster("cpu-local");
  EXPECT_FALSE(kernel_model_on(cpu));
  EXPECT_NEAR(gemm_seconds(cpu, false, 100, 200, 300, 0), 2.0 * 100 * 200 * 300 / (130e9 * 0.8),
              1e-15);
  cpu.memory_bw_bytes_per_s = 10e9;  // a calibrated cluster: the sgemm itself is the ceiling
  EXPECT_TRUE(kernel_model_on(cpu));
  EXPECT_NEAR(gemm_seconds(cpu, false, 100, 200, 300, 0), 2.0 * 100 * 200 * 300 / 130e9, 1e-15);
  EXPECT_NEAR(memory_seconds(cpu, 1e9), 0.1, 1e-12);
}

PredictConfig llama7b(int world) {
  PredictConfig cfg;
  cfg.model = model_shape(parse_predict_model("llama2-7b"));
  cfg.world = world;
  cfg.ranks_per_node = 8;
  cfg.batch_per_rank = 1;
  cfg.options.precision = Precision::kBf16Mixed;
  return cfg;
}

TEST(KernelCost, BreakdownPartitionsTheComputeTimeAndContentionOnlySlowsIt) {
  Cluster a100 = load_cluster("dgx-a100-80g");
  const PredictConfig cfg = llama7b(16);
  for (const std::string& s : {std::string("ddp"), std::string("zero3"),
                               std::string("fsdp_full_shard")}) {
    const Prediction p = predict(cfg, s, a100);
    double sum = p.launch_s + p.contention_s;
    for (double x : p.kernel_s) sum += x;
    EXPECT_NEAR(sum, p.compute_s, 1e-9 * p.compute_s) << s;
    EXPECT_GT(p.kernel_s[int(KernelClass::kGemm)], p.kernel_s[int(KernelClass::kAttention)]) << s;
    EXPECT_GT(p.kernel_s[int(KernelClass::kOptimizer)], 0) << s;
    Cluster free_sms = a100;
    free_sms.kernels.comm_sms = 0;
    const Prediction q = predict(cfg, s, free_sms);
    EXPECT_EQ(q.contention_s, 0) << s;
    EXPECT_LE(q.step_s, p.step_s) << s;
    EXPECT_EQ(q.peak, p.peak) << s << ": time rules never change bytes";
    EXPECT_EQ(q.traffic.max_rank_sent, p.traffic.max_rank_sent) << s;
  }
}

TEST(KernelCost, RangeHoldsTheStepAndWidensOutsideTheValidatedRegion) {
  const PredictConfig cfg = llama7b(16);
  const Prediction in = predict(cfg, "fsdp_full_shard", load_cluster("dgx-h100"));
  EXPECT_TRUE(in.outside.empty()) << in.outside;
  EXPECT_GE(in.uncertainty, 0.10);
  EXPECT_LT(in.step_lo_s, in.step_s);
  EXPECT_GT(in.step_hi_s, in.step_s);
  EXPECT_NEAR(in.step_hi_s / in.step_s, 1 + in.uncertainty, 1e-12);
  // The same job on an H200 (same kernel constants, not validated): twice the spread.
  const Prediction out = predict(cfg, "fsdp_full_shard", load_cluster("h200"));
  EXPECT_FALSE(out.outside.empty());
  EXPECT_GE(out.uncertainty, 0.20);
  EXPECT_NE(outside_validated_region(llama7b(4), load_cluster("dgx-h100"), 4), "");
}

// ZeRO++'s quantiser is host work on a CPU (strategies/quantize.cc), timed by the run at start:
// the dry run charges every pass at that rate, so it is never free. qwZ alone gathers over the
// world: each rank dequantises world x the elements it quantised, and the class pins that.
// cpu-local as a run calibrates it (hardware.md), with these int8 quantiser rates; and small on
// 2 nodes x 2 ranks, one sequence each.
Cluster cpu_with_quantiser(double quantize, double dequantize) {
  Cluster cpu = load_cluster("cpu-local");
  cpu.memory_bw_bytes_per_s = 10e9;
  cpu.kernels.quantize_elems_per_s = quantize;
  cpu.kernels.dequantize_elems_per_s = dequantize;
  return cpu;
}
PredictConfig small_on_two_nodes() {
  PredictConfig cfg;
  cfg.model = model_shape(parse_predict_model("small"));
  cfg.world = 4;
  cfg.ranks_per_node = 2;
  cfg.batch_per_rank = 1;
  return cfg;
}

TEST(KernelCost, QuantiserPassesAreChargedAtTheCalibratedRates) {
  Cluster cpu = cpu_with_quantiser(200e6, 500e6);
  PredictConfig cfg = small_on_two_nodes();
  constexpr int kQ = int(KernelClass::kQuantize);
  EXPECT_EQ(predict(cfg, "zero3", cpu).kernel_s[kQ], 0) << "no ZeRO++ knob, no quantiser";

  cfg.options.zero_quantized_weights = true;
  const Prediction qwz = predict(cfg, "zero3", cpu);
  ASSERT_GT(qwz.kernel_s[kQ], 0);
  Cluster free_dequant = cpu;
  free_dequant.kernels.dequantize_elems_per_s = 1e30;  // leaves the quantise passes alone
  const double quantise_s = predict(cfg, "zero3", free_dequant).kernel_s[kQ];
  ASSERT_GT(quantise_s, 0);
  EXPECT_NEAR((qwz.kernel_s[kQ] - quantise_s) / quantise_s, 4.0 * 200e6 / 500e6, 1e-9);

  // all three knobs: the class scales as 1 / rate, the bytes do not move
  cfg.options.zero_hpz_partition_size = 2;
  cfg.options.zero_quantized_gradients = true;
  const Prediction zpp = predict(cfg, "zero3", cpu);
  Cluster twice = cpu;
  twice.kernels.quantize_elems_per_s *= 2;
  twice.kernels.dequantize_elems_per_s *= 2;
  const Prediction fast = predict(cfg, "zero3", twice);
  EXPECT_NEAR(fast.kernel_s[kQ], zpp.kernel_s[kQ] / 2, 1e-12 * zpp.kernel_s[kQ]);
  EXPECT_LT(fast.step_s, zpp.step_s);
  EXPECT_EQ(fast.traffic.max_rank_sent, zpp.traffic.max_rank_sent);

  // a GPU preset has no host loop: DeepSpeed's quantiser kernel, memory-bound
  cfg.options.precision = Precision::kBf16Mixed;
  EXPECT_GT(predict(cfg, "zero3", load_cluster("dgx-h100")).kernel_s[kQ], 0);
  EXPECT_NEAR(quantizer_seconds(load_cluster("dgx-h100"), QuantPass::kQuantize, 1e9, 2.0),
              3e9 / (3.35e12 * 0.9), 1e-15);
}

// qgZ's passes have their own loops and rates (QuantPass::kQuantizeInt4, kDequantizeInt4Sum):
// with the int8 loops free, the class is qgZ's element counts over those rates. Per tensor that
// takes the all-to-all path (qgz_eligible), with L ranks per node: the gradient quantised as the
// world's partitions (numel) and dequantise-summed over the node (numel), then the node's sum
// quantised for the nodes (numel / L) and dequantise-summed over them (numel / L), times the
// host's oversubscription (4 ranks on cpu-local's 2 cores share them, as every kernel). A cluster
// without the int4 rates (written before them) charges the int8 loops' rates instead.
TEST(KernelCost, QgzPassesAreChargedAtTheirOwnCalibratedRates) {
  Cluster cpu = cpu_with_quantiser(1e30, 1e30);
  cpu.kernels.quantize_int4_elems_per_s = 100e6;
  cpu.kernels.dequantize_int4_sum_elems_per_s = 400e6;
  PredictConfig cfg = small_on_two_nodes();
  cfg.options.zero_quantized_gradients = true;
  const ModelLayout layout = make_layout(parse_model("small"));
  double elements = 0;
  for (const ParamTensor& t : layout.tensors)
    if (qgz_eligible(t, cfg.world)) elements += double(t.numel) * (1.0 + 1.0 / 2);
  ASSERT_GT(elements, 0);
  constexpr int kQ = int(KernelClass::kQuantize);
  const double shared = cpu.oversubscription(cfg.world);
  ASSERT_EQ(shared, 2.0);
  EXPECT_NEAR(predict(cfg, "zero3", cpu).kernel_s[kQ],
              shared * (elements / 100e6 + elements / 400e6), 1e-9 * elements / 100e6);

  Cluster older = cpu;  // no int4 rates: the int8 ones (free here)
  older.kernels.quantize_int4_elems_per_s = older.kernels.dequantize_int4_sum_elems_per_s = 0;
  EXPECT_LT(predict(cfg, "zero3", older).kernel_s[kQ], 1e-12);
  EXPECT_NEAR(quantizer_seconds(older, QuantPass::kQuantizeInt4, 1e6, 4.0), 1e6 / 1e30, 1e-40);
}

// The CPU device's cache zero-fills every block it hands out again, as every block of a steady
// step is: the host's simulated device charges each allocation's bytes as a copy-class kernel
// at the measured bandwidth. A GPU cluster predicts PyTorch's allocator (torch.empty): nothing.
TEST(KernelCost, HostAllocationsAreChargedTheirZeroFill) {
  Cluster cpu = load_cluster("cpu-local");
  cpu.memory_bw_bytes_per_s = 10e9;
  for (const Cluster& c : {cpu, load_cluster("dgx-h100")}) {
    SimClock clock;
    const std::unique_ptr<Device> dev = make_sim_device(c, 1, clock, nullptr, 1);
    RawAllocator a = dev->allocator();
    void* p = a.allocate(size_t(3) << 20);
    void* q = a.allocate(1000);
    a.release(p);
    a.release(q);
    const double want = c.host_cores > 0 ? (double(3 << 20) + 1000) / 10e9 : 0.0;
    EXPECT_NEAR(clock.class_s[int(KernelClass::kCopy)], want, 1e-15) << c.name;
    EXPECT_NEAR(clock.compute_s, want, 1e-15) << c.name;
  }
}

// A run measures how much slower its ranks' GEMMs run all at once than alone (2.1-2.4x for 4
// ranks on 2 cores, not the 2x of ranks per core): that figure slows every kernel at the world
// it was measured for, and no other; below ranks per core (or 1) it is noise, since a rank
// time-sliced on a core gets at most its share. The cluster file carries it, and refuses it
// negative.
TEST(KernelCost, AMeasuredSlowdownReplacesTheRanksPerCoreRuleAtItsWorldOnly) {
  Cluster cpu = cpu_with_quantiser(0, 0);
  const PredictConfig cfg = small_on_two_nodes();
  const double rule_s = predict(cfg, "ddp", cpu).compute_s;
  ASSERT_EQ(cpu.compute_slowdown(4), 2.0);
  cpu.measured_slowdown = 2.3;
  cpu.measured_world = 4;
  EXPECT_EQ(cpu.compute_slowdown(4), 2.3);
  EXPECT_EQ(cpu.compute_slowdown(8), 4.0);
  EXPECT_EQ(cpu.compute_slowdown(2), 1.0);
  EXPECT_EQ(cpu.oversubscription(4), 2.0) << "the collectives' cores still follow the rule";
  EXPECT_NEAR(predict(cfg, "ddp", cpu).compute_s, rule_s * 2.3 / 2.0, 1e-9 * rule_s);
  Cluster noise = cpu;
  noise.measured_slowdown = 1.9;
  EXPECT_EQ(noise.compute_slowdown(4), 2.0);
  noise.measured_slowdown = 0.9;
  noise.measured_world = 1;
  EXPECT_EQ(noise.compute_slowdown(1), 1.0);
  noise.measured_slowdown = 1.06;
  noise.measured_world = 2;
  EXPECT_EQ(noise.compute_slowdown(2), 1.06);

  const Cluster back = cluster_from_json(cluster_json(cpu));
  EXPECT_EQ(back.measured_slowdown, 2.3);
  EXPECT_EQ(back.measured_world, 4);
  nlohmann::json bad = cluster_json(cpu);
  bad["measured_slowdown"] = -1;
  EXPECT_THROW(cluster_from_json(bad), std::invalid_argument);
}

}  // namespace
}  // namespace sb
