// Which preset a measured run predicts with: the GPU preset of the CUDA device it found, or
// none (another board or memory size is another device), and the CPU cluster built from the
// run's own calibration.
#include <gtest/gtest.h>

#include <map>

#include "harness/device/cuda/cuda_peak.h"
#include "harness/predict/predict.h"

namespace sb {
namespace {

TEST(ClusterMatch, CudaDeviceNamesFindTheirPresetAndOnlyIt) {
  EXPECT_EQ(preset_for_cuda_device("NVIDIA A100-SXM4-80GB"), "dgx-a100-80g");
  EXPECT_EQ(preset_for_cuda_device("NVIDIA H100 80GB HBM3"), "dgx-h100");
  EXPECT_EQ(preset_for_cuda_device("NVIDIA H200"), "h200");
  // as the run passes it: CudaDevice::name() is "cuda:<index> " + cudaDeviceProp::name
  EXPECT_EQ(preset_for_cuda_device("cuda:3 NVIDIA H100 80GB HBM3"), "dgx-h100");
  // other boards, other memory sizes, other chips: no preset rather than a wrong one
  for (const char* other : {"NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB",
                            "NVIDIA A100 80GB PCIe", "NVIDIA H100 PCIe", "NVIDIA H100 NVL",
                            "NVIDIA H200 NVL", "NVIDIA GH200 480GB", "NVIDIA L40S",
                            "Tesla V100-SXM2-32GB", "NVIDIA GeForce RTX 4090", ""})
    EXPECT_EQ(preset_for_cuda_device(other), "") << other;
}

TEST(ClusterMatch, EveryMatchedPresetExistsAndNamesTheSameChip) {
  for (const char* name : {"NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA H200"}) {
    const Cluster c = load_cluster(preset_for_cuda_device(name));
    // the preset's datasheet peak is the CUDA device's own (harness/device/cuda/cuda_peak.h)
    EXPECT_EQ(c.peak_flops_bf16, cuda_peak_flops(name, true)) << name;
  }
}

TEST(ClusterMatch, CalibratedCpuClusterCarriesTheMeasuredFigures) {
  CpuCalibration cal;
  cal.sgemm_flops = 96e9;
  cal.mem_bw_bytes_per_s = 9.5e9;
  cal.host_cores = 2;
  cal.ranks_per_node = 2;
  cal.memory_bytes = 16e9;
  cal.quantize_elems_per_s = 150e6;
  cal.dequantize_elems_per_s = 250e6;
  cal.quantize_int4_elems_per_s = 120e6;
  cal.dequantize_int4_sum_elems_per_s = 300e6;
  cal.source = "test";
  const Cluster c = calibrated_cpu_cluster(cal);
  const Cluster local = load_cluster("cpu-local");
  EXPECT_EQ(c.name, "cpu-calibrated");
  EXPECT_EQ(c.peak_flops_fp32, 96e9);
  EXPECT_EQ(c.memory_bw_bytes_per_s, 9.5e9);
  EXPECT_EQ(c.host_cores, 2);
  EXPECT_EQ(c.device_memory_bytes, 16e9);
  EXPECT_EQ(c.kernels.quantize_elems_per_s, 150e6);
  EXPECT_EQ(c.kernels.dequantize_elems_per_s, 250e6);
  EXPECT_EQ(c.kernels.quantize_int4_elems_per_s, 120e6);
  EXPECT_EQ(c.kernels.dequantize_int4_sum_elems_per_s, 300e6);
  EXPECT_FALSE(c.bf16_matmul);
  EXPECT_EQ(c.intra.bw_bytes_per_s, local.intra.bw_bytes_per_s);  // cpu-local's link model
  EXPECT_EQ(c.compute_efficiency, local.compute_efficiency);
  // round trip through the results file's form
  EXPECT_EQ(cluster_json(cluster_from_json(cluster_json(c))), cluster_json(c));

  // the prediction's compute follows the measured core: a core 2x slower, 2x the compute
  PredictConfig cfg;
  cfg.model = model_shape(parse_predict_model("tiny"));
  cfg.world = 4;
  cfg.ranks_per_node = 2;
  cal.mem_bw_bytes_per_s = 0;  // compute only: the ratio is exact
  const double fast = predict(cfg, "ddp", calibrated_cpu_cluster(cal)).compute_s;
  cal.sgemm_flops /= 2;
  const double slow = predict(cfg, "ddp", calibrated_cpu_cluster(cal)).compute_s;
  EXPECT_NEAR(slow / fast, 2.0, 1e-9);
}

TEST(ClusterMatch, TheStepsOwnGemmRateSetsTheGemmTimeAndNotTheAttentions) {
  CpuCalibration cal;
  cal.sgemm_flops = 100e9;
  cal.mem_bw_bytes_per_s = 20e9;
  cal.host_cores = 2;
  PredictConfig cfg;
  cfg.model = model_shape(parse_predict_model("small"));
  cfg.batch_per_rank = 4;
  const Prediction square = predict(cfg, "ddp", calibrated_cpu_cluster(cal));
  cal.gemm_mix_flops = 80e9;  // the model's shapes at 80 % of the square's rate
  const Cluster c = calibrated_cpu_cluster(cal);
  EXPECT_DOUBLE_EQ(c.kernels.gemm_ceiling, 0.8);
  EXPECT_EQ(c.kernels.flash_fwd, 1.0);
  EXPECT_EQ(c.kernels.flash_bwd, 1.0);
  EXPECT_EQ(cluster_json(cluster_from_json(cluster_json(c))), cluster_json(c));
  const Prediction mix = predict(cfg, "ddp", c);
  const auto gemm = size_t(KernelClass::kGemm), attention = size_t(KernelClass::kAttention);
  EXPECT_NEAR(mix.kernel_s[gemm] / square.kernel_s[gemm], 1.25, 1e-9);
  EXPECT_DOUBLE_EQ(mix.kernel_s[attention], square.kernel_s[attention]);
  // a mix timed above the square is the spread of two measurements: the ceiling stays 1
  cal.gemm_mix_flops = 110e9;
  EXPECT_EQ(calibrated_cpu_cluster(cal).kernels.gemm_ceiling, 1.0);
}

TEST(ClusterMatch, StepGemmCallsAreTheLinearsOfTheBlockForwardAndBackward) {
  const GptConfig small = parse_predict_model("small");
  const auto calls = step_gemm_calls(small, 4, StrategyOptions{});
  const int64_t rows = 4 * int64_t(small.seq_len), C = small.n_embd;
  // each linear [out, in]: y = x W^T (rows x out over in, B transposed), dx = dy W (rows x in
  // over out), dW = dy^T x (out x in over rows, A transposed): as CpuDevice calls sgemm
  std::map<GemmCall, uint64_t> by_shape(calls.begin(), calls.end());
  for (const auto& [in, out] : {std::pair{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}}) {
    EXPECT_TRUE(by_shape.count({false, true, rows, out, in})) << in << " -> " << out;
    EXPECT_TRUE(by_shape.count({false, false, rows, in, out})) << in << " -> " << out;
    EXPECT_TRUE(by_shape.count({true, false, out, in, rows})) << in << " -> " << out;
  }
  // the four block linears appear once per layer per pass, alike
  const uint64_t qkv = by_shape.at({false, true, rows, 3 * C, C});
  EXPECT_EQ(qkv % uint64_t(small.n_layer), 0u);
  EXPECT_EQ(by_shape.at({true, false, 4 * C, C, rows}), qkv);
}

}  // namespace
}  // namespace sb
