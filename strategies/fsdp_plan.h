// FSDP's unit plan, shared by the strategy (strategies/fsdp.cc) and the predictor's replay of
// it: which tensors form each wrap unit (--wrap block|model|every-K; embeddings, final norm
// and head form the root unit), which unit each leaf module belongs to, each unit's first and
// last module in forward and backward, and the next unit to prefetch. Pure metadata.
#pragma once

#include <string>
#include <vector>

#include "harness/model/layout.h"

namespace sb {

struct FsdpPlan {
  struct Span { int first_fwd = -1, last_fwd = -1, first_bwd = -1, last_bwd = -1; };
  std::vector<std::vector<int>> unit_tensors;  // unit 0 is the root
  std::vector<int> unit_of_tensor, unit_of_module;
  std::vector<Span> spans;  // per unit
  int root = 0;

  static FsdpPlan build(const ModelLayout& model, const std::string& wrap);
  // The unit of the first module after m (step +1: forward, -1: backward) that belongs to
  // another unit; -1 when none runs later in this pass (nothing to prefetch past the end).
  int next_unit(int m, int step) const;
};

}  // namespace sb
