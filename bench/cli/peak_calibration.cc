// Calibration of the CPU's sgemm ceiling (see header). The spread is recorded, not hidden: a
// loaded machine shows up as a wide [min, max] in config.mfu_peak.
#include "bench/cli/peak_calibration.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "harness/device/cpu_device.h"

extern "C" void openblas_set_num_threads(int);  // OpenBLAS: threads of this process

namespace sb {

nlohmann::json PeakCalibration::to_json() const {
  return {{"per_device_flops", gflops * 1e9}, {"min_flops", min_gflops * 1e9},
          {"max_flops", max_gflops * 1e9},    {"repeats", repeats},
          {"source", source}};
}

PeakCalibration PeakCalibration::from_json(const nlohmann::json& j) {
  PeakCalibration p;
  p.gflops = j.at("per_device_flops").get<double>() / 1e9;
  p.min_gflops = j.at("min_flops").get<double>() / 1e9;
  p.max_gflops = j.at("max_flops").get<double>() / 1e9;
  p.repeats = j.at("repeats").get<int>();
  p.source = j.at("source").get<std::string>();
  return p;
}

std::string PeakCalibration::to_flag() const {
  return fmt::format("{:.4f},{:.4f},{:.4f},{},{}", gflops, min_gflops, max_gflops, repeats,
                     source);
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
  p.source = s.substr(pos);
  return p;
}

PeakCalibration measure_sgemm_peak(const std::string& who, int repeats, double block_s) {
  openblas_set_num_threads(1);  // before the first call: "single-core" must mean one thread
  auto dev = make_cpu_device();
  const int n = 768;
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  auto gemm = [&] {
    dev->gemm(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  for (int i = 0; i < 3; ++i) gemm();  // warm-up: page in the buffers, wake the core up
  std::vector<double> rates;
  using Clock = std::chrono::steady_clock;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    int calls = 0;
    double s = 0;
    do {
      gemm();
      ++calls;
      s = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (s < block_s);
    rates.push_back(2.0 * n * n * double(n) * calls / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  PeakCalibration p;
  p.gflops = rates[rates.size() / 2];
  p.min_gflops = rates.front();
  p.max_gflops = rates.back();
  p.repeats = repeats;
  p.source = fmt::format("single-core sgemm {}^3, 1 BLAS thread, median of {} blocks of >= {:g} "
                         "ms, measured by {}", n, repeats, block_s * 1e3, who);
  return p;
}

PeakCalibration fixed_peak(double gflops, const std::string& source) {
  return PeakCalibration{gflops, gflops, gflops, 0, source};
}

}  // namespace sb
