// Peak dense FLOP/s of the GPUs the suite reports MFU on, keyed by the CUDA device name. Header
// only and free of CUDA includes, so the driver and reports can use it in any build. It does
// not measure anything: unknown devices return 0 and MFU is then left out.
#pragma once

#include <string>

namespace sb {

struct CudaPeak {
  const char* name_contains;  // matched against cudaDeviceProp::name, first match wins
  double bf16_flops;          // dense BF16 tensor core (sparsity figures halved)
  double tf32_flops;          // dense TF32 tensor core
  double fp32_flops;          // FP32 on CUDA cores (no tensor cores)
};

// Sources: NVIDIA A100 Tensor Core GPU datasheet (2021): BF16 312 TF (624 sparse), TF32 156,
// FP32 19.5, for SXM and PCIe alike. NVIDIA H100 Tensor Core GPU datasheet: SXM BF16 1,979 TF
// sparse / FP32 67; PCIe 1,513 / 51; NVL 1,671 / 60. NVIDIA H200 Tensor Core GPU datasheet:
// SXM BF16 1,979 sparse / FP32 67; NVL 1,671 / 60. TF32 is half the BF16 figure on Hopper.
// Order matters: the more specific names come first ("H200 NVL" before "H200", which also
// matches "GH200" whose GPU is an H100/H200-class SXM part).
inline constexpr CudaPeak kCudaPeaks[] = {
    {"H200 NVL", 835.5e12, 417.5e12, 60e12},
    {"H200", 989.5e12, 494.7e12, 67e12},
    {"H100 NVL", 835.5e12, 417.5e12, 60e12},
    {"H100 PCIe", 756.5e12, 378e12, 51e12},
    {"H100", 989.5e12, 494.7e12, 67e12},  // "NVIDIA H100 80GB HBM3" is the SXM part
    {"A100", 312e12, 156e12, 19.5e12},
};

// Peak dense FLOP/s for MFU: bf16 -> BF16 tensor cores; otherwise FP32, or TF32 when the fp32
// GEMMs were allowed to run on TF32 tensor cores. 0 when the device is not in the table.
inline double cuda_peak_flops(const std::string& device_name, bool bf16, bool tf32 = false) {
  for (const CudaPeak& p : kCudaPeaks) {
    if (device_name.find(p.name_contains) != std::string::npos) {
      return bf16 ? p.bf16_flops : (tf32 ? p.tf32_flops : p.fp32_flops);
    }
  }
  return 0.0;
}

}  // namespace sb
