// CudaDevice agrees with the CPU device kernel by kernel (forward and backward, random inputs,
// the tolerance stated at each check) and over one tiny-model training step; the allocator
// zero-fills and reports OOM as OutOfMemory. Every GPU test skips with "no CUDA device: <why>"
// where make_cuda_device returns null (also in a build without CUDA, where this file still
// compiles: CudaDevice-only entry points sit behind SB_HAVE_CUDA). fp32 GEMMs run with TF32
// off unless a test says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "harness/common/dtype.h"
#include "harness/device/cuda/cuda_peak.h"
#ifdef SB_HAVE_CUDA
#include "harness/device/cuda/cuda_device.h"
#endif
#include "harness/device/device.h"
#include "harness/model/config.h"
#include "harness/model/data.h"
#include "harness/model/gpt.h"
#include "harness/model/layout.h"
#include "harness/predict/model_shape.h"
#include "harness/device/cpu_device.h"
#include "tests/unit/model_test_util.h"

namespace sb::testing {
namespace {

// A device allocation holding a copy of a host vector; downloads on request.
template <class T>
class DeviceArray {
 public:
  DeviceArray(Device& d, const std::vector<T>& host)
      : d_(d), raw_(d.allocator()), n_(host.size()) {
    p_ = static_cast<T*>(raw_.allocate(n_ * sizeof(T)));
    if (n_ != 0) d_.copy_to_device(p_, host.data(), n_ * sizeof(T));
  }
  ~DeviceArray() {
    if (p_ != nullptr) raw_.release(p_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() { return p_; }
  std::vector<T> host() const {
    std::vector<T> h(n_);
    if (n_ != 0) d_.copy_to_host(h.data(), p_, n_ * sizeof(T));
    return h;
  }

 private:
  Device& d_;
  RawAllocator raw_;
  size_t n_;
  T* p_ = nullptr;
};

std::vector<float> uniform(size_t n, float lo, float hi, uint64_t seed) {
  std::vector<float> v(n);
  fill_uniform(v.data(), n, lo, hi, seed);
  return v;
}

std::vector<int> random_ids(size_t n, int bound, uint64_t seed) {
  std::vector<float> u = uniform(n, 0.f, float(bound), seed);
  std::vector<int> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = std::min(bound - 1, int(u[i]));
  return ids;
}

// Passes when |want - got| <= atol + rtol * |want| everywhere; reports the worst element.
void expect_close(const std::vector<float>& want, const std::vector<float>& got, float rtol,
                  float atol, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  size_t worst = 0;
  double worst_excess = -1e300, max_abs = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double err = std::fabs(double(want[i]) - double(got[i]));
    if (!std::isfinite(got[i]) && std::isfinite(want[i])) err = 1e300;
    double excess = err - (atol + rtol * std::fabs(double(want[i])));
    max_abs = std::max(max_abs, err);
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  EXPECT_LE(worst_excess, 0.0) << what << ": worst at " << worst << " cpu " << want[worst]
                               << " cuda " << got[worst] << " (rtol " << rtol << ", atol "
                               << atol << ", max abs err " << max_abs << ")";
}

// The CPU device with bf16 matmuls as the CUDA device computes them in kBf16 mode: every
// matmul operand rounded to bf16 (products of bf16 values are exact in fp32), then OpenBLAS's
// fp32 GEMM. So CUDA's bf16 path is checked at fp32 tolerances: only summation order differs,
// plus the rare operand whose bf16 rounding flips between devices because an fp32 input
// differed in its last bits (probability ~2^-16 per element).
std::vector<float> rounded(const float* p, size_t n) {
  std::vector<float> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = bf16_to_f32(f32_to_bf16(p[i]));
  return r;
}

// Puts a device back to fp32 matmuls (releasing its bf16 operand slots into their tracker):
// declared after that tracker, so it runs first.
struct Fp32MatmulsAtExit {
  Device& device;
  ~Fp32MatmulsAtExit() { device.set_matmul_precision(MatmulPrecision::kFp32, nullptr); }
};

class Bf16MatmulCpu : public CpuDevice {
 public:
  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override {
    const size_t ea = size_t((ta ? k : m) - 1) * lda + (ta ? m : k);  // stored extents
    const size_t eb = size_t((tb ? n : k) - 1) * ldb + (tb ? k : n);
    CpuDevice::gemm(ta, tb, m, n, k, alpha, rounded(a, ea).data(), lda, rounded(b, eb).data(),
                    ldb, beta, c, ldc);
  }
  void linear_forward(float* out, const float* x, const float* w, const float* b, int rows,
                      int in, int out_features) override {
    CpuDevice::linear_forward(out, rounded(x, size_t(rows) * in).data(),
                              rounded(w, size_t(out_features) * in).data(), b, rows, in,
                              out_features);
  }
  void linear_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                       const float* w, int rows, int in, int out_features) override {
    CpuDevice::linear_backward(dx, dw, nullptr, rounded(dout, size_t(rows) * out_features).data(),
                               rounded(x, size_t(rows) * in).data(),
                               rounded(w, size_t(out_features) * in).data(), rows, in,
                               out_features);
    if (db != nullptr)  // the bias gradient sums the fp32 dout: no matmul
      for (int r = 0; r < rows; ++r)
        for (int o = 0; o < out_features; ++o) db[o] += dout[size_t(r) * out_features + o];
  }
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C,
                         int NH) override {
    // Scores from rounded Q, K and the fp32 softmax: the CPU kernel on rounded qkv. Then
    // out = round(att) round(V) per head.
    const int hs = C / NH, C3 = 3 * C;
    const std::vector<float> q = rounded(qkv, size_t(B) * T * C3);
    CpuDevice::attention_forward(out, att, q.data(), B, T, C, NH);
    const std::vector<float> a = rounded(att, size_t(B) * NH * T * T);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        CpuDevice::gemm(false, false, T, hs, T, 1.f, a.data() + (size_t(b) * NH + h) * T * T, T,
                        q.data() + size_t(b) * T * C3 + 2 * C + size_t(h) * hs, C3, 0.f,
                        out + size_t(b) * T * C + size_t(h) * hs, C);
  }
  void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH) override {
    const int hs = C / NH, C3 = 3 * C;
    const float scale = 1.f / std::sqrt(float(hs));
    const std::vector<float> q = rounded(qkv, size_t(B) * T * C3);
    const std::vector<float> g = rounded(dout, size_t(B) * T * C);
    const std::vector<float> a = rounded(att, size_t(B) * NH * T * T);
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        const size_t off = size_t(b) * T * C3 + size_t(h) * hs, hh = (size_t(b) * NH + h) * T * T;
        const float* gh = g.data() + size_t(b) * T * C + size_t(h) * hs;
        float* d = datt + hh;
        CpuDevice::gemm(false, true, T, T, hs, 1.f, gh, C, q.data() + off + 2 * C, C3, 0.f, d, T);
        CpuDevice::gemm(true, false, T, hs, T, 1.f, a.data() + hh, T, gh, C, 0.f,
                        dqkv + off + 2 * C, C3);
        for (int t = 0; t < T; ++t) {  // softmax backward on the fp32 probabilities
          const float* ar = att + hh + size_t(t) * T;
          float* dr = d + size_t(t) * T;
          float dot = 0.f;
          for (int j = 0; j <= t; ++j) dot += ar[j] * dr[j];
          for (int j = 0; j < T; ++j) dr[j] = j <= t ? ar[j] * (dr[j] - dot) : 0.f;
        }
        const std::vector<float> dp = rounded(d, size_t(T) * T);
        CpuDevice::gemm(false, false, T, hs, T, scale, dp.data(), T, q.data() + off + C, C3, 0.f,
                        dqkv + off, C3);
        CpuDevice::gemm(true, false, T, hs, T, scale, dp.data(), T, q.data() + off, C3, 0.f,
                        dqkv + off + C, C3);
      }
    }
  }
};

TEST(Bf16MatmulReference, AgreesWithTheFp32CpuWithinBf16Rounding) {  // needs no GPU
  // The reference re-derives attention's matmuls; a wrong stride or transpose there would be a
  // gross error, not a rounding: compare it with the fp32 CPU kernels at bf16 tolerance.
  auto cpu = make_cpu_device();
  Bf16MatmulCpu ref;
  const int B = 2, T = 33, C = 48, NH = 4;
  auto qkv = uniform(size_t(B) * T * 3 * C, -1, 1, 80), g = uniform(size_t(B) * T * C, -1, 1, 81);
  std::vector<float> out(size_t(B) * T * C), att(size_t(B) * NH * T * T);
  std::vector<float> rout = out, ratt = att, dqkv(qkv.size()), rdqkv(qkv.size()), d(att.size());
  cpu->attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  ref.attention_forward(rout.data(), ratt.data(), qkv.data(), B, T, C, NH);
  // Operands off by up to 2^-9 relative each: outputs of O(1) within ~1e-2.
  expect_close(out, rout, 2e-2f, 1e-2f, "bf16 reference attention out");
  expect_close(att, ratt, 2e-2f, 1e-3f, "bf16 reference attention probs");
  cpu->attention_backward(dqkv.data(), d.data(), g.data(), qkv.data(), att.data(), B, T, C, NH);
  ref.attention_backward(rdqkv.data(), d.data(), g.data(), qkv.data(), ratt.data(), B, T, C, NH);
  expect_close(dqkv, rdqkv, 2e-2f, 2e-2f, "bf16 reference attention dqkv");
  const int rows = 20, in = 24, outf = 16;
  auto x = uniform(size_t(rows) * in, -1, 1, 82), w = uniform(size_t(outf) * in, -1, 1, 83);
  auto dy = uniform(size_t(rows) * outf, -1, 1, 84), bias = uniform(outf, -1, 1, 85);
  std::vector<float> y(size_t(rows) * outf), ry = y, dx(x.size()), rdx = dx, dw(w.size()),
      rdw = dw, db(outf), rdb = db;
  cpu->linear_forward(y.data(), x.data(), w.data(), bias.data(), rows, in, outf);
  ref.linear_forward(ry.data(), x.data(), w.data(), bias.data(), rows, in, outf);
  expect_close(y, ry, 2e-2f, 2e-2f, "bf16 reference linear out");
  cpu->linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), rows, in,
                       outf);
  ref.linear_backward(rdx.data(), rdw.data(), rdb.data(), dy.data(), x.data(), w.data(), rows, in,
                      outf);
  expect_close(dx, rdx, 2e-2f, 2e-2f, "bf16 reference linear dx");
  expect_close(dw, rdw, 2e-2f, 4e-2f, "bf16 reference linear dW");
  expect_close(db, rdb, 1e-6f, 1e-6f, "bf16 reference linear db (fp32 sums)");
}

class CudaNumerics : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    gpu_ = make_cuda_device(0, &why_);
    cpu_ = make_cpu_device();
  }
  static void TearDownTestSuite() {
    gpu_.reset();
    cpu_.reset();
  }
  void SetUp() override {
    if (gpu_ == nullptr) GTEST_SKIP() << "no CUDA device: " << why_;
#ifdef SB_HAVE_CUDA
    cuda().set_allow_tf32(false);  // fp32 comparisons are against fp32 OpenBLAS
#endif
  }
#ifdef SB_HAVE_CUDA
  static CudaDevice& cuda() { return dynamic_cast<CudaDevice&>(*gpu_); }
#endif

  static std::unique_ptr<Device> gpu_, cpu_;
  static std::string why_;
};
std::unique_ptr<Device> CudaNumerics::gpu_, CudaNumerics::cpu_;
std::string CudaNumerics::why_;

TEST(CudaPeak, TableCoversTheGpusReportedOn) {  // needs no GPU
  EXPECT_DOUBLE_EQ(cuda_peak_flops("NVIDIA H200", true), 989.5e12);
  EXPECT_DOUBLE_EQ(cuda_peak_flops("NVIDIA H200 NVL", true), 835.5e12);
  EXPECT_DOUBLE_EQ(cuda_peak_flops("NVIDIA H100 80GB HBM3", false), 67e12);
  EXPECT_DOUBLE_EQ(cuda_peak_flops("NVIDIA H100 PCIe", true), 756.5e12);
  EXPECT_DOUBLE_EQ(cuda_peak_flops("NVIDIA A100-SXM4-80GB", true), 312e12);
  EXPECT_DOUBLE_EQ(cuda_peak_flops("NVIDIA A100-SXM4-80GB", false, true), 156e12);
  EXPECT_EQ(cuda_peak_flops("NVIDIA GeForce RTX 4090", true), 0.0);
}

TEST_F(CudaNumerics, AllocatorZeroFillsAndReportsOutOfMemory) {
  RawAllocator raw = gpu_->allocator();
  const size_t n = 1 << 20;
  void* p = raw.allocate(n * sizeof(float));
  std::vector<float> h(n, 1.f);
  gpu_->copy_to_host(h.data(), p, n * sizeof(float));
  EXPECT_TRUE(std::all_of(h.begin(), h.end(), [](float x) { return x == 0.f; }));
  raw.release(p);
  EXPECT_THROW(raw.allocate(size_t(1) << 52), OutOfMemory);  // 4 PiB
  // The failed cudaMalloc must not poison the context: the device still computes.
  DeviceArray<float> y(*gpu_, std::vector<float>(10, 2.f));
  gpu_->scale_inplace(y.get(), 1.5f, 10);
  EXPECT_EQ(y.host()[9], 3.f);
}

void check_gemm(Device& cpu, Device& gpu) {
  const int m = 37, n = 53, k = 71;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      auto a = uniform(size_t(m) * k, -1, 1, 1), b = uniform(size_t(k) * n, -1, 1, 2);
      auto c = uniform(size_t(m) * n, -1, 1, 3);
      const int lda = ta ? m : k, ldb = tb ? k : n;
      DeviceArray<float> da(gpu, a), db(gpu, b), dc(gpu, c);
      cpu.gemm(ta, tb, m, n, k, 1.3f, a.data(), lda, b.data(), ldb, 0.5f, c.data(), n);
      gpu.gemm(ta, tb, m, n, k, 1.3f, da.get(), lda, db.get(), ldb, 0.5f, dc.get(), n);
      // fp32 sums of 71 products of O(1): order-of-summation error ~1e-6.
      expect_close(c, dc.host(), 1e-5f, 1e-5f,
                   "gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
    }
  }
}

TEST_F(CudaNumerics, GemmAllTransposes) { check_gemm(*cpu_, *gpu_); }

#ifdef SB_HAVE_CUDA
TEST_F(CudaNumerics, GemmTf32AndBf16EntryPoints) {
  const int m = 64, n = 48, k = 256;
  auto a = uniform(size_t(m) * k, -1, 1, 4), b = uniform(size_t(k) * n, -1, 1, 5);
  // Reference: fp32 GEMM of the bf16-rounded inputs (what the tensor cores multiply exactly).
  std::vector<uint16_t> a16(a.size()), b16(b.size());
  std::vector<float> ar(a.size()), br(b.size());
  for (size_t i = 0; i < a.size(); ++i) ar[i] = bf16_to_f32(a16[i] = f32_to_bf16(a[i]));
  for (size_t i = 0; i < b.size(); ++i) br[i] = bf16_to_f32(b16[i] = f32_to_bf16(b[i]));
  std::vector<float> want(size_t(m) * n), want_exact(size_t(m) * n);
  cpu_->gemm(false, false, m, n, k, 1.f, ar.data(), k, br.data(), n, 0.f, want.data(), n);
  cpu_->gemm(false, false, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, want_exact.data(), n);

  DeviceArray<uint16_t> da16(*gpu_, a16), db16(*gpu_, b16);
  DeviceArray<float> dc(*gpu_, std::vector<float>(size_t(m) * n));
  cuda().gemm_bf16(false, false, m, n, k, 1.f, da16.get(), k, db16.get(), n, 0.f, dc.get(),
                   DType::kF32, n);
  // Same products, fp32 accumulation: only summation order differs (k = 256, |c| ~ 10).
  expect_close(want, dc.host(), 1e-4f, 1e-4f, "gemm_bf16 fp32 out");

  DeviceArray<uint16_t> dc16(*gpu_, std::vector<uint16_t>(size_t(m) * n));
  cuda().gemm_bf16(false, false, m, n, k, 1.f, da16.get(), k, db16.get(), n, 0.f, dc16.get(),
                   DType::kBF16, n);
  std::vector<float> got16(size_t(m) * n);
  auto h16 = dc16.host();
  for (size_t i = 0; i < h16.size(); ++i) got16[i] = bf16_to_f32(h16[i]);
  expect_close(want, got16, 1.0f / 128, 1e-3f, "gemm_bf16 bf16 out (one bf16 rounding)");

  // TF32 keeps 10 mantissa bits per input: relative error ~1e-3 of sum |a||b| ~ k/4.
  cuda().set_allow_tf32(true);
  DeviceArray<float> da(*gpu_, a), db(*gpu_, b), dt(*gpu_, std::vector<float>(size_t(m) * n));
  gpu_->gemm(false, false, m, n, k, 1.f, da.get(), k, db.get(), n, 0.f, dt.get(), n);
  expect_close(want_exact, dt.host(), 0.f, 0.05f, "gemm tf32");
  cuda().set_allow_tf32(false);
}
#endif  // SB_HAVE_CUDA

void check_linear(Device& cpu, Device& gpu) {
  const int rows = 67, in = 96, out = 80;
  auto x = uniform(size_t(rows) * in, -1, 1, 10), w = uniform(size_t(out) * in, -.2f, .2f, 11);
  auto b = uniform(out, -1, 1, 12), dout = uniform(size_t(rows) * out, -1, 1, 13);
  DeviceArray<float> dx_(gpu, x), dw_(gpu, w), db_(gpu, b), ddout(gpu, dout);
  for (bool bias : {true, false}) {
    std::vector<float> y(size_t(rows) * out);
    DeviceArray<float> dy(gpu, y);
    cpu.linear_forward(y.data(), x.data(), w.data(), bias ? b.data() : nullptr, rows, in, out);
    gpu.linear_forward(dy.get(), dx_.get(), dw_.get(), bias ? db_.get() : nullptr, rows, in,
                         out);
    expect_close(y, dy.host(), 1e-5f, 1e-5f, bias ? "linear fwd" : "linear fwd no bias");
  }
  // Backward: dx is '=' (seeded with garbage), dW and db are '+=' (seeded with values).
  auto gx = uniform(size_t(rows) * in, 50, 60, 14), gw = uniform(size_t(out) * in, -1, 1, 15);
  auto gb = uniform(out, -1, 1, 16);
  DeviceArray<float> dgx(gpu, gx), dgw(gpu, gw), dgb(gpu, gb);
  cpu.linear_backward(gx.data(), gw.data(), gb.data(), dout.data(), x.data(), w.data(), rows,
                        in, out);
  gpu.linear_backward(dgx.get(), dgw.get(), dgb.get(), ddout.get(), dx_.get(), dw_.get(), rows,
                        in, out);
  expect_close(gx, dgx.host(), 1e-5f, 1e-5f, "linear dx (=)");
  expect_close(gw, dgw.host(), 1e-5f, 1e-4f, "linear dW (+=, sum over 67 rows)");
  expect_close(gb, dgb.host(), 1e-5f, 1e-4f, "linear db (+=)");
  // dx and db may be null.
  cpu.linear_backward(nullptr, gw.data(), nullptr, dout.data(), x.data(), w.data(), rows, in,
                        out);
  gpu.linear_backward(nullptr, dgw.get(), nullptr, ddout.get(), dx_.get(), dw_.get(), rows, in,
                        out);
  expect_close(gw, dgw.host(), 1e-5f, 2e-4f, "linear dW, dx/db null");
}

TEST_F(CudaNumerics, LinearForwardAndBackward) { check_linear(*cpu_, *gpu_); }

TEST_F(CudaNumerics, LinearBiasGradOverManyRowsAndWideColumns) {
  // Exercises the chunked column sum: rows span many chunks, columns are not a multiple of 32.
  const int rows = 4099, in = 8, out = 1000;
  auto x = uniform(size_t(rows) * in, -1, 1, 17), w = uniform(size_t(out) * in, -1, 1, 18);
  auto dout = uniform(size_t(rows) * out, -1, 1, 19);
  std::vector<float> gw(size_t(out) * in), gb(out, 0.5f);
  DeviceArray<float> dx(*gpu_, x), dw(*gpu_, w), ddout(*gpu_, dout), dgw(*gpu_, gw),
      dgb(*gpu_, gb);
  cpu_->linear_backward(nullptr, gw.data(), gb.data(), dout.data(), x.data(), w.data(), rows,
                        in, out);
  gpu_->linear_backward(nullptr, dgw.get(), dgb.get(), ddout.get(), dx.get(), dw.get(), rows, in,
                        out);
  // Sums of 4099 values of O(1): |sum| ~ 64, summation-order error ~ 1e-4.
  expect_close(gb, dgb.host(), 1e-5f, 1e-3f, "bias grad, 4099 rows");
  expect_close(gw, dgw.host(), 1e-5f, 1e-3f, "dW, 4099 rows");
}

TEST_F(CudaNumerics, LayerNormForwardAndBackward) {
  const int rows = 50, C = 200;  // C not a multiple of the warp
  auto x = uniform(size_t(rows) * C, 2, 4, 20);  // mean ~3: tests the centred variance
  auto w = uniform(C, 0.5f, 1.5f, 21), b = uniform(C, -1, 1, 22);
  std::vector<float> y(size_t(rows) * C), mean(rows), rstd(rows);
  DeviceArray<float> dx(*gpu_, x), dw(*gpu_, w), db(*gpu_, b), dy(*gpu_, y), dmean(*gpu_, mean),
      drstd(*gpu_, rstd);
  cpu_->layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows,
                          C);
  gpu_->layernorm_forward(dy.get(), dmean.get(), drstd.get(), dx.get(), dw.get(), db.get(), rows,
                          C);
  expect_close(y, dy.host(), 1e-4f, 1e-5f, "layernorm out");
  expect_close(mean, dmean.host(), 1e-6f, 1e-6f, "layernorm mean");
  expect_close(rstd, drstd.host(), 1e-5f, 1e-6f, "layernorm rstd");

  auto dout = uniform(size_t(rows) * C, -1, 1, 23);
  auto gx = uniform(size_t(rows) * C, -1, 1, 24), gw = uniform(C, -1, 1, 25);
  auto gb = uniform(C, -1, 1, 26);
  DeviceArray<float> ddout(*gpu_, dout), dgx(*gpu_, gx), dgw(*gpu_, gw), dgb(*gpu_, gb);
  cpu_->layernorm_backward(gx.data(), gw.data(), gb.data(), dout.data(), x.data(), w.data(),
                           mean.data(), rstd.data(), rows, C);
  gpu_->layernorm_backward(dgx.get(), dgw.get(), dgb.get(), ddout.get(), dx.get(), dw.get(),
                           dmean.get(), drstd.get(), rows, C);
  // rstd ~ 1.7 amplifies; every output is += onto O(1) seeds.
  expect_close(gx, dgx.host(), 1e-4f, 1e-4f, "layernorm dx (+=)");
  expect_close(gw, dgw.host(), 1e-4f, 1e-4f, "layernorm dw (+=)");
  expect_close(gb, dgb.host(), 1e-5f, 1e-5f, "layernorm db (+=)");
}

TEST_F(CudaNumerics, GeluForwardAndBackward) {
  const size_t n = 10007;
  auto x = uniform(n, -6, 6, 30), dout = uniform(n, -1, 1, 31);
  std::vector<float> y(n), gx(n, 99.f);
  DeviceArray<float> dx(*gpu_, x), ddout(*gpu_, dout), dy(*gpu_, y), dgx(*gpu_, gx);
  cpu_->gelu_forward(y.data(), x.data(), n);
  gpu_->gelu_forward(dy.get(), dx.get(), n);
  // The CPU uses a polynomial exp (~1 ulp) for tanh; CUDA tanhf ~2 ulp.
  expect_close(y, dy.host(), 1e-5f, 1e-6f, "gelu fwd");
  cpu_->gelu_backward(gx.data(), x.data(), dout.data(), n);
  gpu_->gelu_backward(dgx.get(), dx.get(), ddout.get(), n);
  expect_close(gx, dgx.host(), 1e-5f, 1e-5f, "gelu dx (=)");
}

// With a bf16 reference (`cpu` a Bf16MatmulCpu, the GPU in kBf16), the probabilities the GPU
// computed are what both sides round for att·V and dV: the devices' probabilities differ in
// their last bits, and rounding those separately could flip one to the next bf16 value (2^-8
// relative), which is no error of either. The backward's dS is still rounded on each side
// from fp32 values that differ slightly: a rare flip there moves dQ/dK by ~2^-8 x |dS| x |K| /
// sqrt(hs), ~2e-5 here, inside the doubled tolerance.
void check_attention(Device& cpu, Device& gpu, int B, int T, int C, int NH,
                     bool bf16_reference = false) {
  const std::string shape = " B" + std::to_string(B) + " T" + std::to_string(T) + " C" +
                            std::to_string(C) + " NH" + std::to_string(NH);
  const float slack = bf16_reference ? 2.f : 1.f;
  const int hs = C / NH, C3 = 3 * C;
  auto qkv = uniform(size_t(B) * T * 3 * C, -1, 1, 40);
  std::vector<float> out(size_t(B) * T * C), att(size_t(B) * NH * T * T, 7.f);
  DeviceArray<float> dqkv_in(gpu, qkv), dout_(gpu, out), datt(gpu, att);
  cpu.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  gpu.attention_forward(dout_.get(), datt.get(), dqkv_in.get(), B, T, C, NH);
  const std::vector<float> gatt = datt.host();
  expect_close(att, gatt, 1e-4f, 1e-6f, "attention probs (masked = 0)" + shape);
  if (bf16_reference) {
    att = gatt;  // both sides now round the same probabilities
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < NH; ++h)
        cpu.gemm(false, false, T, hs, T, 1.f, att.data() + (size_t(b) * NH + h) * T * T, T,
                 qkv.data() + size_t(b) * T * C3 + 2 * C + size_t(h) * hs, C3, 0.f,
                 out.data() + size_t(b) * T * C + size_t(h) * hs, C);
  }
  expect_close(out, dout_.host(), 1e-4f, 1e-5f, "attention out" + shape);

  auto g = uniform(size_t(B) * T * C, -1, 1, 41);
  std::vector<float> dqkv(qkv.size(), 55.f), scratch(att.size());
  DeviceArray<float> dg(gpu, g), ddqkv(gpu, dqkv), dscratch(gpu, scratch);
  cpu.attention_backward(dqkv.data(), scratch.data(), g.data(), qkv.data(), att.data(), B, T, C,
                         NH);
  gpu.attention_backward(ddqkv.get(), dscratch.get(), dg.get(), dqkv_in.get(), datt.get(), B, T,
                         C, NH);
  expect_close(dqkv, ddqkv.host(), 1e-4f, 1e-4f * slack, "attention dqkv (=)" + shape);
}

TEST_F(CudaNumerics, CausalAttentionForwardAndBackward) {
  check_attention(*cpu_, *gpu_, 2, 33, 48, 4);   // T, hs = 12 not multiples of 32
  check_attention(*cpu_, *gpu_, 3, 128, 64, 2);  // rows longer than a warp
}

#ifdef SB_HAVE_CUDA
// kBf16 mode: each matmul of the device against the CPU on bf16-rounded operands. gemm and
// linear see identical inputs on both devices, so fp32 tolerances hold; attention as
// check_attention explains.
TEST_F(CudaNumerics, Bf16MatmulsMatchTheRoundedOperandReference) {
  MemoryTracker workspace(gpu_->allocator());
  const Fp32MatmulsAtExit restore{*gpu_};
  ASSERT_TRUE(gpu_->set_matmul_precision(MatmulPrecision::kBf16, &workspace));
  Bf16MatmulCpu ref;
  check_gemm(ref, *gpu_);
  check_linear(ref, *gpu_);
  check_attention(ref, *gpu_, 2, 33, 48, 4, true);
  check_attention(ref, *gpu_, 3, 128, 64, 2, true);
  // The operand slots are what the tracker counts as workspace, and go when fp32 is back.
  const uint64_t slots = 2 * (cuda().operand_slot_elements(0) + cuda().operand_slot_elements(1));
  EXPECT_GT(slots, 0u);
  EXPECT_EQ(workspace.current(MemCategory::kWorkspace), slots);
  gpu_->set_matmul_precision(MatmulPrecision::kFp32, nullptr);
  EXPECT_EQ(workspace.current(MemCategory::kWorkspace), 0u);
  EXPECT_EQ(cuda().operand_slot_elements(0) + cuda().operand_slot_elements(1), 0u);
}

TEST_F(CudaNumerics, Bf16MatmulsAreFasterThanFp32OnABigGemm) {
  // Not a timing assertion on speed targets: a check that kBf16 reaches the tensor cores at all
  // (a silent fp32 fallback would be >4x slower on Hopper/Ampere). Reports both rates.
  const int n = 4096;
  DeviceArray<float> a(*gpu_, uniform(size_t(n) * n, -1, 1, 90)),
      b(*gpu_, uniform(size_t(n) * n, -1, 1, 91)), c(*gpu_, std::vector<float>(size_t(n) * n));
  MemoryTracker workspace(gpu_->allocator());
  const Fp32MatmulsAtExit restore{*gpu_};
  auto rate = [&](MatmulPrecision p) {
    gpu_->set_matmul_precision(p, &workspace);
    gpu_->gemm(false, false, n, n, n, 1.f, a.get(), n, b.get(), n, 0.f, c.get(), n);  // warm
    gpu_->synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    const int reps = 10;
    for (int i = 0; i < reps; ++i)
      gpu_->gemm(false, false, n, n, n, 1.f, a.get(), n, b.get(), n, 0.f, c.get(), n);
    gpu_->synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gpu_->set_matmul_precision(MatmulPrecision::kFp32, nullptr);
    return 2.0 * n * double(n) * n * reps / s;
  };
  const double fp32 = rate(MatmulPrecision::kFp32), bf16 = rate(MatmulPrecision::kBf16);
  std::printf("gemm %d^3: fp32 %.1f TFLOP/s, bf16 operands (incl. casts) %.1f TFLOP/s\n", n,
              fp32 * 1e-12, bf16 * 1e-12);
  EXPECT_GT(bf16, 2.0 * fp32) << "bf16 matmuls do not seem to use the tensor cores";
}

TEST_F(CudaNumerics, CachingAllocatorReusesFreedBlocksAndReportsMemory) {
  MemoryTracker memory(gpu_->allocator());
  gpu_->trim_memory();
  const CacheStats before = cuda().cache().stats();
  for (int i = 0; i < 5; ++i) {  // FSDP's pattern: gather a unit, use it, free it
    TrackedBuffer<float> unit(memory, MemCategory::kGatheredParams, 7u << 20);
    gpu_->scale_inplace(unit.data(), 2.f, unit.size());
  }
  const CacheStats after = cuda().cache().stats();
  EXPECT_EQ(after.misses - before.misses, 1u) << "one cudaMalloc, then reuse";
  EXPECT_EQ(after.hits - before.hits, 4u);
  const Device::MemoryInfo info = gpu_->memory_info();
  EXPECT_TRUE(info.available);
  EXPECT_GE(info.peak_reserved_bytes, uint64_t(7u << 20) * 4);
  EXPECT_GT(info.driver_used_bytes, info.reserved_bytes) << "the context and cuBLAS count too";
  EXPECT_GT(info.driver_total_bytes, info.driver_used_bytes);
  gpu_->trim_memory();
  EXPECT_EQ(cuda().cache().stats().cached_bytes, 0u);
}
#endif  // SB_HAVE_CUDA

TEST_F(CudaNumerics, EmbeddingForwardAndBackward) {
  const int V = 50, B = 3, T = 17, C = 40;
  auto wte = uniform(size_t(V) * C, -1, 1, 50), wpe = uniform(size_t(T) * C, -1, 1, 51);
  auto tokens = random_ids(size_t(B) * T, V, 52);
  tokens[1] = tokens[0] = 7;  // repeated tokens collide in dwte
  std::vector<float> out(size_t(B) * T * C);
  DeviceArray<float> dwte(*gpu_, wte), dwpe(*gpu_, wpe), dout_(*gpu_, out);
  DeviceArray<int> dtok(*gpu_, tokens);
  cpu_->embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  gpu_->embedding_forward(dout_.get(), dtok.get(), dwte.get(), dwpe.get(), B, T, C);
  expect_close(out, dout_.host(), 0.f, 0.f, "embedding fwd (exact: one add)");

  auto g = uniform(size_t(B) * T * C, -1, 1, 53);
  auto gwte = uniform(size_t(V) * C, -1, 1, 54), gwpe = uniform(size_t(T) * C, -1, 1, 55);
  DeviceArray<float> dg(*gpu_, g), dgwte(*gpu_, gwte), dgwpe(*gpu_, gwpe);
  cpu_->embedding_backward(gwte.data(), gwpe.data(), g.data(), tokens.data(), B, T, C);
  gpu_->embedding_backward(dgwte.get(), dgwpe.get(), dg.get(), dtok.get(), B, T, C);
  expect_close(gwte, dgwte.host(), 1e-6f, 1e-6f, "embedding dwte (+=, atomics)");
  expect_close(gwpe, dgwpe.host(), 1e-6f, 1e-6f, "embedding dwpe (+=)");
}

void check_crossentropy(Device& cpu, Device& gpu, int rows, int V) {
  const std::string shape = " rows" + std::to_string(rows) + " V" + std::to_string(V);
  auto logits = uniform(size_t(rows) * V, -8, 8, 60);
  auto targets = random_ids(rows, V, 61);
  std::vector<float> probs(logits.size());
  DeviceArray<float> dlogits(gpu, logits), dprobs(gpu, probs);
  DeviceArray<int> dtargets(gpu, targets);
  const float loss = cpu.softmax_crossentropy_forward(probs.data(), logits.data(),
                                                      targets.data(), rows, V);
  const float gloss = gpu.softmax_crossentropy_forward(dprobs.get(), dlogits.get(),
                                                       dtargets.get(), rows, V);
  EXPECT_NEAR(loss, gloss, 1e-5 * std::fabs(loss)) << "mean loss" << shape;
  expect_close(probs, dprobs.host(), 1e-5f, 1e-9f, "softmax probs" + shape);
  std::vector<float> d(logits.size(), 3.f);
  DeviceArray<float> dd(gpu, d);
  cpu.crossentropy_backward(d.data(), probs.data(), targets.data(), rows, V, 1.f / rows);
  gpu.crossentropy_backward(dd.get(), dprobs.get(), dtargets.get(), rows, V, 1.f / rows);
  expect_close(d, dd.host(), 1e-5f, 1e-9f, "crossentropy dlogits (=)" + shape);
}

TEST_F(CudaNumerics, SoftmaxCrossEntropyForwardAndBackward) {
  check_crossentropy(*cpu_, *gpu_, 45, 1000);
  check_crossentropy(*cpu_, *gpu_, 4, 50304);  // GPT-2's padded vocabulary
}

TEST_F(CudaNumerics, AddScaleAdamWAndCasts) {
  const size_t n = 5003;
  auto y = uniform(n, -1, 1, 70), x = uniform(n, -1, 1, 71);
  DeviceArray<float> dy(*gpu_, y), dx(*gpu_, x);
  cpu_->add_inplace(y.data(), x.data(), n);
  gpu_->add_inplace(dy.get(), dx.get(), n);
  cpu_->scale_inplace(y.data(), 0.37f, n);
  gpu_->scale_inplace(dy.get(), 0.37f, n);
  expect_close(y, dy.host(), 0.f, 0.f, "add + scale (exact)");

  auto p = uniform(n, -1, 1, 72), g = uniform(n, -1, 1, 73);
  auto m = uniform(n, -.1f, .1f, 74), v = uniform(n, 0, .01f, 75);
  DeviceArray<float> dp(*gpu_, p), dg(*gpu_, g), dm(*gpu_, m), dv(*gpu_, v);
  for (int step = 1; step <= 3; ++step) {
    cpu_->adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step,
                0.5f);
    gpu_->adamw(dp.get(), dg.get(), dm.get(), dv.get(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step,
                0.5f);
  }
  expect_close(p, dp.host(), 1e-6f, 1e-7f, "adamw p");
  expect_close(m, dm.host(), 1e-6f, 1e-9f, "adamw m");
  expect_close(v, dv.host(), 1e-6f, 1e-12f, "adamw v");

  // Casts are exact: round-to-nearest-even both ways, ties and extremes included.
  std::vector<float> f = uniform(n, -1e3f, 1e3f, 76);
  f[0] = 1.0f + 1.0f / 256;  // a tie: rounds to even (1.0)
  f[1] = 1.0f + 3.0f / 256;  // a tie: rounds to even (1 + 1/64)
  f[2] = std::numeric_limits<float>::max();
  f[3] = -std::numeric_limits<float>::infinity();
  f[4] = 1e-40f;             // subnormal
  std::vector<uint16_t> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = f32_to_bf16(f[i]);
  DeviceArray<float> df(*gpu_, f);
  DeviceArray<uint16_t> dh(*gpu_, std::vector<uint16_t>(n));
  gpu_->f32_to_bf16(dh.get(), df.get(), n);
  auto got = dh.host();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(want[i], got[i]) << "f32->bf16 of " << f[i];
  DeviceArray<float> back(*gpu_, std::vector<float>(n));
  gpu_->bf16_to_f32(back.get(), dh.get(), n);
  auto gb = back.host();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(bf16_to_f32(want[i]), gb[i]) << i;
}

// The model's parameters resident on the GPU, initialised exactly as FullParams does on host.
class DeviceParams : public ModelHooks {
 public:
  DeviceParams(const ModelLayout& layout, MemoryTracker& memory, Device& dev, uint64_t seed) {
    for (int t = 0; t < int(layout.tensors.size()); ++t) {
      const uint64_t n = layout.tensors[t].numel;
      std::vector<float> h(n);
      init_tensor_range(layout, t, 0, n, seed, h.data());
      params.emplace_back(memory, MemCategory::kParams, n);
      grads.emplace_back(memory, MemCategory::kGrads, n);  // zero-filled by the allocator
      dev.copy_to_device(params.back().data(), h.data(), n * sizeof(float));
    }
  }
  const float* param(int t) override { return params[t].data(); }
  float* grad(int t) override { return grads[t].data(); }
  std::vector<TrackedBuffer<float>> params, grads;
};

std::vector<float> download(Device& d, const TrackedBuffer<float>& b) {
  std::vector<float> h(b.size());
  d.copy_to_host(h.data(), b.data(), b.bytes());
  return h;
}

// One tiny-model step on both devices (forward, backward, AdamW, the next forward). With
// bf16_matmuls the GPU runs kBf16 and `cpu` must be the rounded-operand reference; rounding
// flips (see Bf16MatmulCpu) then loosen the loss to 1e-4 and the grads to 2e-3 of the largest.
void check_tiny_step(Device& cpu, Device& gpu, bool bf16_matmuls, const char* preset = "tiny") {
  const GptConfig c = parse_model(preset);
  const int B = 4, T = c.seq_len;
  MemoryTracker cmem(cpu.allocator()), gmem(gpu.allocator());
  const float slack = bf16_matmuls ? 2.f : 1.f;
  const Fp32MatmulsAtExit restore{gpu};  // before gmem goes, also when an ASSERT returns
  if (bf16_matmuls) {
    ASSERT_TRUE(gpu.set_matmul_precision(MatmulPrecision::kBf16, &gmem));
  }
  GptModel cmodel(c, B, cpu, cmem), gmodel(c, B, gpu, gmem);
  const ModelLayout& layout = cmodel.layout();
  FullParams cp(layout, cmem, 42);
  DeviceParams gp(gmodel.layout(), gmem, gpu, 42);
  std::vector<int> tok(B * T), tgt(B * T);
  make_batch(7, 0, B, T, c.vocab, tok.data(), tgt.data());

  const float closs = cmodel.forward(tok.data(), tgt.data(), cp);
  const float gloss = gmodel.forward(tok.data(), tgt.data(), gp);
  EXPECT_NEAR(closs, gloss, (bf16_matmuls ? 1e-4 : 1e-5) * closs) << "forward loss";
  cmodel.backward(cp);
  gmodel.backward(gp);
  for (size_t t = 0; t < cp.grads.size(); ++t) {
    const std::vector<float> want(cp.grads[t].data(), cp.grads[t].data() + cp.grads[t].size());
    float scale = 0.f;
    for (float w : want) scale = std::max(scale, std::fabs(w));
    // Every grad within 1e-3 of the tensor's largest grad (a whole step of fp32 kernels whose
    // summation orders differ), plus 1e-4 relative.
    expect_close(want, download(gpu, gp.grads[t]), 1e-4f, 1e-3f * slack * scale + 1e-9f,
                 "grad of " + layout.tensors[t].name);
  }
  // One AdamW step on both, then the next batch's loss.
  for (size_t t = 0; t < cp.params.size(); ++t) {
    const size_t n = cp.params[t].size();
    const float wd = layout.tensors[t].decay ? 0.1f : 0.0f;
    TrackedBuffer<float> cm(cmem, MemCategory::kOptimizer, n), cv(cmem, MemCategory::kOptimizer, n);
    TrackedBuffer<float> gm(gmem, MemCategory::kOptimizer, n), gv(gmem, MemCategory::kOptimizer, n);
    cpu.adamw(cp.params[t].data(), cp.grads[t].data(), cm.data(), cv.data(), n, 3e-3f, 0.9f,
                0.95f, 1e-8f, wd, 1, 1.0f);
    gpu.adamw(gp.params[t].data(), gp.grads[t].data(), gm.data(), gv.data(), n, 3e-3f, 0.9f,
                0.95f, 1e-8f, wd, 1, 1.0f);
  }
  make_batch(7, B, B, T, c.vocab, tok.data(), tgt.data());
  const float closs2 = cmodel.forward(tok.data(), tgt.data(), cp);
  const float gloss2 = gmodel.forward(tok.data(), tgt.data(), gp);
  // Adam's first step is ~lr * sign(g): a grad near 0 may flip sign between devices, so the
  // second loss is compared loosely.
  EXPECT_NEAR(closs2, gloss2, 1e-3 * closs2) << "loss after one AdamW step";
  EXPECT_GT(gmem.peak_total(), 0u);
  if (bf16_matmuls) {
    // The operand slots hold exactly what the predictor adds for bf16 matmuls on a GPU.
    EXPECT_EQ(gmem.current(MemCategory::kWorkspace), bf16_operand_bytes(c, B));
  }
}

TEST_F(CudaNumerics, TinyModelStepMatchesCpu) { check_tiny_step(*cpu_, *gpu_, false); }
TEST_F(CudaNumerics, LlamaTinyModelStepMatchesCpu) {
  check_tiny_step(*cpu_, *gpu_, false, "llama-tiny");
}

// The Llama block's kernels (llama_ops.cu) against the CPU's: RMSNorm, SwiGLU, RoPE with GQA
// (positions up to 300 with θ = 500000: the angles are computed in double on both).
TEST_F(CudaNumerics, LlamaKernelsMatchCpu) {
  const int rows = 50, C = 200, F = 333;
  auto x = uniform(size_t(rows) * C, -2, 2, 60), w = uniform(C, 0.5f, 1.5f, 61);
  std::vector<float> y(size_t(rows) * C), rstd(rows);
  DeviceArray<float> gx(*gpu_, x), gw(*gpu_, w), gy(*gpu_, y), grstd(*gpu_, rstd);
  cpu_->rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), rows, C);
  gpu_->rmsnorm_forward(gy.get(), grstd.get(), gx.get(), gw.get(), rows, C);
  expect_close(y, gy.host(), 1e-4f, 1e-5f, "rmsnorm out");
  auto dout = uniform(size_t(rows) * C, -1, 1, 62), dx = uniform(size_t(rows) * C, -1, 1, 63),
       dw = uniform(C, -1, 1, 64);
  DeviceArray<float> gdout(*gpu_, dout), gdx(*gpu_, dx), gdw(*gpu_, dw);
  cpu_->rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), rows,
                         C);
  gpu_->rmsnorm_backward(gdx.get(), gdw.get(), gdout.get(), gx.get(), gw.get(), grstd.get(), rows,
                         C);
  expect_close(dx, gdx.host(), 1e-4f, 1e-4f, "rmsnorm dx (+=)");
  expect_close(dw, gdw.host(), 1e-4f, 1e-4f, "rmsnorm dw (+=)");

  auto h = uniform(size_t(rows) * 2 * F, -6, 6, 65), gdo = uniform(size_t(rows) * F, -1, 1, 66);
  std::vector<float> g(size_t(rows) * F), dh(size_t(rows) * 2 * F);
  DeviceArray<float> gh(*gpu_, h), gg(*gpu_, g), ggdo(*gpu_, gdo), gdh(*gpu_, dh);
  cpu_->swiglu_forward(g.data(), h.data(), rows, F);
  gpu_->swiglu_forward(gg.get(), gh.get(), rows, F);
  expect_close(g, gg.host(), 1e-5f, 1e-6f, "swiglu out");
  cpu_->swiglu_backward(dh.data(), h.data(), gdo.data(), rows, F);
  gpu_->swiglu_backward(gdh.get(), gh.get(), ggdo.get(), rows, F);
  expect_close(dh, gdh.host(), 1e-5f, 1e-6f, "swiglu dh");

  const int B = 2, T = 300, H = 8, KV = 2, hd = 16, in_w = (H + 2 * KV) * hd;
  auto raw = uniform(size_t(B) * T * in_w, -1, 1, 67);
  auto dq = uniform(size_t(B) * T * 3 * H * hd, -1, 1, 68);
  std::vector<float> q(size_t(B) * T * 3 * H * hd), draw(raw.size());
  DeviceArray<float> graw(*gpu_, raw), gq(*gpu_, q), gdq(*gpu_, dq), gdraw(*gpu_, draw);
  cpu_->rope_gqa_forward(q.data(), raw.data(), B, T, H, KV, hd, 500000.0f);
  gpu_->rope_gqa_forward(gq.get(), graw.get(), B, T, H, KV, hd, 500000.0f);
  expect_close(q, gq.host(), 1e-5f, 1e-6f, "rope_gqa out");
  cpu_->rope_gqa_backward(draw.data(), dq.data(), B, T, H, KV, hd, 500000.0f);
  gpu_->rope_gqa_backward(gdraw.get(), gdq.get(), B, T, H, KV, hd, 500000.0f);
  expect_close(draw, gdraw.host(), 1e-5f, 1e-5f, "rope_gqa dqkv_raw");
}

#ifdef SB_HAVE_CUDA
TEST_F(CudaNumerics, TinyModelStepWithBf16MatmulsMatchesTheRoundedReference) {
  Bf16MatmulCpu ref;
  check_tiny_step(ref, *gpu_, true);
}
#endif

}  // namespace
}  // namespace sb::testing
