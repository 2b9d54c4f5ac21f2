// The FSDP paper's (Zhao et al. 2023) arguments as the predictor sees them on a multi-node
// shape: §3.2 hybrid sharding keeps the parameter all-gathers inside the node, so a 7B model on
// 8 nodes x 8 GPUs moves fewer inter-node bytes with HYBRID_SHARD than with FULL_SHARD (and
// than DDP); and what the wrap policy does to the gathered params at the peak (§3.1: peak ≈
// Σψ_i/F + max ψ_i). Also the fit search on a model that does not fit unsharded.
#include <gtest/gtest.h>

#include "harness/predict/predict.h"

namespace sb {
namespace {

PredictConfig seven_b(int world, int rpn) {
  PredictConfig cfg;
  cfg.model = model_shape(parse_predict_model("gpt3-6.7b"));
  cfg.world = world;
  cfg.ranks_per_node = rpn;
  cfg.batch_per_rank = 1;
  cfg.options.precision = Precision::kBf16Mixed;
  cfg.options.ddp.bf16_params = true;  // the papers' DDP baseline: bf16 params and grads
  return cfg;
}

TEST(PredictFsdpPaper, HybridShardMovesFewestInterNodeBytes) {
  const PredictConfig cfg = seven_b(64, 8);
  const Cluster cl = load_cluster("dgx-a100-80g");
  auto inter = [&](const char* s) { return predict(cfg, s, cl).traffic.sent_inter; };
  const uint64_t hybrid = inter("fsdp_hybrid_shard"), full = inter("fsdp_full_shard");
  const uint64_t ddp = inter("ddp"), sgo = inter("fsdp_shard_grad_op");
  EXPECT_LT(hybrid, full);
  EXPECT_LT(hybrid, ddp);
  EXPECT_LT(ddp, full);  // DDP 2Ψ per node boundary, FULL_SHARD ~3Ψ (ZeRO paper §7's 1.5x)
  EXPECT_LT(sgo, full);
  EXPECT_EQ(inter("fsdp_hybrid_shard_zero2"), hybrid);  // only the grad all-reduce crosses
  // Ring accounting: per node boundary, a world ring sends what one rank sends; the hybrid
  // all-reduce of Ψ/G per rank runs in G rings of M nodes: 2(M-1)·Ψ_pad·b_g summed.
  const Prediction h = predict(cfg, "fsdp_hybrid_shard", cl);
  EXPECT_EQ(double(h.traffic.sent_inter), 2.0 * 7 * double(h.padded_params) * 2);
  // ... and its intra-node traffic is the full-shard traffic of an 8-rank world, per node.
  EXPECT_GT(h.traffic.sent_intra, predict(cfg, "fsdp_full_shard", cl).traffic.sent_intra);
}

TEST(PredictFsdpPaper, HybridIsFasterAcrossSlowNodes) {
  // One 200 Gb/s NIC per node instead of DGX A100's eight: the network, not NVLink, is slow.
  const Cluster slow = cluster_from_json(
      {{"base", "dgx-a100-80g"}, {"name", "a100-1nic"}, {"inter", {{"bw_bytes_per_s", 25e9}}}});
  const PredictConfig cfg = seven_b(64, 8);
  const double hybrid = predict(cfg, "fsdp_hybrid_shard", slow).comm_s;
  EXPECT_LT(hybrid, predict(cfg, "fsdp_full_shard", slow).comm_s);
  EXPECT_LT(hybrid, predict(cfg, "ddp", slow).comm_s);
}

TEST(PredictFsdpPaper, WrapModelGathersTheWholeModelWrapBlockAboutOneBlock) {
  PredictConfig cfg = seven_b(8, 8);
  const Cluster cl = load_cluster("h200");
  cfg.options.wrap = "model";
  const Prediction whole = predict(cfg, "fsdp_full_shard", cl);
  cfg.options.wrap = "block";
  const Prediction block = predict(cfg, "fsdp_full_shard", cl);
  const uint64_t bp = 2, psi = cfg.model->num_params;
  const uint64_t C = cfg.model->config.n_embd, blockp = 12 * C * C + 13 * C;
  EXPECT_EQ(whole.at_peak[int(MemCategory::kGatheredParams)], bp * ((psi + 7) / 8 * 8));
  // root (embeddings, head) + the block computing + at most one prefetched block
  const uint64_t root = psi - cfg.model->config.n_layer * blockp;
  EXPECT_LE(block.at_peak[int(MemCategory::kGatheredParams)], bp * (root + 2 * blockp + 16));
  EXPECT_GT(whole.peak, block.peak);
}

TEST(PredictFit, ShardingLowersTheSmallestWorldThatFits) {
  PredictConfig cfg = seven_b(1, 8);
  const Cluster cl = load_cluster("dgx-a100-80g");
  const FitResult ddp = smallest_fitting_world(cfg, "ddp", cl, 4096);
  EXPECT_EQ(ddp.min_world, 0) << "16 bytes x 6.7B params never fits 80 GB";
  const FitResult z3 = smallest_fitting_world(cfg, "zero3", cl, 4096);
  ASSERT_GT(z3.min_world, 1);
  EXPECT_TRUE(z3.at_min.fits);
  // One fewer (rank, or node past one node) does not fit.
  PredictConfig less = cfg;
  less.world = z3.min_world <= 8 ? z3.min_world - 1 : z3.min_world - 8;
  less.ranks_per_node = less.world < 8 ? less.world : 8;
  EXPECT_FALSE(predict(less, "zero3", cl).fits);
  const FitResult z1 = smallest_fitting_world(cfg, "zero1", cl, 4096);
  EXPECT_TRUE(z1.min_world == 0 || z1.min_world >= z3.min_world);
}

}  // namespace
}  // namespace sb
