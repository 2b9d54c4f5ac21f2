// Unit plan construction (see header).
#include "strategies/fsdp_plan.h"

namespace sb {

FsdpPlan FsdpPlan::build(const ModelLayout& model, const std::string& wrap) {
  FsdpPlan p;
  const int L = model.config.n_layer;
  int k = L;  // "model": every block joins the root
  if (wrap == "block") k = 1;
  else if (wrap.rfind("every-", 0) == 0) k = std::stoi(wrap.substr(6));
  const bool whole = wrap == "model";
  p.unit_tensors.resize(whole ? 1 : 1 + (L + k - 1) / k);
  p.unit_of_tensor.assign(model.tensors.size(), -1);
  for (size_t t = 0; t < model.tensors.size(); ++t) {
    const int seg = model.tensors[t].segment;
    const bool root = whole || seg == 0 || seg == L + 1;
    const int u = root ? 0 : 1 + (seg - 1) / k;
    p.unit_tensors[u].push_back(int(t));
    p.unit_of_tensor[t] = u;
  }
  p.spans.resize(p.unit_tensors.size());
  const int M = int(model.modules.size());
  for (int m = 0; m < M; ++m) {
    const int u = p.unit_of_tensor[model.modules[m].tensors.front()];
    p.unit_of_module.push_back(u);
    Span& s = p.spans[u];
    if (s.first_fwd < 0) s.first_fwd = m;
    s.last_fwd = m;
    if (s.last_bwd < 0) s.last_bwd = m;  // the lowest module index runs last in backward
  }
  for (int m = M - 1; m >= 0; --m) {
    Span& s = p.spans[p.unit_of_module[m]];
    if (s.first_bwd < 0) s.first_bwd = m;
  }
  p.root = p.unit_of_module[0];
  return p;
}

int FsdpPlan::next_unit(int m, int step) const {
  const int u = unit_of_module[m];
  for (int i = m + step; i >= 0 && i < int(unit_of_module.size()); i += step)
    if (unit_of_module[i] != u) return unit_of_module[i];
  return -1;
}

}  // namespace sb
