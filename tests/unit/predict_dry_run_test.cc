// The predictor's own pieces, linked without MPI (sb_predict): the one ring schedule's steps
// against its closed form, the simulated device holding no memory for a model far larger than
// this machine, and the simulated clocks' overlap (off: every collective exposed; on: some of
// it hidden behind compute, never more than all of it).
#include <gtest/gtest.h>

#include "harness/predict/predict.h"

namespace sb {
namespace {

TEST(RingSchedule, StepsSumToTheClosedFormAndReceiveWhatThePredecessorSends) {
  for (CollKind k : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather})
    for (int n = 1; n <= 7; ++n)
      for (size_t count : {size_t(0), size_t(1), size_t(5), size_t(n) * 3, size_t(1000003)}) {
        if (k == CollKind::kReduceScatter && count % size_t(n) != 0) continue;
        for (int i = 0; i < n; ++i) {
          const RingSchedule ring(k, count, n, i);
          uint64_t sent = 0;
          for (int s = 0; s < ring.steps(); ++s) {
            sent += ring.send_chunk(s).len;
            // the chunk this position receives is the one its predecessor sends at this step
            const RingSchedule pred(k, count, n, ring.prev());
            EXPECT_EQ(pred.send_chunk(s).begin, ring.recv_chunk(s).begin);
            EXPECT_EQ(pred.send_chunk(s).len, ring.recv_chunk(s).len);
          }
          EXPECT_EQ(sent, ring.sent_elements()) << coll_name(k) << " n=" << n << " i=" << i;
          EXPECT_EQ(ring.steps(), n <= 1 ? 0 : (k == CollKind::kAllReduce ? 2 : 1) * (n - 1));
        }
      }
}

// `model` in bf16-mixed at `world` ranks, 8 per node.
PredictConfig bf16_config(const char* model, int world) {
  PredictConfig cfg;
  cfg.model = model_shape(parse_predict_model(model));
  cfg.world = world;
  cfg.ranks_per_node = 8;
  cfg.options.precision = Precision::kBf16Mixed;
  return cfg;
}

TEST(SimDevice, Gpt3_175bAtWorld1024HoldsNoHostMemory) {
  const PredictConfig cfg = bf16_config("gpt3-175b", 1024);
  const uint64_t before = MemoryTracker::rss_hwm_bytes();
  for (const std::string& s : strategy_names()) {
    const Prediction p = predict(cfg, s, load_cluster("dgx-h100"));
    // The dry run counts this implementation's activations (fp32 work included) past 100 GiB; the
    // stack's ledger, what the prediction reports, holds them in bf16 without the work.
    EXPECT_GT(p.implementation_peak, uint64_t(100) << 30) << s;
    EXPECT_GT(p.peak, uint64_t(50) << 30) << s;
    EXPECT_LT(p.peak, p.implementation_peak) << s;
    EXPECT_GT(p.traffic.collectives, 0u) << s;
  }
  const uint64_t after = MemoryTracker::rss_hwm_bytes();
  ASSERT_GT(before, 0u) << "VmHWM unreadable";
  EXPECT_LT(after - before, uint64_t(256) << 20) << "the dry run allocated host memory";
}

TEST(SimClock, OverlapOffExposesEveryCollectiveOnHidesSome) {
  PredictConfig cfg = bf16_config("gpt2-1.5b", 64);
  const Cluster cl = load_cluster("dgx-a100-80g");
  for (const std::string& s : {std::string("ddp"), std::string("fsdp_full_shard")}) {
    cfg.options.overlap = false;
    const Prediction off = predict(cfg, s, cl);
    // (the exposed time is tallied in whole nanoseconds per wait)
    EXPECT_NEAR(off.exposed_s, off.comm_s, 1e-6 * off.comm_s) << s;
    EXPECT_NEAR(off.step_s, off.compute_s + off.comm_s, 1e-9 * off.step_s) << s;
    cfg.options.overlap = true;
    const Prediction on = predict(cfg, s, cl);
    EXPECT_LT(on.exposed_s, on.comm_s) << s << ": backward hides some communication";
    EXPECT_LT(on.step_s, off.step_s) << s;
    EXPECT_GE(on.step_s, std::max(on.compute_s, on.comm_s) * (1 - 1e-9)) << s;
  }
}

// The dry run's step by phase (PhaseClock on the logical clocks): the phases partition the
// predicted step, the comm stream's busy time is the step's collectives back to back, and with
// overlap off every collective is exposed: exposed == busy (whole nanoseconds per wait).
TEST(SimClock, PredictedPhasesPartitionTheStepAndOverlapOffExposesAllOfIt) {
  PredictConfig cfg = bf16_config("gpt2-1.5b", 16);
  const Cluster cl = load_cluster("dgx-a100-80g");
  for (const std::string& s : {std::string("ddp"), std::string("zero3")})
    for (bool overlap : {false, true}) {
      cfg.options.overlap = overlap;
      const Prediction p = predict(cfg, s, cl);
      ASSERT_FALSE(p.phases.empty()) << s;
      const StepPhases& ph = p.phases.back();
      const double sum =
          ph.forward_s + ph.backward_s + ph.optimizer_s + ph.exposed_comm_s + ph.other_s;
      EXPECT_NEAR(sum, ph.step_s, 1e-12 * ph.step_s) << s;
      EXPECT_DOUBLE_EQ(ph.step_s, p.step_s) << s;
      EXPECT_NEAR(ph.comm_busy_s, p.comm_s, 1e-9 * p.comm_s) << s;
      EXPECT_NEAR(ph.exposed_comm_s, p.exposed_s, 1e-9) << s;
      EXPECT_GT(ph.forward_s, 0) << s;
      EXPECT_GT(ph.backward_s, 0) << s;
      if (!overlap) {
        EXPECT_NEAR(ph.exposed_comm_s, ph.comm_busy_s, 1e-9 * double(p.traffic.collectives)) << s;
        // the same whole nanosecond per collective, as a fraction of the busy time
        EXPECT_NEAR(ph.overlap_fraction(), 0.0,
                    1e-9 * double(p.traffic.collectives) / ph.comm_busy_s) << s;
      } else {
        EXPECT_GT(ph.overlap_fraction(), 0.0) << s << ": backward hides some communication";
      }
    }
}


// ZeRO-3's IPG buffer at 7B (stage3.py, "# IPG"): with DeepSpeed's default reduce_bucket_size of
// 5e8 elements, bf16, the dry run holds 1e9 bytes of it from setup on, so zero3's and MiCS's
// predicted peaks rise by at most that, and by at least that less one bucket's gradients
// (tests/mpi/run_zero3_ipg_test.cc's bounds); llama2-7b's gradients per rank exceed a bucket, so
// the lower bound is the peak without it.
TEST(SimDevice, Zero3AndMicsPeaksHoldTheIpgBufferAt7b) {
  PredictConfig cfg = bf16_config("llama2-7b", 16);
  cfg.options.bucket_mb = 5e8 * 2 / (1024.0 * 1024.0);  // reduce_bucket_size 5e8, bf16
  const uint64_t ipg = cfg.options.bucket_elements() * 2;
  ASSERT_EQ(ipg, 1'000'000'000u);
  const Cluster cl = load_cluster("dgx-h100");
  for (const char* s : {"zero3", "mics"}) {
    const Prediction on = predict(cfg, s, cl);
    PredictConfig no = cfg;
    no.options.zero_contiguous_gradients = false;
    const Prediction off = predict(no, s, cl);
    EXPECT_GE(on.at_peak[int(MemCategory::kCommBuffers)], ipg) << s;
    EXPECT_LE(on.peak, off.peak + ipg) << s;
    EXPECT_GE(on.peak, off.peak) << s;
    EXPECT_EQ(on.traffic.sent_intra, off.traffic.sent_intra) << s;
  }
}

}  // namespace
}  // namespace sb
