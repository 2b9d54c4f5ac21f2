// The predictor against a published configuration, memory side: Llama-2-7B trained with
// PyTorch FSDP on 128 A100-80GB at batch 2 × 4096 tokens per GPU without activation
// checkpointing, bf16 mixed precision and fused (SDPA flash) attention, fits in 80 GB (PyTorch
// blog "Maximizing training throughput using PyTorch FSDP", IBM & Meta, 2024,
// https://pytorch.org/blog/maximizing-training/: 3,700 tokens/s per GPU, 57 % MFU). The same
// step under DDP does not: 16 bytes per parameter of model state alone exceed 80 GB. The model
// is the real llama2-7b preset (6,738,415,616 parameters: RMSNorm, SwiGLU 11008, RoPE, untied
// head, vocab 32000).
#include <gtest/gtest.h>

#include "harness/predict/predict.h"

namespace sb {
namespace {

PredictConfig llama2_7b(AttentionKind attention, Precision precision) {
  GptConfig c = parse_predict_model("llama2-7b");
  EXPECT_EQ(c.seq_len, 4096);
  c.attention = attention;
  PredictConfig cfg;
  cfg.model = model_shape(c);
  cfg.world = 128;
  cfg.ranks_per_node = 8;
  cfg.batch_per_rank = 2;
  cfg.options.precision = precision;
  return cfg;
}

TEST(PredictPublished, Llama2_7bFitsUnderFsdpNotUnderDdpOn128A100) {
  const Cluster a100 = load_cluster("dgx-a100-80g");
  const PredictConfig cfg = llama2_7b(AttentionKind::kFused, Precision::kBf16Mixed);
  const Prediction fsdp = predict(cfg, "fsdp_full_shard", a100);
  const Prediction ddp = predict(cfg, "ddp", a100);
  EXPECT_TRUE(fsdp.fits) << "FSDP peak " << fsdp.peak / double(1ull << 30) << " GiB";
  EXPECT_FALSE(ddp.fits) << "DDP peak " << ddp.peak / double(1ull << 30) << " GiB";
  EXPECT_LT(fsdp.peak, fsdp.limit_bytes);
  EXPECT_EQ(cfg.model->num_params, 6738415616ull) << "the published Llama-2-7B count";
  // What made the difference to the stored workload: the naive T×T probabilities push FSDP
  // past 80 GB; fp32 activations (the Llama block stores fewer tensors than the GPT-2 block:
  // 8C + 3F floats per token and layer) leave it at the limit's edge, 1.5x the bf16 peak.
  const Prediction naive =
      predict(llama2_7b(AttentionKind::kNaive, Precision::kBf16Mixed), "fsdp_full_shard", a100);
  EXPECT_FALSE(naive.fits) << "naive attention peak " << naive.peak / double(1ull << 30);
  const Prediction fp32 =
      predict(llama2_7b(AttentionKind::kFused, Precision::kFp32), "fsdp_full_shard", a100);
  EXPECT_GT(double(fp32.peak), 1.5 * double(fsdp.peak))
      << "fp32 activations peak " << fp32.peak / double(1ull << 30);
}

}  // namespace
}  // namespace sb
