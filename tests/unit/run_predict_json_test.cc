// The prediction document is in the run's schema family (schema_version, suite, kind, config,
// results[] with the run's key names where the run has the quantity), predict_for_run on a
// run's config and topology agrees with the CLI's path, residuals read a run result, and the
// cluster presets round-trip through JSON (the --cluster FILE format).
#include <gtest/gtest.h>

#include "harness/launch/report.h"
#include "harness/predict/predict.h"

namespace sb {
namespace {

TEST(PredictJson, DocumentHasTheRunSchemaFamilyKeys) {
  PredictConfig cfg;
  cfg.model = model_shape(parse_model("small"));
  cfg.world = 4;
  cfg.ranks_per_node = 2;
  const Cluster cl = load_cluster("cpu-local");
  std::vector<nlohmann::json> results;
  for (const auto& s : strategy_names()) results.push_back(prediction_json(predict(cfg, s, cl)));
  const nlohmann::json doc = prediction_document(cfg, cl, results, {{"precision", "fp32"}});
  EXPECT_EQ(doc["schema_version"], kSchemaVersion);
  EXPECT_EQ(doc["suite"], "shardbench");
  EXPECT_EQ(doc["kind"], "prediction");
  EXPECT_EQ(doc["config"]["world_size"], 4);
  EXPECT_EQ(doc["config"]["num_nodes"], 2);
  EXPECT_EQ(doc["config"]["precision"], "fp32");  // the knobs the caller records, merged in
  ASSERT_EQ(doc["results"].size(), strategy_names().size());
  for (const auto& r : doc["results"]) {
    for (const char* k : {"params", "grads", "optimizer"})
      EXPECT_TRUE(r["memory"]["model_state_bytes_per_rank"].contains(k));
    for (const char* k : {"peak_bytes_per_rank", "activations_bytes", "comm_buffers_bytes",
                          "gathered_params_bytes", "breakdown_at_peak"})
      EXPECT_TRUE(r["memory"].contains(k)) << k;
    for (const char* k : {"payload_bytes", "sent_bytes_intra", "sent_bytes_inter",
                          "sent_bytes_intra_per_rank", "sent_bytes_inter_per_rank"})
      EXPECT_TRUE(r["comm"]["per_step"].contains(k)) << k;
    EXPECT_FALSE(r["comm"]["by_kind"].empty());
    for (const char* k : {"compute", "comm", "total_overlap", "total_no_overlap"})
      EXPECT_GT(r["step_time_s"][k].get<double>(), 0) << k;
    EXPECT_LE(r["step_time_s"]["total_overlap"].get<double>(),
              r["step_time_s"]["total_no_overlap"].get<double>());
    EXPECT_TRUE(r["fits"].is_boolean());
  }
}

TEST(PredictJson, PredictForRunMatchesThePredictorOnTheRunsShape) {
  RunConfig run;
  run.model = parse_model("tiny");
  run.batch_per_rank = 1;
  const Topology topo = Topology::virtual_nodes(4, 0, 2);
  const Cluster cl = load_cluster("cpu-local");
  for (const auto& s : strategy_names()) {
    const nlohmann::json p = predict_for_run(run, topo, s, cl);
    PredictConfig cfg;
    cfg.model = model_shape(run.model);
    cfg.world = 4;
    cfg.ranks_per_node = 2;
    const Prediction q = predict(cfg, s, cl);
    EXPECT_EQ(p["comm"]["per_step"]["sent_bytes_inter"].get<uint64_t>(), q.traffic.sent_inter) << s;
    EXPECT_EQ(p["memory"]["peak_bytes_per_rank"].get<uint64_t>(), q.peak) << s;
    // A result carrying exactly the predicted numbers has residuals of 0 and ratios of 1.
    nlohmann::json result = p;
    result["step_time_s"] = {{"median", p["step_time_s"]["predicted"]}};
    const nlohmann::json res = prediction_residuals(p, result);
    for (const char* k : {"peak_bytes_per_rank", "sent_bytes_intra", "step_time_s"}) {
      EXPECT_DOUBLE_EQ(res["ratio"][k].get<double>(), 1.0) << k;
      EXPECT_DOUBLE_EQ(res["residual"][k].get<double>(), 0.0) << k;
    }
  }
}

TEST(PredictJson, ClusterPresetsRoundTripAndCiteTheirSources) {
  for (const auto& name : cluster_names()) {
    const Cluster c = load_cluster(name);
    const Cluster back = cluster_from_json(cluster_json(c));
    EXPECT_EQ(back.name, c.name);
    EXPECT_DOUBLE_EQ(back.peak_flops_bf16, c.peak_flops_bf16);
    EXPECT_DOUBLE_EQ(back.inter.bw_bytes_per_s, c.inter.bw_bytes_per_s);
    EXPECT_EQ(back.inter.per_rank, c.inter.per_rank);
    EXPECT_FALSE(c.source.empty()) << name;
    EXPECT_GT(c.device_memory_bytes, 0) << name;
  }
  EXPECT_DOUBLE_EQ(load_cluster("dgx-h100").peak_flops_bf16, 989.5e12);
  EXPECT_DOUBLE_EQ(load_cluster("h200").device_memory_bytes, 141e9);
  EXPECT_THROW(load_cluster("no-such-cluster"), std::invalid_argument);
  EXPECT_THROW(cluster_from_json({{"base", "h200"}, {"peak_flops_bf16", -1}}),
               std::invalid_argument);
  // Keys of the wrong type (found by tests/fuzz/fuzz_configs.py: nlohmann's type_error once
  // escaped as SIGABRT) and counts no int holds are refusals naming the key.
  for (const nlohmann::json& j :
       {nlohmann::json{{"base", 1}}, nlohmann::json{{"base", "h200"}, {"name", -1}},
        nlohmann::json{{"base", "h200"}, {"device", nullptr}},
        nlohmann::json{{"base", "h200"}, {"source", {1, 2}}},
        nlohmann::json{{"base", "h200"}, {"intra", 3}},
        nlohmann::json{{"base", "h200"}, {"inter", {{"per_rank", "yes"}}}},
        nlohmann::json{{"base", "h200"}, {"ranks_per_node", 1e300}},
        nlohmann::json{{"base", "h200"}, {"host_cores", 2.5}}})
    EXPECT_THROW(cluster_from_json(j), std::invalid_argument) << j.dump();
}

}  // namespace
}  // namespace sb
