// What the quantised strategies' parity tests (ZeRO++ qwZ, qgZ) measure against the 1-rank
// reference: per tensor, how far the k-step update lies from the reference's, and the worst
// relative loss difference over a trajectory.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "harness/model/layout.h"

namespace sb::testing {

// One tensor's update Δ = params - init against the reference's: ‖Δ - Δ_ref‖ and ‖Δ_ref‖. The
// key third of qkv's bias is left out (its exact gradient is zero: it moves on residue; see
// run_parity_test.cc).
struct UpdateDistance {
  std::string name;
  double distance = 0, reference = 0;
};

inline std::vector<UpdateDistance> update_distances(const ModelLayout& l,
                                                    const std::vector<float>& got,
                                                    const std::vector<float>& ref,
                                                    const std::vector<float>& init) {
  std::vector<UpdateDistance> out;
  size_t at = 0;
  for (const ParamTensor& t : l.tensors) {
    double d = 0, n = 0;
    const bool qkv_bias = t.name.find("attn.qkv.bias") != std::string::npos;
    for (size_t i = at; i < at + t.numel; ++i) {
      if (qkv_bias && i >= at + t.numel / 3 && i < at + 2 * t.numel / 3) continue;
      const double du = double(got[i]) - init[i], dr = double(ref[i]) - init[i];
      d += (du - dr) * (du - dr);
      n += dr * dr;
    }
    out.push_back({t.name, std::sqrt(d), std::sqrt(n)});
    at += t.numel;
  }
  return out;
}

// max over steps of |loss - ref| / ref.
inline double worst_relative_loss_difference(const std::vector<double>& loss,
                                             const std::vector<double>& ref) {
  double worst = 0;
  for (size_t s = 0; s < ref.size() && s < loss.size(); ++s)
    worst = std::max(worst, std::fabs(loss[s] - ref[s]) / ref[s]);
  return worst;
}

}  // namespace sb::testing
