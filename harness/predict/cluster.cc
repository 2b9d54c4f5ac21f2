// Cluster presets with their sources, and the JSON form of a cluster (see header).
#include "harness/predict/cluster.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include "harness/device/cuda/cuda_peak.h"

namespace sb {
namespace {

// NVLink / network figures, one direction per GPU or per node:
// - DGX A100 (NVIDIA DGX A100 datasheet, 2020/2021): 8x A100-SXM4-80GB, NVLink 3 + NVSwitch
//   600 GB/s bidirectional per GPU (300 GB/s each way); compute fabric 8x ConnectX-6 200 Gb/s
//   HDR InfiniBand = 200 GB/s per node each way. A100 datasheet: 80 GB HBM2e.
// - DGX H100 (NVIDIA DGX H100 datasheet, 2023): 8x H100-SXM5-80GB, NVLink 4 900 GB/s
//   bidirectional per GPU (450 GB/s each way); 8x ConnectX-7 400 Gb/s = 400 GB/s per node.
// - H200 (NVIDIA H200 Tensor Core GPU datasheet, 2024; HGX/DGX H200 8-GPU board): 141 GB
//   HBM3e, NVLink 900 GB/s, 8x 400 Gb/s ConnectX-7 per node as DGX H100.
// Peak FLOP/s: cuda_peak.h (A100/H100/H200 datasheets, dense = sparse / 2).
// Efficiencies are assumptions, not datasheet figures: compute 0.5 after the FSDP paper's
// (Zhao et al. 2023, §7) 159 TFLOP/s per A100 on GPT-175B (51 % of 312); comm 0.8 of link
// bandwidth as nccl-tests bus bandwidth typically reaches (PERFORMANCE.md). Latencies: NCCL's
// own ring model for the Simple protocol (src/graph/tuning.cc: baseLat 8.4 us per collective,
// hwLat 3.4 us per NVLink step, 9.6 us per network step).
// HBM bandwidth (same datasheets): A100 80GB SXM 2.039 TB/s, H100 SXM 3.35 TB/s, H200 4.8 TB/s.
// Per-kernel constants (kernel_cost.h), each from a published measurement:
// - GEMM ceiling: the Maximum Achievable Matmul FLOPS table of S. Bekman's "Machine Learning
//   Engineering" (github.com/stas00/ml-engineering, compute/accelerator/README.md, bf16 matmul,
//   best shape of a brute-force search, CUDA 12.1): A100 SXM 267.9 of 312 TF (85.9 %), H100
//   SXM 792.1 of 989 TF (80.1 %). Tile and wave quantisation of other shapes: kernel_cost.cc.
// - SMs: A100 108, H100/H200 SXM 132 (NVIDIA A100 and H100 architecture whitepapers).
// - Fused attention: FlashAttention-2 (Dao 2023, arXiv 2307.08691) reaches up to 73 % of the
//   A100's peak forward and 63 % backward (abstract: "50-73 % of the theoretical maximum
//   FLOPs/s"); on H100 FlashAttention-2 reaches 35 % (FlashAttention-3, Shah et al. 2024,
//   abstract: "FlashAttention-2 achieving only 35 % utilization on the H100 GPU").
// - Memory-bound kernels: 90 % of the datasheet HBM bandwidth, the STREAM-like copy/triad
//   fraction GPUs reach (an assumption with +-10 %, see kernel_cost.cc's uncertainty).
// - Launch: 5 us per kernel, PyTorch eager dispatch plus CUDA launch (an order-of-magnitude
//   figure; it only binds on kernels shorter than it).
// - Contention: NCCL's collective kernel holds one block per channel; an FSDP all-gather beside
//   a GEMM on H100 launched 24 blocks (NVIDIA developer forum, "Compute-Communication Overlap
//   Causes Severe GEMM Performance Degradation because of Tail Effect", 2025, nsys trace);
//   taken for A100 too.
KernelModel gpu_kernels(int sms, double ceiling, double flash_fwd, double flash_bwd) {
  KernelModel k;
  k.sm_count = sms;
  k.gemm_ceiling = ceiling;
  k.mem_bw_fraction = 0.90;
  k.flash_fwd = flash_fwd;
  k.flash_bwd = flash_bwd;
  k.launch_s = 5e-6;
  k.comm_sms = 24;
  k.validated = true;
  k.source = "MAMF table (ml-engineering), FlashAttention-2/-3 papers, NVIDIA forum (cluster.cc)";
  return k;
}

Cluster gpu_node(const char* name, const char* device, const char* cuda_name, double hbm,
                 double hbm_bw, double nvlink, double node_net, const char* source,
                 const KernelModel& kernels) {
  Cluster c;
  c.name = name;
  c.device = device;
  c.peak_flops_bf16 = cuda_peak_flops(cuda_name, true);
  c.peak_flops_fp32 = cuda_peak_flops(cuda_name, false);
  c.device_memory_bytes = hbm;
  c.memory_bw_bytes_per_s = hbm_bw;
  c.ranks_per_node = 8;
  c.base_latency_s = 8.4e-6;
  c.intra = LinkClass{nvlink, 3.4e-6, true};
  c.inter = LinkClass{node_net, 9.6e-6, false};
  c.kernels = kernels;
  // Device memory outside the tensors. CUDA context: assumed 500 MiB per process (PyTorch's
  // torch.cuda.memory_allocated documents that the context is created on the GPU and not
  // counted; its size depends on driver, CUDA version and loaded kernels: an assumption to be
  // measured, not a datasheet figure). NCCL: NCCL_BUFFSIZE's documented default, 4 MiB (NCCL
  // user guide, Environment Variables), per channel and connected peer; 16 channels assumed
  // (NCCL_MIN/MAX_NCHANNELS unset; nccl-tests logs on NVSwitch nodes show 16-32).
  c.cuda_context_bytes = 500.0 * (1 << 20);
  c.nccl_buffsize_bytes = 4.0 * (1 << 20);
  c.nccl_channels = 16;
  c.source = source;
  return c;
}

// cpu-local: this machine (2-core AMD EPYC, 25.3 GB RAM, OpenMPI 4.1.4 shared memory),
// compute re-fitted 2026-12-01 on the idle machine, OpenBLAS Haswell kernels, fused attention:
// - single-core sgemm 130 GFLOP/s (the launcher's calibration, config.mfu_peak: 129.6-131.1)
//   and a `small` step at 80-81 % of it: `shardbench run --np 1 --model small --strategies ddp
//   --batch 4 --steps 5` (step 0.130-0.132 s for 13.69 GFLOP) -> peak 130e9, efficiency 0.80;
// - ring all-gather / all-reduce of the suite's ring backend (MPI_Sendrecv, shared memory),
//   timed by a 60-line program on Communicator (fp32, 64 B..64 MiB, median of 5-30, max over
//   ranks): 2 ranks ~10 us per step, 1.4 GB/s per rank at >= 16 MiB; 4 ranks on the 2 cores
//   ~45 us per step, 1.1 GB/s per rank at >= 4 MiB (the oversubscribed case the tests run).
Cluster cpu_local() {
  Cluster c;
  c.name = "cpu-local";
  c.device = "1 CPU core (OpenBLAS, single thread)";
  c.peak_flops_bf16 = c.peak_flops_fp32 = 130e9;  // the workload computes in fp32 on CPU
  c.bf16_matmul = false;
  c.compute_efficiency = 0.80;
  c.comm_efficiency = 1.0;  // the bandwidth below is already the achieved one
  c.device_memory_bytes = 25.3e9;
  c.memory_bw_bytes_per_s = 0;  // memory-bound kernels: inside the calibrated efficiency
  // The kernel model applies once memory_bw_bytes_per_s is measured (a calibrated cluster):
  // GEMMs then run at the calibrated sgemm itself (ceiling 1, no waves on one core).
  c.kernels.gemm_ceiling = 1.0;
  c.kernels.source = "peak_flops_fp32 is the calibrated single-core sgemm";
  c.ranks_per_node = 2;
  c.host_cores = 2;
  c.intra = LinkClass{1.1e9, 45e-6, true};
  c.inter = LinkClass{1.1e9, 45e-6, true};  // virtual nodes: the same shared memory
  c.source = "measured on this machine 2026-11-29, compute re-fitted 2026-12-01 (see harness/predict/cluster.cc)";
  return c;
}

// H200: the H100's SMs and kernels (the same GH100 die), not validated against a published run.
KernelModel h200_kernels() {
  KernelModel k = gpu_kernels(132, 792.1 / 989.0, 0.35, 0.35);
  k.validated = false;
  return k;
}

std::vector<Cluster> presets() {
  return {cpu_local(),
          gpu_node("dgx-a100-80g", "NVIDIA A100-SXM4-80GB", "A100", 80e9, 2.039e12, 300e9, 200e9,
                   "NVIDIA DGX A100 datasheet; A100 datasheet (2021)",
                   gpu_kernels(108, 267.9 / 312.0, 0.73, 0.63)),
          gpu_node("dgx-h100", "NVIDIA H100-SXM5-80GB", "H100", 80e9, 3.35e12, 450e9, 400e9,
                   "NVIDIA DGX H100 datasheet (2023); H100 datasheet",
                   gpu_kernels(132, 792.1 / 989.0, 0.35, 0.35)),
          gpu_node("h200", "NVIDIA H200-SXM-141GB", "H200", 141e9, 4.8e12, 450e9, 400e9,
                   "NVIDIA H200 datasheet (2024); 8-GPU HGX/DGX H200 node", h200_kernels())};
}

// Which CUDA device names each GPU preset describes: every `all` substring and no `none`
// substring. CUDA names: "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3" (the SXM5 part;
// "NVIDIA H100 PCIe" and "NVIDIA H100 NVL" are other boards), "NVIDIA H200" (SXM; "NVIDIA
// H200 NVL"; "NVIDIA GH200 480GB" is a Grace Hopper superchip with its own memory system).
struct DeviceMatch {
  const char* preset;
  std::vector<const char*> all, none;
};
const std::vector<DeviceMatch>& device_matches() {
  static const std::vector<DeviceMatch> m = {
      {"dgx-a100-80g", {"A100", "SXM", "80GB"}, {}},
      {"dgx-h100", {"H100", "80GB HBM3"}, {"PCIe", "NVL", "GH200"}},
      {"dgx-h100", {"H100", "SXM"}, {"PCIe", "NVL", "GH200"}},
      {"h200", {"H200"}, {"NVL", "GH200"}},
  };
  return m;
}

double num(const nlohmann::json& j, const char* key, double def) {
  if (!j.contains(key)) return def;
  if (!j[key].is_number())
    throw std::invalid_argument(std::string("cluster key '") + key + "' must be a number");
  const double v = j[key].get<double>();
  if (!std::isfinite(v))
    throw std::invalid_argument(std::string("cluster key '") + key + "' must be finite");
  return v;
}

// Every key is checked for its type before it is read: a file is the user's input, and a key
// of the wrong type is a one-line refusal naming it, never an exception nlohmann throws.
std::string text(const nlohmann::json& j, const char* key, const std::string& def) {
  if (!j.contains(key)) return def;
  if (!j[key].is_string())
    throw std::invalid_argument(std::string("cluster key '") + key + "' must be a string");
  return j[key].get<std::string>();
}

bool flag(const nlohmann::json& j, const char* key, bool def) {
  if (!j.contains(key)) return def;
  if (!j[key].is_boolean())
    throw std::invalid_argument(std::string("cluster key '") + key + "' must be true or false");
  return j[key].get<bool>();
}

int count(const nlohmann::json& j, const char* key, int def) {  // a whole number of ranks, cores
  const double v = num(j, key, def);
  if (!(v >= 0 && v <= (1 << 24) && v == double(int(v))))
    throw std::invalid_argument(std::string("cluster key '") + key +
                                "' must be a whole number in 0..16777216");
  return int(v);
}

LinkClass link_from(const nlohmann::json& j, const LinkClass& def) {
  if (!j.is_object()) throw std::invalid_argument("cluster keys 'intra', 'inter' must be objects");
  LinkClass l = def;
  l.bw_bytes_per_s = num(j, "bw_bytes_per_s", def.bw_bytes_per_s);
  l.latency_s = num(j, "latency_s", def.latency_s);
  l.per_rank = flag(j, "per_rank", def.per_rank);
  l.fabric_bytes_per_s = num(j, "fabric_bytes_per_s", def.fabric_bytes_per_s);
  l.stream_bytes_per_s = num(j, "stream_bytes_per_s", def.stream_bytes_per_s);
  return l;
}

KernelModel kernels_from(const nlohmann::json& j, const KernelModel& def) {
  if (!j.is_object()) throw std::invalid_argument("cluster key 'kernels' must be an object");
  KernelModel k = def;
  struct Field {
    const char* key;
    double KernelModel::*at;
  };
  static constexpr Field kFields[] = {{"gemm_ceiling", &KernelModel::gemm_ceiling},
                                      {"mem_bw_fraction", &KernelModel::mem_bw_fraction},
                                      {"flash_fwd", &KernelModel::flash_fwd},
                                      {"flash_bwd", &KernelModel::flash_bwd},
                                      {"launch_s", &KernelModel::launch_s},
                                      {"quantize_elems_per_s", &KernelModel::quantize_elems_per_s},
                                      {"dequantize_elems_per_s",
                                       &KernelModel::dequantize_elems_per_s},
                                      {"quantize_int4_elems_per_s",
                                       &KernelModel::quantize_int4_elems_per_s},
                                      {"dequantize_int4_sum_elems_per_s",
                                       &KernelModel::dequantize_int4_sum_elems_per_s}};
  for (const Field& f : kFields) k.*f.at = num(j, f.key, k.*f.at);
  k.sm_count = count(j, "sm_count", def.sm_count);
  k.comm_sms = count(j, "comm_sms", def.comm_sms);
  if (j.contains("validated")) {
    if (!j["validated"].is_boolean())
      throw std::invalid_argument("cluster key 'kernels.validated' must be true or false");
    k.validated = j["validated"].get<bool>();
  }
  k.source = text(j, "source", def.source);
  if (k.sm_count < 0 || k.comm_sms < 0 || k.gemm_ceiling < 0 || k.gemm_ceiling > 1 ||
      k.mem_bw_fraction <= 0 || k.mem_bw_fraction > 1 || k.flash_fwd < 0 || k.flash_fwd > 1 ||
      k.flash_bwd < 0 || k.flash_bwd > 1 || k.launch_s < 0 || k.launch_s > 1 ||
      k.quantize_elems_per_s < 0 || k.dequantize_elems_per_s < 0 ||
      k.quantize_int4_elems_per_s < 0 || k.dequantize_int4_sum_elems_per_s < 0)
    throw std::invalid_argument(
        "cluster key 'kernels': sm_count, comm_sms >= 0; gemm_ceiling, flash_* in [0, 1]; "
        "mem_bw_fraction in (0, 1]; launch_s in [0, 1]; *quantize_elems_per_s >= 0");
  if (k.sm_count > 0 && k.comm_sms >= k.sm_count)
    throw std::invalid_argument("cluster key 'kernels.comm_sms' must be below sm_count");
  return k;
}

}  // namespace

double Cluster::memory_per_rank(int world) const {
  return host_cores > 0 ? device_memory_bytes / std::max(1, world) : device_memory_bytes;
}

double Cluster::oversubscription(int world) const {
  return host_cores > 0 ? std::max(1.0, double(world) / host_cores) : 1.0;
}

double Cluster::compute_slowdown(int world) const {
  // N ranks time-sliced on C cores get at most a core's share each: a measured figure below
  // N / C (or 1) is the two timings' noise.
  const double rule = oversubscription(world);
  if (host_cores > 0 && measured_slowdown > 0 && world == measured_world)
    return std::max(rule, measured_slowdown);
  return rule;
}

std::string preset_for_cuda_device(const std::string& cuda_name) {
  auto has = [&](const char* s) { return cuda_name.find(s) != std::string::npos; };
  for (const DeviceMatch& m : device_matches())
    if (std::all_of(m.all.begin(), m.all.end(), has) && std::none_of(m.none.begin(), m.none.end(), has))
      return m.preset;
  return "";
}

Cluster calibrated_cpu_cluster(const CpuCalibration& cal) {
  Cluster c = cpu_local();
  c.name = "cpu-calibrated";
  c.device = "1 CPU core (OpenBLAS, single thread), calibrated by this run";
  c.peak_flops_bf16 = c.peak_flops_fp32 = cal.sgemm_flops;
  c.memory_bw_bytes_per_s = cal.mem_bw_bytes_per_s;
  if (cal.host_cores > 0) c.host_cores = cal.host_cores;
  c.ranks_per_node = std::max(1, cal.ranks_per_node);
  if (cal.memory_bytes > 0) c.device_memory_bytes = cal.memory_bytes;
  if (cal.quantize_elems_per_s > 0) c.kernels.quantize_elems_per_s = cal.quantize_elems_per_s;
  if (cal.dequantize_elems_per_s > 0)
    c.kernels.dequantize_elems_per_s = cal.dequantize_elems_per_s;
  if (cal.quantize_int4_elems_per_s > 0)
    c.kernels.quantize_int4_elems_per_s = cal.quantize_int4_elems_per_s;
  if (cal.dequantize_int4_sum_elems_per_s > 0)
    c.kernels.dequantize_int4_sum_elems_per_s = cal.dequantize_int4_sum_elems_per_s;
  if (cal.gemm_mix_flops > 0 && cal.sgemm_flops > 0) {
    // GEMMs at the rate the run's own shapes measured; the CPU's fused attention is not BLAS
    // and keeps the ceiling it had (the sgemm's rate).
    c.kernels.flash_fwd = c.kernels.flash_bwd = c.kernels.gemm_ceiling;
    // At most the sgemm itself: the ceiling is a fraction of the peak (a mix timed above it is
    // the two measurements' spread).
    c.kernels.gemm_ceiling = std::min(1.0, cal.gemm_mix_flops / cal.sgemm_flops);
  }
  c.source = cal.source + "; compute_efficiency and links: cpu-local's (" + cpu_local().source + ")";
  return c;
}

std::vector<std::string> cluster_names() {
  std::vector<std::string> v;
  for (const Cluster& c : presets()) v.push_back(c.name);
  return v;
}

nlohmann::json kernel_model_json(const KernelModel& k) {
  return {{"sm_count", k.sm_count},        {"gemm_ceiling", k.gemm_ceiling},
          {"mem_bw_fraction", k.mem_bw_fraction}, {"flash_fwd", k.flash_fwd},
          {"flash_bwd", k.flash_bwd},      {"launch_s", k.launch_s},
          {"comm_sms", k.comm_sms},        {"validated", k.validated},
          {"quantize_elems_per_s", k.quantize_elems_per_s},
          {"dequantize_elems_per_s", k.dequantize_elems_per_s},
          {"quantize_int4_elems_per_s", k.quantize_int4_elems_per_s},
          {"dequantize_int4_sum_elems_per_s", k.dequantize_int4_sum_elems_per_s},
          {"source", k.source}};
}

nlohmann::json cluster_json(const Cluster& c) {
  auto link = [](const LinkClass& l) {
    return nlohmann::json{
        {"bw_bytes_per_s", l.bw_bytes_per_s}, {"latency_s", l.latency_s}, {"per_rank", l.per_rank},
        {"fabric_bytes_per_s", l.fabric_bytes_per_s}, {"stream_bytes_per_s", l.stream_bytes_per_s}};
  };
  return {{"name", c.name},
          {"device", c.device},
          {"peak_flops_bf16", c.peak_flops_bf16},
          {"peak_flops_fp32", c.peak_flops_fp32},
          {"compute_efficiency", c.compute_efficiency},
          {"comm_efficiency", c.comm_efficiency},
          {"device_memory_bytes", c.device_memory_bytes},
          {"memory_bw_bytes_per_s", c.memory_bw_bytes_per_s},
          {"base_latency_s", c.base_latency_s},
          {"ranks_per_node", c.ranks_per_node},
          {"host_cores", c.host_cores},
          {"measured_slowdown", c.measured_slowdown},
          {"measured_world", c.measured_world},
          {"beside_compute_base_s", c.beside_compute_base_s},
          {"beside_compute_step_s", c.beside_compute_step_s},
          {"after_compute_sync_s", c.after_compute_sync_s},
          {"after_compute_burst_s", c.after_compute_burst_s},
          {"bf16_matmul", c.bf16_matmul},
          {"intra", link(c.intra)},
          {"inter", link(c.inter)},
          {"kernels", kernel_model_json(c.kernels)},
          {"cuda_context_bytes", c.cuda_context_bytes},
          {"nccl_buffsize_bytes", c.nccl_buffsize_bytes},
          {"nccl_channels", c.nccl_channels},
          {"source", c.source}};
}

Cluster cluster_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("--cluster: the file must hold a JSON object");
  Cluster c;
  if (j.contains("base")) c = load_cluster(text(j, "base", ""));  // edit a preset
  c.name = text(j, "name", c.name.empty() ? std::string("custom") : c.name);
  c.device = text(j, "device", c.device);
  c.peak_flops_bf16 = num(j, "peak_flops_bf16", c.peak_flops_bf16);
  c.peak_flops_fp32 = num(j, "peak_flops_fp32", c.peak_flops_fp32);
  c.compute_efficiency = num(j, "compute_efficiency", c.compute_efficiency);
  c.comm_efficiency = num(j, "comm_efficiency", c.comm_efficiency);
  c.device_memory_bytes = num(j, "device_memory_bytes", c.device_memory_bytes);
  c.memory_bw_bytes_per_s = num(j, "memory_bw_bytes_per_s", c.memory_bw_bytes_per_s);
  c.base_latency_s = num(j, "base_latency_s", c.base_latency_s);
  c.ranks_per_node = count(j, "ranks_per_node", c.ranks_per_node);
  c.host_cores = count(j, "host_cores", c.host_cores);
  c.measured_slowdown = num(j, "measured_slowdown", c.measured_slowdown);
  c.measured_world = count(j, "measured_world", c.measured_world);
  c.beside_compute_base_s = num(j, "beside_compute_base_s", c.beside_compute_base_s);
  c.beside_compute_step_s = num(j, "beside_compute_step_s", c.beside_compute_step_s);
  c.after_compute_sync_s = num(j, "after_compute_sync_s", c.after_compute_sync_s);
  c.after_compute_burst_s = num(j, "after_compute_burst_s", c.after_compute_burst_s);
  c.cuda_context_bytes = num(j, "cuda_context_bytes", c.cuda_context_bytes);
  c.nccl_buffsize_bytes = num(j, "nccl_buffsize_bytes", c.nccl_buffsize_bytes);
  c.nccl_channels = count(j, "nccl_channels", c.nccl_channels);
  c.bf16_matmul = flag(j, "bf16_matmul", c.bf16_matmul);
  if (j.contains("intra")) c.intra = link_from(j["intra"], c.intra);
  if (j.contains("inter")) c.inter = link_from(j["inter"], c.inter);
  if (j.contains("kernels")) c.kernels = kernels_from(j["kernels"], c.kernels);
  c.source = text(j, "source", c.source);
  auto bad = [&](const char* why) {
    throw std::invalid_argument("--cluster " + c.name + ": " + why);
  };
  if (c.peak_flops_bf16 <= 0 || c.peak_flops_fp32 <= 0) bad("peak_flops_* must be positive");
  if (c.compute_efficiency <= 0 || c.comm_efficiency <= 0) bad("efficiencies must be positive");
  if (c.device_memory_bytes <= 0) bad("device_memory_bytes must be positive");
  if (c.ranks_per_node < 1) bad("ranks_per_node must be >= 1");
  if (c.measured_slowdown < 0 || c.measured_world < 0)
    bad("measured_slowdown and measured_world must be >= 0 (0: not measured)");
  if (c.beside_compute_base_s < 0 || c.beside_compute_step_s < 0 ||
      c.after_compute_sync_s < 0 || c.after_compute_burst_s < 0)
    bad("beside_compute_base_s, beside_compute_step_s, after_compute_sync_s and "
        "after_compute_burst_s must be >= 0 (0: not measured)");
  if (c.cuda_context_bytes < 0 || c.nccl_buffsize_bytes < 0 || c.nccl_channels < 0)
    bad("cuda_context_bytes, nccl_buffsize_bytes and nccl_channels must be >= 0");
  if (c.intra.bw_bytes_per_s <= 0 || c.inter.bw_bytes_per_s <= 0)
    bad("bandwidths must be positive");
  if (c.intra.fabric_bytes_per_s < 0 || c.inter.fabric_bytes_per_s < 0)
    bad("fabric_bytes_per_s must be >= 0 (0: no shared limit)");
  if (c.intra.stream_bytes_per_s < 0 || c.inter.stream_bytes_per_s < 0)
    bad("stream_bytes_per_s must be >= 0 (0: the network moves the bytes, no CPU taken)");
  return c;
}

Cluster load_cluster(const std::string& name_or_path) {
  for (const Cluster& c : presets())
    if (c.name == name_or_path) return c;
  std::ifstream f(name_or_path);
  if (!f) {
    std::string names;
    for (const Cluster& c : presets()) names += "|" + c.name;
    throw std::invalid_argument("--cluster " + name_or_path + ": not a preset (" + names.substr(1) +
                                ") nor a readable JSON file");
  }
  // Malformed JSON, a key of the wrong JSON type or a value out of range: one refusal naming
  // the file.
  const auto refuse = [&](const std::exception& e) {
    return std::invalid_argument("--cluster " + name_or_path + ": " + e.what());
  };
  try {
    return cluster_from_json(nlohmann::json::parse(f));
  } catch (const nlohmann::json::exception& e) {
    throw refuse(e);
  } catch (const std::invalid_argument& e) {
    throw refuse(e);
  }
}

}  // namespace sb
