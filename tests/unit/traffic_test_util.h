// The predictor's two traffic paths (TrafficAccount's closed form by group size and position,
// and its per-rank walk of a Topology) must agree on every figure the results report.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "harness/predict/traffic.h"

namespace sb {

inline void expect_same_traffic(const Traffic& a, const Traffic& b, const std::string& at = {}) {
  EXPECT_EQ(a.sent_intra, b.sent_intra) << at;
  EXPECT_EQ(a.sent_inter, b.sent_inter) << at;
  EXPECT_EQ(a.max_rank_sent, b.max_rank_sent) << at;
  EXPECT_EQ(a.max_rank_intra, b.max_rank_intra) << at;
  EXPECT_EQ(a.max_rank_inter, b.max_rank_inter) << at;
}

}  // namespace sb
