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
  // > 0: all nodes' traffic over this link class together moves at most this many bytes per
  // second, each node's share the total over the nodes (an oversubscribed network core, or
  // namespace hosts whose TCP runs on one machine's cores); 0: no shared limit.
  double fabric_bytes_per_s = 0;
  // > 0: this link's TCP runs on the ranks' own cores (namespace hosts on one machine): one
  // stream alone moves this many bytes per second holding a core at each end, so where ranks
  // outnumber cores a collective's boundary bytes take that CPU from the compute (traffic.cc);
  // 0: the network moves them (a NIC), no CPU taken.
  double stream_bytes_per_s = 0;
};

// The per-kernel time model of one device (kernel_cost.h). A cluster without it (gemm_ceiling
// 0: a file written before it) keeps the older rule, matmuls at peak x compute_efficiency.
struct KernelModel {
  int sm_count = 0;            // streaming multiprocessors (wave quantisation); 0: no waves (CPU)
  double gemm_ceiling = 0;     // achieved / peak of the best-shaped large GEMM; 0: not modelled
  double mem_bw_fraction = 1;  // achieved / datasheet memory bandwidth of streaming kernels
  double flash_fwd = 0, flash_bwd = 0;  // fused attention achieved / peak (0: gemm_ceiling)
  double launch_s = 0;         // the shortest a kernel can take (launch and dispatch)
  int comm_sms = 0;            // SMs a running collective holds (contention with compute)
  // ZeRO++'s quantiser as host arithmetic (strategies/quantize.cc), elements per second of one
  // quantise and one dequantise pass, timed on this core; 0: a device kernel, memory-bound.
  double quantize_elems_per_s = 0, dequantize_elems_per_s = 0;
  // qgZ's packed int4 passes (quantize_int4_parts, dequantize_int4_sum), timed the same way;
  // 0: the int8 rate of the same direction above.
  double quantize_int4_elems_per_s = 0, dequantize_int4_sum_elems_per_s = 0;
  bool validated = false;      // the device of a published run in bench/published
  std::string source;          // where each constant comes from
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
  // > 0 (a CPU run's calibration): how many times longer the run's GEMMs took on one rank
  // while all `measured_world` ranks ran them at once than alone, which replaces the rule
  // world / host_cores at that world where above it (time-slicing, shared caches and memory:
  // 2.06-2.11x measured for 4 ranks on 2 cores here, and up to 1.06x for 2 on 2).
  double measured_slowdown = 0;
  int measured_world = 0;
  // > 0 (a CPU run's calibration, where ranks outnumber cores): how much longer a collective
  // takes while the ranks' compute runs beside it than alone, per collective and per ring
  // step. Each step waits for its peer's comm thread to be scheduled behind the compute
  // threads; timed at start with 1 KiB rings beside a thread of sgemms on every rank. They
  // and the two below apply at measured_world only.
  double beside_compute_base_s = 0, beside_compute_step_s = 0;
  // > 0 (the same calibration): how long a rank that blocks on a collective right after
  // computing waits for its peers, time-sliced on the same cores, to reach it (the mean of a
  // 1 KiB all-reduce after a burst of sgemms on every rank, less its idle time), and the
  // burst's own time (its mean over ranks and repeats): after less compute, that share of it.
  double after_compute_sync_s = 0, after_compute_burst_s = 0;
  LinkClass intra, inter;
  KernelModel kernels;
  // Device memory outside the tensors (GPU clusters; 0 on CPU): the CUDA context, and NCCL's
  // per-connection buffers, nccl_buffsize_bytes per channel and ring peer of each communicator.
  double cuda_context_bytes = 0;
  double nccl_buffsize_bytes = 0;
  int nccl_channels = 0;
  std::string source;  // datasheets / calibration command and date

  double peak_flops(bool bf16) const { return bf16 ? peak_flops_bf16 : peak_flops_fp32; }
  // Memory one rank may use: the device's, or the host's share when ranks share a host.
  double memory_per_rank(int world) const;
  // Ranks per core when more ranks than cores share the host (1 otherwise): whether the
  // collectives take the compute's cores.
  double oversubscription(int world) const;
  // How much slower each kernel runs for sharing the host: measured_slowdown at the world it
  // was measured for (at least oversubscription(world)), else oversubscription(world).
  double compute_slowdown(int world) const;
};

std::vector<std::string> cluster_names();

// The GPU preset whose device is the CUDA device `cuda_name` (cudaDeviceProp::name, e.g.
// "NVIDIA H100 80GB HBM3" -> dgx-h100); "" when no preset describes that device (a PCIe or
// NVL part, another memory size, an unknown GPU): a run then predicts nothing rather than
// borrow another GPU's figures.
std::string preset_for_cuda_device(const std::string& cuda_name);

// What a CPU run calibrated, for the cluster its embedded prediction uses.
struct CpuCalibration {
  double sgemm_flops = 0;      // single-core sgemm, one BLAS thread (the MFU's per-core figure)
  double mem_bw_bytes_per_s = 0;  // single-core STREAM-like triad; 0: not measured
  int host_cores = 0;          // physical cores the ranks share
  int ranks_per_node = 1;
  double memory_bytes = 0;     // the host's RAM; 0: cpu-local's
  // strategies/quantize.cc's quantise and dequantise passes on this core (elements/s), qwZ's
  // int8 and qgZ's int4; 0: not measured (the cluster keeps cpu-local's figures)
  double quantize_elems_per_s = 0, dequantize_elems_per_s = 0;
  double quantize_int4_elems_per_s = 0, dequantize_int4_sum_elems_per_s = 0;
  // The run's own GEMM shapes on this core, FLOP-weighted (FLOP/s); 0: not measured (GEMMs
  // then run at sgemm_flops, as before)
  double gemm_mix_flops = 0;
  std::string source;          // how and when, one line
};
// cpu-local with the measured figures in place of the fitted ones; the links keep cpu-local's
// measured shared-memory model, the efficiency its fit (named in `source`).
Cluster calibrated_cpu_cluster(const CpuCalibration& cal);
// A preset name, or a path to a JSON file with the keys of cluster_json. Throws
// std::invalid_argument naming --cluster and what is allowed.
Cluster load_cluster(const std::string& name_or_path);
nlohmann::json cluster_json(const Cluster& c);
nlohmann::json kernel_model_json(const KernelModel& k);
Cluster cluster_from_json(const nlohmann::json& j);  // throws std::invalid_argument

}  // namespace sb
