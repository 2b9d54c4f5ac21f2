// The predictor (a dry run of the real strategies) is cheap enough to sweep: GPT-2/GPT-3 sizes,
// every strategy, worlds 8..1024, both precisions. Speed is measured, not asserted
// (`shardbench predict --sweep N` and `--fit` are the benchmarks; README): this test checks
// that a sweep over every shape runs through and prints the rate it saw.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "harness/predict/predict.h"

namespace sb {
namespace {

TEST(PredictSpeed, SweepOverEveryShapeRunsThrough) {
  const Cluster cl = load_cluster("dgx-h100");
  const std::vector<std::string> strategies = strategy_names();
  const char* models[] = {"gpt2-124m", "gpt2-350m", "gpt2-1.5b", "gpt3-6.7b", "gpt3-175b"};
  const int worlds[] = {8, 16, 64, 256, 1024};
  PredictConfig cfg;
  cfg.batch_per_rank = 1;
  int done = 0, fits = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (done < 400) {
    for (const char* m : models) {
      cfg.model = model_shape(parse_predict_model(m));
      for (int w : worlds)
        for (Precision p : {Precision::kFp32, Precision::kBf16Mixed})
          for (const std::string& s : strategies) {
            cfg.world = w;
            cfg.ranks_per_node = 8;
            cfg.options.precision = p;
            fits += predict(cfg, s, cl).fits ? 1 : 0;
            ++done;
          }
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ predict ] %d predictions in %.3f s (%.0f per second), %d fit\n", done, s, done / s,
              fits);
  EXPECT_GT(fits, 0);
}

}  // namespace
}  // namespace sb
