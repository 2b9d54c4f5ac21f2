// ZeRO-3's IPG buffer as DeepSpeed ships it (stage3.py DeepSpeedZeroOptimizer_Stage3.__init__,
// "# IPG": with contiguous_gradients, the default, one reduce_bucket_size buffer of the
// communication dtype allocated up front and held for the run; __add_grad_to_ipg_bucket copies
// each gradient into it and frees the gradient's own storage). MiCS_Optimizer is that optimizer,
// so MiCS holds it too. At every instant the run with it holds the buffer and, at most, no more
// gradient storage than the run without it, and at least that storage less one bucket's
// gradients: peak_off + ipg − bucket ≤ peak_on ≤ peak_off + ipg, bucket = min(the buffer, every
// gradient) — on tiny (and the odd model at a world of 3) a window of the model's gradient bytes
// around a 1 MiB buffer. Bytes, collectives and model state do not change.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/closed_forms.h"
#include "tests/mpi/run_fixture.h"

namespace sb::testing {
namespace {

TEST(Zero3Ipg, ContiguousGradientsHoldsTheBucketBufferAtThePeak) {
  for (const char* s : {"zero3", "mics"}) {
    for (Precision p : {Precision::kFp32, Precision::kBf16Mixed}) {
      RunConfig cfg = tiny_config(p, 2);
      cfg.options.bucket_mb = 1;
      cfg.options.overlap = false;  // buffers freed at fixed points: repeatable peaks
      const uint64_t ipg = cfg.options.bucket_elements() * uint64_t(closed_forms::param_bytes(p));
      ASSERT_EQ(ipg, 1u << 20);
      const StrategyRun on = run(s, cfg);
      cfg.options.zero_contiguous_gradients = false;
      const StrategyRun off = run(s, cfg);
      ASSERT_EQ(on.status, "ok") << on.error;
      ASSERT_EQ(off.status, "ok") << off.error;
      const uint64_t grads = on.padded_params * uint64_t(closed_forms::param_bytes(p));
      const uint64_t bucket = std::min(ipg, grads);
      EXPECT_LE(on.peak_bytes, off.peak_bytes + ipg) << s;
      EXPECT_GE(on.peak_bytes + bucket, off.peak_bytes + ipg) << s;
      EXPECT_GE(on.breakdown_at_peak[int(MemCategory::kCommBuffers)], ipg) << s;
      EXPECT_EQ(on.payload_bytes, off.payload_bytes) << s;
      EXPECT_EQ(on.step_entries.size(), off.step_entries.size()) << s;
      EXPECT_EQ(on.model_state_grads, off.model_state_grads) << s;
      EXPECT_EQ(on.params, off.params) << s << ": the same training, bit for bit";
    }
  }
}

}  // namespace
}  // namespace sb::testing
