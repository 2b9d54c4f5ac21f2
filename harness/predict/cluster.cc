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
Cluster gpu_node(const char* name, const char* device, const char* cuda_name, double hbm,
                 double hbm_bw, double nvlink, double node_net, const char* source) {
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
  c.ranks_per_node = 2;
  c.host_cores = 2;
  c.intra = LinkClass{1.1e9, 45e-6, true};
  c.inter = LinkClass{1.1e9, 45e-6, true};  // virtual nodes: the same shared memory
  c.source = "measured on this machine 2026-11-29, compute re-fitted 2026-12-01 (see harness/predict/cluster.cc)";
  return c;
}

std::vector<Cluster> presets() {
  return {cpu_local(),
          gpu_node("dgx-a100-80g", "NVIDIA A100-SXM4-80GB", "A100", 80e9, 2.039e12, 300e9, 200e9,
                   "NVIDIA DGX A100 datasheet; A100 datasheet (2021)"),
          gpu_node("dgx-h100", "NVIDIA H100-SXM5-80GB", "H100", 80e9, 3.35e12, 450e9, 400e9,
                   "NVIDIA DGX H100 datasheet (2023); H100 datasheet"),
          gpu_node("h200", "NVIDIA H200-SXM-141GB", "H200", 141e9, 4.8e12, 450e9, 400e9,
                   "NVIDIA H200 datasheet (2024); 8-GPU HGX/DGX H200 node")};
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
  return l;
}

}  // namespace

double Cluster::memory_per_rank(int world) const {
  return host_cores > 0 ? device_memory_bytes / std::max(1, world) : device_memory_bytes;
}

double Cluster::oversubscription(int world) const {
  return host_cores > 0 ? std::max(1.0, double(world) / host_cores) : 1.0;
}

std::vector<std::string> cluster_names() {
  std::vector<std::string> v;
  for (const Cluster& c : presets()) v.push_back(c.name);
  return v;
}

nlohmann::json cluster_json(const Cluster& c) {
  auto link = [](const LinkClass& l) {
    return nlohmann::json{
        {"bw_bytes_per_s", l.bw_bytes_per_s}, {"latency_s", l.latency_s}, {"per_rank", l.per_rank}};
  };
  return {{"name", c.name},
          {"device", c.device},
          {"peak_flops_bf16", c.peak_flops_bf16},
          {"peak_flops_fp32", c.peak_flops_fp32},
          {"compute_efficiency", c.compute_efficiency},
          {"comm_efficiency", c.comm_efficiency},
          {"device_memory_bytes", c.device_memory_bytes},
          {"memory_bw_bytes_per_s", c.memory_bw_bytes_per_s},
          {"ranks_per_node", c.ranks_per_node},
          {"host_cores", c.host_cores},
          {"bf16_matmul", c.bf16_matmul},
          {"intra", link(c.intra)},
          {"inter", link(c.inter)},
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
  c.bf16_matmul = flag(j, "bf16_matmul", c.bf16_matmul);
  if (j.contains("intra")) c.intra = link_from(j["intra"], c.intra);
  if (j.contains("inter")) c.inter = link_from(j["inter"], c.inter);
  c.source = text(j, "source", c.source);
  auto bad = [&](const char* why) {
    throw std::invalid_argument("--cluster " + c.name + ": " + why);
  };
  if (c.peak_flops_bf16 <= 0 || c.peak_flops_fp32 <= 0) bad("peak_flops_* must be positive");
  if (c.compute_efficiency <= 0 || c.comm_efficiency <= 0) bad("efficiencies must be positive");
  if (c.device_memory_bytes <= 0) bad("device_memory_bytes must be positive");
  if (c.ranks_per_node < 1) bad("ranks_per_node must be >= 1");
  if (c.intra.bw_bytes_per_s <= 0 || c.inter.bw_bytes_per_s <= 0)
    bad("bandwidths must be positive");
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
  nlohmann::json j;
  try {
    f >> j;
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument("--cluster " + name_or_path + ": " + e.what());
  }
  return cluster_from_json(j);
}

}  // namespace sb
