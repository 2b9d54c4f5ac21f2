// The CPU's MFU denominator: the single-core sgemm ceiling, measured with one BLAS thread for
// long enough to be steady (median of repeats), with its spread and where it came from. One
// value per results file: the launcher measures it once and hands it to the ranks; --resume
// keeps the file's value. Does not decide what MFU divides by (devices; run_command.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/predict/kernel_cost.h"

namespace sb {

struct PeakCalibration {
  double gflops = 0;      // per device: median of the repeats (or --peak-gflops, datasheet)
  double min_gflops = 0;  // fastest and slowest repeat: the spread of the measurement
  double max_gflops = 0;
  int repeats = 0;        // 0: not measured here
  std::string source;     // how and by whom, one line
  // The same core's memory bandwidth (STREAM-like triad, bytes/s), for the cluster of the
  // run's embedded prediction; not part of MFU. 0: not measured (older files).
  double mem_bw_bytes_per_s = 0;
  // ZeRO++'s quantiser (strategies/quantize.cc) on the same core, elements/s of a quantise and
  // of a dequantise pass, for the same cluster. 0: not measured (older files).
  double quantize_elems_per_s = 0, dequantize_elems_per_s = 0;
  // qgZ's int4 passes (quantize_int4_parts, dequantize_int4_sum), the same way; 0: not measured.
  double quantize_int4_elems_per_s = 0, dequantize_int4_sum_elems_per_s = 0;
  // The run's own GEMMs on the same core (measure_gemm_mix): GFLOP/s over its distinct
  // shapes, FLOP-weighted, for the same cluster's GEMM rate. 0: not measured (older files).
  double gemm_mix_gflops = 0;
  int gemm_mix_shapes = 0;

  nlohmann::json to_json() const;  // config.mfu_peak
  static PeakCalibration from_json(const nlohmann::json& j);  // throws on a malformed value
  std::string to_flag() const;     // the launcher -> ranks hand-over (hidden flag)
  static PeakCalibration from_flag(const std::string& s);     // throws std::invalid_argument
};

// Measures in this process: sets OpenBLAS to one thread first (the launcher calls this before
// OPENBLAS_NUM_THREADS=1 reaches it), warms up, then `repeats` timed blocks of square 768^3
// sgemm of at least `block_s` seconds each; gflops = median block rate. `who` names the
// process in `source` ("the launcher", "rank 0").
PeakCalibration measure_sgemm_peak(const std::string& who, int repeats = 7,
                                   double block_s = 0.06);

// One thread's STREAM-like triad a[i] = b[i] + s * c[i] over three float arrays far larger
// than the caches: median of `repeats` blocks of at least `block_s` seconds, counted as
// STREAM counts (12 bytes per element: two reads, one write; no write-allocate traffic).
double measure_triad_bw(int repeats = 5, double block_s = 0.03);

// One thread's pass of the suite's qwZ quantiser (quantize_int8, dequantize_int8 of
// strategies/quantize.h, fp32 values, DeepSpeed's block search) over 1 Mi elements, each pass
// on the next of 8 such tensors (72 MiB in all, so the values come from memory), and of qgZ's
// (quantize_int4_parts, dequantize_int4_sum: 4 partitions, groups of 1 Ki elements, the sum
// over 2 blocks of 2): elements/s as Device::quantizer_pass counts them, median of `repeats`
// blocks of at least `block_s` seconds each.
struct QuantizerRates {
  double quantize = 0, dequantize = 0;
  double quantize_int4 = 0, dequantize_int4_sum = 0;
};
QuantizerRates measure_quantizer(int repeats = 5, double block_s = 0.03);

// The rate of a step's own GEMMs on one core with one BLAS thread: each distinct shape of
// `calls` (predict.h's step_gemm_calls) timed on the CPU device for at least `per_shape_s`
// after one warm-up call, weighted by the FLOPs the step spends in it: the step's GEMM FLOPs
// over their time, GFLOP/s (0 for none). The square 768^3 of the MFU peak is one shape;
// `small`'s thin ones (k = 256) run 86-96 % of it (sb_micro_bench's gemm/ rows).
double measure_gemm_mix(const std::vector<std::pair<GemmCall, uint64_t>>& calls,
                        double per_shape_s = 0.01);
// The same GEMMs in the step's proportions (every call to the shape furthest behind its
// count's share), after one warm-up call each and then `before_timing` (a barrier: every rank
// starts its window together), until `seconds` have passed: their FLOPs over that time,
// GFLOP/s (0 for none). Timed on every rank at once, every rank busy for the whole window, it
// is what a step's GEMMs get of the shared cores. One window spanning many scheduler slices,
// not one per shape (20 ms windows gave 2.05-2.41x at 4 ranks on 2 cores from run to run,
// against forward times that moved 4 %), and a window of time, not a pass of work (a rank done
// early leaves the others the cores: 1.77x seen).
double run_gemm_list(const std::vector<std::pair<GemmCall, uint64_t>>& calls,
                     double seconds = 0.5, const std::function<void()>& before_timing = {});
// p with the GEMM mix of `calls` measured in this process (not cached: it is the model's).
PeakCalibration with_gemm_mix(PeakCalibration p,
                              const std::vector<std::pair<GemmCall, uint64_t>>& calls);

// What the launcher (or rank 0 without one) hands the ranks: --peak-gflops's figure or the
// measured sgemm, with the triad bandwidth and the quantiser measured in the same process.
PeakCalibration calibrate_cpu(double peak_gflops, const std::string& who);

// calibrate_cpu, measured once per machine where SB_CALIBRATION_CACHE names a file (the test
// command's: hundreds of short runs in a row on one idle machine, ~1.4 s of calibration each).
// The first run measures and writes the file; a later run on the same host reuses it, and its
// source says so ("... reused from SB_CALIBRATION_CACHE=FILE"). An unreadable file, another
// host's or --peak-gflops: measured as without it. Without the variable (users, the nightly):
// every run measures.
PeakCalibration calibrate_cpu_once(double peak_gflops, const std::string& who);

// A fixed figure (--peak-gflops, or a GPU datasheet): no spread.
PeakCalibration fixed_peak(double gflops, const std::string& source);

}  // namespace sb
