// Calibration of the CPU's sgemm ceiling (see header). The spread is recorded, not hidden: a
// loaded machine shows up as a wide [min, max] in config.mfu_peak.
#include "bench/cli/peak_calibration.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "harness/device/cpu_device.h"
#include "strategies/quantize.h"

extern "C" void openblas_set_num_threads(int);  // OpenBLAS: threads of this process

namespace sb {

nlohmann::json PeakCalibration::to_json() const {
  return {{"per_device_flops", gflops * 1e9}, {"min_flops", min_gflops * 1e9},
          {"max_flops", max_gflops * 1e9},    {"repeats", repeats},
          {"source", source},                 {"mem_bw_bytes_per_s", mem_bw_bytes_per_s},
          {"quantize_elems_per_s", quantize_elems_per_s},
          {"dequantize_elems_per_s", dequantize_elems_per_s},
          {"quantize_int4_elems_per_s", quantize_int4_elems_per_s},
          {"dequantize_int4_sum_elems_per_s", dequantize_int4_sum_elems_per_s},
          {"gemm_mix_flops", gemm_mix_gflops * 1e9}, {"gemm_mix_shapes", gemm_mix_shapes}};
}

PeakCalibration PeakCalibration::from_json(const nlohmann::json& j) {
  PeakCalibration p;
  p.gflops = j.at("per_device_flops").get<double>() / 1e9;
  p.min_gflops = j.at("min_flops").get<double>() / 1e9;
  p.max_gflops = j.at("max_flops").get<double>() / 1e9;
  p.repeats = j.at("repeats").get<int>();
  p.source = j.at("source").get<std::string>();
  p.mem_bw_bytes_per_s = j.value("mem_bw_bytes_per_s", 0.0);
  p.quantize_elems_per_s = j.value("quantize_elems_per_s", 0.0);
  p.dequantize_elems_per_s = j.value("dequantize_elems_per_s", 0.0);
  p.quantize_int4_elems_per_s = j.value("quantize_int4_elems_per_s", 0.0);
  p.dequantize_int4_sum_elems_per_s = j.value("dequantize_int4_sum_elems_per_s", 0.0);
  p.gemm_mix_gflops = j.value("gemm_mix_flops", 0.0) / 1e9;
  p.gemm_mix_shapes = j.value("gemm_mix_shapes", 0);
  return p;
}

std::string PeakCalibration::to_flag() const {
  return fmt::format("{:.4f},{:.4f},{:.4f},{},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.4f},{},{}",
                     gflops, min_gflops, max_gflops, repeats, mem_bw_bytes_per_s,
                     quantize_elems_per_s, dequantize_elems_per_s, quantize_int4_elems_per_s,
                     dequantize_int4_sum_elems_per_s, gemm_mix_gflops, gemm_mix_shapes, source);
}

PeakCalibration PeakCalibration::from_flag(const std::string& s) {
  PeakCalibration p;
  size_t pos = 0;
  auto field = [&] {
    const size_t end = s.find(',', pos);
    if (end == std::string::npos) throw std::invalid_argument("--peak-calibration: " + s);
    std::string f = s.substr(pos, end - pos);
    pos = end + 1;
    return f;
  };
  p.gflops = std::stod(field());
  p.min_gflops = std::stod(field());
  p.max_gflops = std::stod(field());
  p.repeats = std::stoi(field());
  p.mem_bw_bytes_per_s = std::stod(field());
  p.quantize_elems_per_s = std::stod(field());
  p.dequantize_elems_per_s = std::stod(field());
  p.quantize_int4_elems_per_s = std::stod(field());
  p.dequantize_int4_sum_elems_per_s = std::stod(field());
  p.gemm_mix_gflops = std::stod(field());
  p.gemm_mix_shapes = std::stoi(field());
  p.source = s.substr(pos);
  return p;
}

namespace {

// Rates of `repeats` timed blocks of at least `block_s` seconds of `work` (per call: `units`),
// sorted: the median is the figure, the ends its spread.
template <typename Work>
std::vector<double> block_rates(int repeats, double block_s, double units, Work&& work) {
  std::vector<double> rates;
  using Clock = std::chrono::steady_clock;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    int calls = 0;
    double s = 0;
    do {
      work();
      ++calls;
      s = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (s < block_s);
    rates.push_back(units * calls / s);
  }
  std::sort(rates.begin(), rates.end());
  return rates;
}

}  // namespace

PeakCalibration measure_sgemm_peak(const std::string& who, int repeats, double block_s) {
  openblas_set_num_threads(1);  // before the first call: "single-core" must mean one thread
  auto dev = make_cpu_device();
  const int n = 768;
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  auto gemm = [&] {
    dev->gemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  for (int i = 0; i < 3; ++i) gemm();  // warm-up: page in the buffers, wake the core up
  const std::vector<double> rates =
      block_rates(repeats, block_s, 2.0 * n * n * double(n) / 1e9, gemm);
  PeakCalibration p;
  p.gflops = rates[rates.size() / 2];
  p.min_gflops = rates.front();
  p.max_gflops = rates.back();
  p.repeats = repeats;
  p.source = fmt::format("single-core sgemm {}^3, 1 BLAS thread, median of {} blocks of >= {:g} "
                         "ms, measured by {}", n, repeats, block_s * 1e3, who);
  return p;
}

double measure_triad_bw(int repeats, double block_s) {
  const size_t n = size_t(8) << 20;  // 3 x 32 MiB: beyond any last-level cache of one core
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  auto triad = [&] {
    float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    const float* __restrict pc = c.data();
    for (size_t i = 0; i < n; ++i) pa[i] = pb[i] + 3.0f * pc[i];
  };
  triad();  // warm-up: page in a
  const std::vector<double> rates = block_rates(repeats, block_s, 12.0 * double(n), triad);
  if (a[n / 2] != 7.0f) throw std::runtime_error("triad calibration: wrong result");
  return rates[rates.size() / 2];
}

QuantizerRates measure_quantizer(int repeats, double block_s) {
  auto dev = make_cpu_device();
  const uint64_t n = uint64_t(1) << 20, blocks = qwz_blocks(n);
  // kSets tensors of n values, used in turn: 8 x (4 MiB values + 1 MiB codes + 4 MiB back) is
  // beyond the caches, so each pass reads what it quantises from memory, as a step does (the
  // shards were last written by the optimizer, the gradients by the backward). One set,
  // reused hot, ran quantize_int8 1.5x faster than this (2026-12-04).
  constexpr int kSets = 8;
  std::vector<std::vector<float>> v(kSets, std::vector<float>(n));
  std::vector<std::vector<float>> back(kSets, std::vector<float>(n));
  for (std::vector<float>& x : v)
    for (uint64_t i = 0; i < n; ++i) x[i] = float(int64_t(i % 255) - 127) * 1e-3f;
  std::vector<std::vector<int8_t>> codes(kSets, std::vector<int8_t>(n));
  std::vector<std::vector<float>> scales(kSets, std::vector<float>(blocks));
  int at = 0;  // the set the next timed pass uses
  auto next = [&] { return at = (at + 1) % kSets; };
  auto quantize = [&](int k) {
    quantize_int8(*dev, v[k].data(), DType::kF32, n, blocks, codes[k].data(), scales[k].data());
  };
  auto dequantize = [&](int k) {
    dequantize_int8(*dev, codes[k].data(), scales[k].data(), n, blocks, 1, back[k].data(),
                    DType::kF32);
  };
  for (int k = 0; k < kSets; ++k) {  // warm-up: page everything in
    quantize(k);
    dequantize(k);
    if (std::fabs(back[k][200] - v[k][200]) > 1e-3f)
      throw std::runtime_error("quantizer calibration: wrong round trip");
  }
  // qgZ's: n elements as 4 partitions in groups of 1 Ki, packed; summed as 2 blocks of 2
  const uint64_t slots = 4, part = n / slots, groups = part / 1024;
  std::vector<std::vector<uint8_t>> packed(kSets, std::vector<uint8_t>(n / 2));
  std::vector<std::vector<float>> group_scales(kSets, std::vector<float>(slots * groups));
  auto quantize_int4 = [&](int k) {
    quantize_int4_parts(v[k].data(), slots, part, groups, packed[k].data(),
                        group_scales[k].data());
  };
  auto dequantize_int4 = [&](int k) {
    const HostVector<float> sum =
        dequantize_int4_sum(packed[k].data(), group_scales[k].data(), 2, 2, part, groups);
    back[k][0] = sum[0];
  };
  for (int k = 0; k < kSets; ++k) quantize_int4(k), dequantize_int4(k);
  // each timed pass on the next set
  auto median = [&](auto&& pass) {
    const std::vector<double> rates =
        block_rates(repeats, block_s, double(n), [&] { pass(next()); });
    return rates[rates.size() / 2];
  };
  QuantizerRates r;
  r.quantize = median(quantize);
  r.dequantize = median(dequantize);
  r.quantize_int4 = median(quantize_int4);
  r.dequantize_int4_sum = median(dequantize_int4);
  return r;
}

namespace {

// One GEMM shape of a step with operands of its own, called as the step calls it.
struct ShapeOperands {
  explicit ShapeOperands(const GemmCall& shape)
      : g(shape), a(size_t(g.m) * size_t(g.k), 0.5f), b(size_t(g.k) * size_t(g.n), 0.25f),
        c(size_t(g.m) * size_t(g.n)) {}
  double flops() const { return 2.0 * double(g.m) * double(g.n) * double(g.k); }
  void call(Device& dev) {
    dev.gemm(g.trans_a, g.trans_b, int(g.m), int(g.n), int(g.k), 1.0f, a.data(),
             int(g.trans_a ? g.m : g.k), b.data(), int(g.trans_b ? g.k : g.n), 0.0f, c.data(),
             int(g.n));
  }
  GemmCall g;
  std::vector<float> a, b, c;
};

}  // namespace

double measure_gemm_mix(const std::vector<std::pair<GemmCall, uint64_t>>& calls,
                        double per_shape_s) {
  openblas_set_num_threads(1);
  auto dev = make_cpu_device();
  double flops = 0, seconds = 0;
  for (const auto& [g, count] : calls) {
    ShapeOperands shape(g);
    auto gemm = [&] { shape.call(*dev); };
    gemm();  // warm-up: page in the operands and BLAS's buffers
    const double rate = block_rates(1, per_shape_s, shape.flops(), gemm).front();  // FLOP/s
    flops += shape.flops() * double(count);
    seconds += shape.flops() * double(count) / rate;
  }
  return seconds > 0 ? flops / seconds / 1e9 : 0;
}

double run_gemm_list(const std::vector<std::pair<GemmCall, uint64_t>>& calls, double seconds,
                     const std::function<void()>& before_timing) {
  openblas_set_num_threads(1);
  auto dev = make_cpu_device();
  struct Shape {
    ShapeOperands operands;
    double weight, credit = 0;  // the step's count of it; smooth weighted round-robin
  };
  std::vector<Shape> shapes;
  double total = 0;
  for (const auto& [g, count] : calls)
    if (count > 0) {
      shapes.push_back({ShapeOperands(g), double(count)});
      total += double(count);
    }
  for (Shape& o : shapes) o.operands.call(*dev);  // warm-up: page in the operands and buffers
  if (before_timing) before_timing();
  if (shapes.empty() || seconds <= 0) return 0;
  // Each call goes to the shape furthest behind its share of the step's calls, so any window,
  // however it ends, holds the step's proportions to within one call a shape.
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  double flops = 0, s = 0;
  while (s < seconds) {
    Shape* next = &shapes.front();
    for (Shape& o : shapes) {
      o.credit += o.weight;
      if (o.credit > next->credit) next = &o;
    }
    next->credit -= total;
    next->operands.call(*dev);
    flops += next->operands.flops();
    s = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return flops / s / 1e9;
}

PeakCalibration with_gemm_mix(PeakCalibration p,
                              const std::vector<std::pair<GemmCall, uint64_t>>& calls) {
  p.gemm_mix_gflops = measure_gemm_mix(calls);
  p.gemm_mix_shapes = int(calls.size());
  return p;
}

PeakCalibration calibrate_cpu(double peak_gflops, const std::string& who) {
  PeakCalibration p =
      peak_gflops > 0 ? fixed_peak(peak_gflops, "--peak-gflops") : measure_sgemm_peak(who);
  p.mem_bw_bytes_per_s = measure_triad_bw();
  const QuantizerRates q = measure_quantizer();
  p.quantize_elems_per_s = q.quantize;
  p.dequantize_elems_per_s = q.dequantize;
  p.quantize_int4_elems_per_s = q.quantize_int4;
  p.dequantize_int4_sum_elems_per_s = q.dequantize_int4_sum;
  return p;
}

namespace {

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

std::optional<PeakCalibration> cached_calibration(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(f);
    if (j.at("host").get<std::string>() != host_name()) return std::nullopt;
    return PeakCalibration::from_json(j.at("calibration"));
  } catch (const std::exception&) {  // a torn or foreign file: measure again
    return std::nullopt;
  }
}

void write_cache(const std::string& path, const PeakCalibration& p) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  std::ofstream(tmp) << nlohmann::json{{"host", host_name()}, {"calibration", p.to_json()}};
  std::rename(tmp.c_str(), path.c_str());  // atomic: a concurrent reader sees old or new
}

}  // namespace

PeakCalibration calibrate_cpu_once(double peak_gflops, const std::string& who) {
  const char* cache = std::getenv("SB_CALIBRATION_CACHE");
  if (cache == nullptr || *cache == '\0' || peak_gflops > 0)
    return calibrate_cpu(peak_gflops, who);
  if (std::optional<PeakCalibration> p = cached_calibration(cache)) {
    p->source += fmt::format("; reused from SB_CALIBRATION_CACHE={}", cache);
    return *p;
  }
  const PeakCalibration p = calibrate_cpu(peak_gflops, who);
  write_cache(cache, p);
  return p;
}

PeakCalibration fixed_peak(double gflops, const std::string& source) {
  return PeakCalibration{gflops, gflops, gflops, 0, source};
}

}  // namespace sb
