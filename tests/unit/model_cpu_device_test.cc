// The CPU device's non-layer kernels against plain double references: gemm in all four
// transpose combinations, AdamW as documented in device.h, bf16 conversions, small ops.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "harness/common/dtype.h"
#include "harness/device/device.h"
#include "tests/unit/model_test_util.h"

namespace sb::testing {
namespace {

TEST(CpuDevice, GemmMatchesNaiveForAllTransposes) {
  auto dev = make_cpu_device();
  const int m = 5, n = 7, k = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      std::vector<float> a(m * k), b(k * n), c(m * n);
      fill_uniform(a.data(), a.size(), -1, 1, 1);
      fill_uniform(b.data(), b.size(), -1, 1, 2);
      fill_uniform(c.data(), c.size(), -1, 1, 3);
      const std::vector<float> c0 = c;
      dev->gemm(ta, tb, m, n, k, 0.5f, a.data(), ta ? m : k, b.data(), tb ? k : n, 2.0f,
                c.data(), n);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double s = 0.0;
          for (int p = 0; p < k; ++p)
            s += double(ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
          EXPECT_NEAR(c[i * n + j], 0.5 * s + 2.0 * c0[i * n + j], 1e-5) << ta << tb;
        }
    }
  }
}

TEST(CpuDevice, AdamWIsBiasCorrectedWithDecoupledDecay) {
  auto dev = make_cpu_device();
  const size_t n = 19;
  std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
  fill_uniform(p.data(), n, -1, 1, 4);
  std::vector<double> pr(p.begin(), p.end()), mr(n, 0.0), vr(n, 0.0);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, scale = 0.5;
  for (int step = 1; step <= 3; ++step) {
    fill_uniform(g.data(), n, -1, 1, 10 + step);
    dev->adamw(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, step, scale);
    for (size_t i = 0; i < n; ++i) {
      const double gi = g[i] * scale;
      mr[i] = b1 * mr[i] + (1 - b1) * gi;
      vr[i] = b2 * vr[i] + (1 - b2) * gi * gi;
      const double mh = mr[i] / (1 - std::pow(b1, step)), vh = vr[i] / (1 - std::pow(b2, step));
      pr[i] -= lr * (mh / (std::sqrt(vh) + eps) + wd * pr[i]);
    }
  }
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(p[i], pr[i], 1e-6) << i;
}

TEST(CpuDevice, Bf16RoundTripAndSmallOps) {
  auto dev = make_cpu_device();
  const std::vector<float> x = {1.0f, -2.5f, 3.14159265f, 1e-20f, 65504.0f};
  std::vector<uint16_t> h(x.size());
  std::vector<float> back(x.size());
  dev->f32_to_bf16(h.data(), x.data(), x.size());
  dev->bf16_to_f32(back.data(), h.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(h[i], f32_to_bf16(x[i]));
    EXPECT_NEAR(back[i], x[i], std::abs(x[i]) * (1.0f / 256));  // 8 significant bits
  }
  std::vector<float> y = {1, 2, 3}, z = {4, 5, 6};
  dev->add_inplace(y.data(), z.data(), 3);
  dev->scale_inplace(y.data(), 0.5f, 3);
  EXPECT_EQ(y, (std::vector<float>{2.5f, 3.5f, 4.5f}));
  EXPECT_TRUE(dev->is_host());
}

}  // namespace
}  // namespace sb::testing
