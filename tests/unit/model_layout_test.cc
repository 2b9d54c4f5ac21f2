// The parameter layout agrees with the closed-form count, ties the head to wte correctly, and
// the FLOP formula of gpt.h gives the hand-computed numbers.
#include <gtest/gtest.h>

#include "harness/model/config.h"
#include "harness/model/gpt.h"
#include "harness/model/layout.h"

namespace sb {
namespace {

TEST(ModelLayout, ParamCountMatchesFormulaForAllPresetsTiedAndUntied) {
  for (const std::string& name : preset_names()) {
    for (bool tied : {true, false}) {
      GptConfig c = parse_model(name);
      c.tied_head = tied;
      EXPECT_EQ(count_params(c), make_layout(c).num_params()) << name << " tied=" << tied;
    }
  }
  EXPECT_EQ(count_params(parse_model("gpt2-124m")), 124475904u);  // llm.c, padded vocab
}

TEST(ModelLayout, TiedEmbeddingIsReadyAfterModuleZero) {
  const ModelLayout l = make_layout(parse_model("tiny"));
  ASSERT_EQ(l.tensors[0].name, "wte.weight");
  EXPECT_EQ(l.grad_ready_module()[0], 0);
  EXPECT_EQ(l.uses_per_pass()[0], 2);
  EXPECT_EQ(l.modules.back().tensors, std::vector<int>{0});  // lm_head uses wte
}

TEST(ModelLayout, UntiedHeadHasItsOwnTensorReadyAtTheHead) {
  GptConfig c = parse_model("tiny");
  c.tied_head = false;
  const ModelLayout l = make_layout(c);
  const int head = l.modules.back().tensors.at(0);
  EXPECT_NE(head, 0);
  EXPECT_EQ(l.grad_ready_module()[head], int(l.modules.size()) - 1);
  EXPECT_EQ(l.uses_per_pass()[0], 1);
}

TEST(ModelLayout, FlopsPerStepIsSixNPlusAttention) {
  const GptConfig c = parse_model("tiny");  // L2 C32 T16 V64
  const double n_matmul = 2 * 12 * 32 * 32 + 64 * 32;
  const uint64_t tokens = 2 * 16;
  EXPECT_DOUBLE_EQ(flops_per_step(c, tokens),
                   6 * n_matmul * tokens + 12.0 * 2 * 32 * 16 * tokens);
  EXPECT_NE(std::string(flop_formula()).find("N_matmul"), std::string::npos);
}

}  // namespace
}  // namespace sb
