// JSON of predictions, in the run's schema family (report.cc): the same key names wherever the
// run has the quantity (memory.peak_bytes_per_rank, comm.per_step.sent_bytes_intra, by_kind),
// plus what only a model has (step_time_s.compute/comm/total_*, fits). Keys carry units.
#include "harness/launch/report.h"
#include "harness/model/checkpointing.h"
#include "harness/model/gpt.h"
#include "harness/predict/predict.h"

namespace sb {

using nlohmann::json;

json predict_config_json(const PredictConfig& cfg, const json& knobs) {
  const ModelShape& m = *cfg.model;
  json model = m.bare ? json{{"name", m.config.name}, {"bare_params", m.num_params}}
                      : json{{"name", m.config.name},          {"n_layer", m.config.n_layer},
                             {"n_embd", m.config.n_embd},      {"n_head", m.config.n_head},
                             {"seq_len", m.config.seq_len},    {"vocab", m.config.vocab},
                             {"tied_head", m.config.tied_head},
                             {"attention", attention_name(m.config.attention)},
                             {"cross_entropy", cross_entropy_name(m.config.cross_entropy)},
                             {"activation_checkpointing",
                              activation_checkpointing_name(m.config.checkpoint_every)}};
  if (!m.bare) add_llama_keys(model, m.config);
  json config = {{"model", model},
                 {"params", m.num_params},
                 {"world_size", cfg.world},
                 {"ranks_per_node", cfg.ranks_per_node},
                 {"num_nodes", cfg.world / std::max(1, cfg.ranks_per_node)},
                 {"batch_per_rank", cfg.batch_per_rank},
                 {"seq_len", m.config.seq_len},
                 {"mem_limit_gb", cfg.mem_limit_gb}};
  config.update(knobs);
  return config;
}

// Where the predicted step's compute time went, by kernel class, and the step by phase.
static json time_breakdown_json(const Prediction& p) {
  json kernels;
  for (int k = 0; k < kNumKernelClasses; ++k)
    kernels[kernel_class_name(KernelClass(k))] = p.kernel_s[size_t(k)];
  kernels["launch_floor"] = p.launch_s;
  kernels["comm_contention"] = p.contention_s;
  json j = {{"kernels", kernels}, {"compute", p.compute_s}, {"comm_exposed", p.exposed_s}};
  if (!p.phases.empty()) {
    const StepPhases& ph = p.phases.back();
    j["phases"] = {{"forward", ph.forward_s},         {"backward", ph.backward_s},
                   {"optimizer", ph.optimizer_s},     {"exposed_comm", ph.exposed_comm_s},
                   {"other", ph.other_s}};
  }
  return j;
}

json prediction_json(const Prediction& p) {
  json breakdown;
  for (int c = 0; c < kNumMemCategories; ++c)
    breakdown[category_name(MemCategory(c))] = p.at_peak[c];
  const Traffic& t = p.traffic;
  json by_kind = json::array();
  for (int k = 0; k < kNumCollKinds; ++k)
    for (int g = 0; g < kNumGroupKinds; ++g) {
      const KindTotals& kt = t.by_kind[k][g];
      if (kt.count == 0) continue;
      by_kind.push_back({{"kind", coll_name(CollKind(k))},
                         {"group", group_name(GroupKind(g))},
                         {"count", kt.count},
                         {"bytes", kt.payload_bytes},
                         {"sent_bytes_all_ranks", kt.sent_bytes},
                         {"time_s", kt.time_s}});
    }
  json histogram = json::array();
  for (int i = 0; i < 64; ++i)
    if (t.size_histogram[i] > 0)
      histogram.push_back({{"bucket_bytes_le", uint64_t(1) << i}, {"count", t.size_histogram[i]}});
  json j = json{
      {"strategy", p.strategy},
      {"status", "predicted"},
      {"description", description_json(p.description)},
      {"padded_params", p.padded_params},
      {"memory",
       {{"peak_bytes_per_rank", p.peak},
        {"memory_of", p.memory_of},
        {"implementation_peak_bytes_per_rank", p.implementation_peak},
        {"model_state_bytes_per_rank",
         {{"params", p.state_params}, {"grads", p.state_grads}, {"optimizer", p.state_optimizer}}},
        {"activations_bytes", p.activations},
        {"gathered_params_bytes", p.at_peak[int(MemCategory::kGatheredParams)]},
        {"comm_buffers_bytes", p.at_peak[int(MemCategory::kCommBuffers)]},
        {"workspace_bytes", p.at_peak[int(MemCategory::kWorkspace)]},
        {"runtime",
         {{"cuda_context_bytes", p.cuda_context},
          {"nccl_buffers_bytes", p.nccl_buffers},
          {"nccl_communicators", p.communicators},
          {"allocator_margin_bytes", p.allocator_margin}}},
        {"device_peak_bytes_per_rank", p.device_peak},
        {"breakdown_at_peak", breakdown},
        {"limit_bytes_per_rank", p.limit_bytes},
        {"scope", p.model_state_only ? "model_state_only" : "model_state+activations+transients"}}},
      {"comm",
       {{"per_step",
         {{"payload_bytes", t.payload_bytes},
          {"sent_bytes_intra", t.sent_intra},
          {"sent_bytes_inter", t.sent_inter},
          {"sent_bytes_max_rank", t.max_rank_sent},
          {"sent_bytes_intra_per_rank", t.max_rank_intra},
          {"sent_bytes_inter_per_rank", t.max_rank_inter},
          {"collectives", t.collectives}}},
        {"traffic_accounting", "modelled"},
        {"by_kind", by_kind},
        {"size_histogram", histogram}}},
      {"step_time_s",
       {{"compute", p.compute_s},
        {"comm", p.comm_s},
        {"comm_exposed", p.exposed_s},
        {"total_overlap", p.total_overlap_s},
        {"total_no_overlap", p.total_no_overlap_s},
        {"predicted", p.step_s},
        {"uncertainty", p.uncertainty},
        {"range", {p.step_lo_s, p.step_hi_s}},
        {"validated_region", p.outside.empty()},
        {"outside_validated_region", p.outside}}},
      {"time_breakdown_s", time_breakdown_json(p)},
      {"throughput",
       {{"tokens_per_s", p.tokens_per_s},
        {"mfu", p.mfu},
        {"hfu", p.hfu},
        {"flops_per_step_per_rank", p.flops_per_rank}}},
      {"fits", p.fits}};
  if (!p.phases.empty()) j["phases"] = phases_json(p.phases);  // as a run's results[].phases
  return j;
}

json prediction_document(const PredictConfig& cfg, const Cluster& cluster,
                         const std::vector<json>& results, const json& knobs) {
  const bool llama = cfg.model->config.arch == ArchKind::kLlama;
  return json{{"schema_version", kSchemaVersion},
              {"suite", "shardbench"},
              {"kind", "prediction"},
              {"created_utc", utc_now_iso()},
              {"git_commit", git_commit()},
              {"config", predict_config_json(cfg, knobs)},
              {"cluster", cluster_json(cluster)},
              {"formulas",
               {{"activations", llama ? llama_activation_formula() : activation_formula()},
                {"cross_entropy", cross_entropy_formula()},
                {"bf16_operands", llama ? llama_bf16_operand_formula() : bf16_operand_formula()},
                {"flops", cfg.model->bare ? "6*params*tokens" : flop_formula(cfg.model->config)},
                {"hardware_flops", cfg.model->bare ? "6*params*tokens"
                                                   : hardware_flop_formula(cfg.model->config)},
                {"step_time",
                 "a dry run of the strategy's step on a simulated device and backend: each "
                 "kernel by kernel_cost.h (GEMM flops / (peak * gemm_ceiling * tile and wave "
                 "quantisation of its shape), fused attention at flash_fwd/flash_bwd of peak, "
                 "memory-bound bytes / (memory_bw_bytes_per_s * mem_bw_fraction), ZeRO++ "
                 "quantiser passes at kernels.(de)quantize_elems_per_s or memory-bound, at least "
                 "launch_s; on the SMs a running collective leaves; clusters without a kernel "
                 "model: flops / (peak * compute_efficiency)), times max(1, world / host_cores); "
                 "range = predicted / (1 + u) .. predicted * (1 + u); each collective = "
                 "ring steps * alpha + bytes / (bw * comm_efficiency) of its slowest hop class, "
                 "on one communication stream from max(issue, stream free); predicted = the "
                 "simulated step, waits included; total_no_overlap = compute + comm"}}},
              {"results", results}};
}

json prediction_residuals(const json& predicted, const json& result) {
  auto at = [](const json& j, std::initializer_list<const char*> path) -> json {
    const json* x = &j;
    for (const char* k : path) {
      if (!x->is_object() || !x->contains(k)) return nullptr;
      x = &(*x)[k];
    }
    return *x;
  };
  // Each quantity: measured − predicted (the residual) and measured / predicted (1 = exact).
  json r = {{"definition", "residual = measured - predicted; ratio = measured / predicted"}};
  auto add = [&](const std::string& name, const json& measured, const json& model) {
    if (!measured.is_number() || !model.is_number()) return;
    const double m = measured.get<double>(), p = model.get<double>();
    r["residual"][name] = m - p;
    r["ratio"][name] = p != 0 ? json(m / p) : json(m == 0 ? 1.0 : 0.0);
  };
  add("peak_bytes_per_rank", at(result, {"memory", "peak_bytes_per_rank"}),
      at(predicted, {"memory", "peak_bytes_per_rank"}));
  for (const char* k : {"params", "grads", "optimizer"})
    add(std::string("model_state_") + k, at(result, {"memory", "model_state_bytes_per_rank", k}),
        at(predicted, {"memory", "model_state_bytes_per_rank", k}));
  for (const char* k : {"payload_bytes", "sent_bytes_intra", "sent_bytes_inter"})
    add(k, at(result, {"comm", "per_step", k}), at(predicted, {"comm", "per_step", k}));
  add("step_time_s", at(result, {"step_time_s", "median"}),
      at(predicted, {"step_time_s", "predicted"}));
  return r;
}

json predict_for_run(const RunConfig& run, const Topology& topo, const std::string& strategy,
                     const Cluster& cluster) {
  const PredictConfig cfg = predict_config_for(run, topo);
  // Bytes from ring_model_sent on the run's own topology (O(world^2) per collective); the
  // closed forms, pinned equal to it by the tests, for large consecutive-node jobs.
  bool consecutive = true;
  for (int r = 0; r < topo.world_size(); ++r)
    consecutive = consecutive && topo.node_of(r) == r / topo.ranks_per_node();
  const bool ring = topo.world_size() <= 64 || !consecutive;
  json j = prediction_json(predict(cfg, strategy, cluster, ring ? &topo : nullptr));
  j["cluster"] = cluster.name;
  return j;
}

}  // namespace sb
