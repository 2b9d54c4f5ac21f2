// The system input of the predictor (Calculon's "system" file): per-device peak FLOP/s and
// memory, and two network tiers — the link inside a node and the network between nodes — as
// alpha (latency per ring step) and beta (bandwidth). Presets live in cluster.cc with their
// sources; any preset can be written out as JSON, edited and read back with --cluster FILE.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sb {

struct LinkClass {
  double bw_bytes_per_s = 0;  // one direction; see `per_rank`
  double latency_s = 0;       // per ring step over this link (alpha)
  // true: bw is what each rank sends at, concurrently with the others (NVLink through
  // NVSwitch, or a CPU core copying in shared memory); false: bw is the node's aggregate over
  // all its NICs, shared by the node's ranks (a node's egress across the network).
  bool per_rank = true;
};

struct Cluster {
  std::string name;
  std::string device;               // what one rank runs on
  double peak_flops_bf16 = 0;       // dense, per device
  double peak_flops_fp32 = 0;       // dense fp32 (no TF32), per device
  double compute_efficiency = 0.5;  // achieved / peak for this workload's step
  double comm_efficiency = 0.8;     // achieved bus bandwidth / link bandwidth
  double device_memory_bytes = 0;   // per device
  double memory_bw_bytes_per_s = 0; // device memory bandwidth (memory-bound kernels of the
                                    // simulated device); 0 = their time is not modelled
  double base_latency_s = 0;        // per collective, before its ring steps
  int ranks_per_node = 1;           // devices per node (the default --ranks-per-node)
  bool bf16_matmul = true;          // bf16-mixed matmuls run in bf16 (CUDA); false: fp32 (CPU)
  int host_cores = 0;               // > 0: every rank shares one host (virtual nodes): the
                                    // cores and memory are divided among the world's ranks
  LinkClass intra, inter;
  // Device memory outside the tensors (GPU clusters; 0 on CPU): the CUDA context, and NCCL's
  // per-connection buffers, nccl_buffsize_bytes per channel and ring peer of each communicator.
  double cuda_context_bytes = 0;
  double nccl_buffsize_bytes = 0;
  int nccl_channels = 0;
  std::string source;  // datasheets / calibration command and date

  double peak_flops(bool bf16) const { return bf16 ? peak_flops_bf16 : peak_flops_fp32; }
  // Memory one rank may use: the device's, or the host's share when ranks share a host.
  double memory_per_rank(int world) const;
  // Compute slow-down when more ranks than cores share the host (1 otherwise).
  double oversubscription(int world) const;
};

std::vector<std::string> cluster_names();
// A preset name, or a path to a JSON file with the keys of cluster_json. Throws
// std::invalid_argument naming --cluster and what is allowed.
Cluster load_cluster(const std::string& name_or_path);
nlohmann::json cluster_json(const Cluster& c);
Cluster cluster_from_json(const nlohmann::json& j);  // throws std::invalid_argument

}  // namespace sb
