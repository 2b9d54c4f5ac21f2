// The prediction of one (model, strategy, shape, cluster): the walk for memory and bytes,
// then the step-time model; and the fit search (see header).
#include "harness/predict/predict.h"

#include <algorithm>
#include <stdexcept>

#include "harness/predict/walk.h"

namespace sb {

Prediction predict(const PredictConfig& cfg, const std::string& strategy, const Cluster& cluster,
                   const Topology* topo) {
  const StrategyEntry* entry = find_strategy(strategy);
  if (entry == nullptr) throw std::invalid_argument("--strategies: unknown strategy " + strategy);
  if (!cfg.model) throw std::invalid_argument("predict: no model");
  const int N = topo ? topo->world_size() : cfg.world;
  const int G = topo ? topo->ranks_per_node() : cfg.ranks_per_node;
  if (N < 1 || G < 1 || N % G != 0)
    throw std::invalid_argument("--world " + std::to_string(N) +
                                ": must be a whole number of nodes of --ranks-per-node " +
                                std::to_string(G));
  const ModelShape& shape = *cfg.model;
  Prediction p;
  p.strategy = strategy;
  p.description = entry->description;

  // Memory and bytes: one walk of setup + one step.
  MemWalk mem;
  TrafficAccount traffic = topo ? TrafficAccount(*topo, cluster) : TrafficAccount(N, G, cluster);
  WalkEnv env{shape, p.description, cfg.options, N, G, mem, traffic};
  const uint64_t acts = shape.bare ? 0 : activation_bytes(shape.config, cfg.batch_per_rank);
  std::unique_ptr<StrategyWalk> walk = make_walk(env);
  const bool bf16_matmuls = env.bf16() && cluster.bf16_matmul && !shape.bare;
  walk_training_step(*walk, env, acts,
                     bf16_matmuls ? bf16_operand_bytes(shape.config, cfg.batch_per_rank) : 0);
  p.padded_params = walk->padded_params();
  p.state_params = mem.cur[int(MemCategory::kParams)];
  p.state_grads = mem.cur[int(MemCategory::kGrads)];
  p.state_optimizer = mem.cur[int(MemCategory::kOptimizer)];
  p.activations = acts;
  p.model_state_only = shape.bare;
  if (shape.bare) {  // no architecture: the model state is all that is known
    p.peak = p.state_params + p.state_grads + p.state_optimizer;
    p.at_peak = MemBreakdown{};
    p.at_peak[int(MemCategory::kParams)] = p.state_params;
    p.at_peak[int(MemCategory::kGrads)] = p.state_grads;
    p.at_peak[int(MemCategory::kOptimizer)] = p.state_optimizer;
  } else {
    p.peak = mem.peak;
    p.at_peak = mem.at_peak;
  }
  p.limit_bytes =
      cfg.mem_limit_gb > 0 ? cfg.mem_limit_gb * double(1ull << 30) : cluster.memory_per_rank(N);
  p.fits = double(p.peak) <= p.limit_bytes;
  p.traffic = traffic.finish();

  // Step time: compute = FLOPs / (peak x efficiency), slowed when ranks share fewer cores;
  // communication = the alpha-beta sum of the step's collectives (traffic.cc). With overlap,
  // what runs during forward/backward hides behind compute; the exposed part adds.
  const bool bf16 = cfg.options.precision == Precision::kBf16Mixed;
  const uint64_t tokens = uint64_t(cfg.batch_per_rank) * uint64_t(shape.config.seq_len);
  p.flops_per_rank = predict_flops(shape, tokens);
  const double rate = cluster.peak_flops(bf16) * cluster.compute_efficiency;
  p.compute_s = p.flops_per_rank / rate * cluster.oversubscription(N);
  p.comm_s = p.traffic.comm_s;
  p.exposed_s = p.traffic.exposed_s;
  p.total_no_overlap_s = p.compute_s + p.comm_s;
  // Overlap needs idle hardware for the communication: where ranks outnumber cores (the
  // oversubscribed CPU case) the comm thread's copies and polling take the same cores as the
  // compute, so nothing hides and the step is the sum.
  p.total_overlap_s = cluster.oversubscription(N) > 1.0
                          ? p.total_no_overlap_s
                          : std::max(p.compute_s, p.comm_s - p.exposed_s) + p.exposed_s;
  p.step_s = cfg.options.overlap ? p.total_overlap_s : p.total_no_overlap_s;
  if (p.step_s > 0) {
    p.tokens_per_s = double(tokens) * N / p.step_s;
    p.mfu = p.flops_per_rank / p.step_s / cluster.peak_flops(bf16);
  }
  return p;
}

FitResult smallest_fitting_world(PredictConfig cfg, const std::string& strategy,
                                 const Cluster& cluster, int max_world) {
  FitResult r;
  r.strategy = strategy;
  const int G = std::max(1, cfg.ranks_per_node);
  auto try_world = [&](int n) {
    cfg.world = n;
    cfg.ranks_per_node = n < G ? n : G;
    return predict(cfg, strategy, cluster);
  };
  // Within one node, rank by rank; then whole nodes: doubling, then bisection (memory per
  // rank does not grow with the world: shards only get smaller).
  for (int n = 1; n < G && n <= max_world; ++n) {
    Prediction p = try_world(n);
    if (p.fits) return {strategy, n, p};
  }
  const int max_nodes = max_world / G;
  if (max_nodes < 1) return r;
  int lo = 0, hi = 1;  // nodes: lo does not fit (0 = none tried), hi is the candidate
  Prediction at_hi = try_world(G);
  while (!at_hi.fits && hi < max_nodes) {
    lo = hi;
    hi = std::min(max_nodes, hi * 2);
    at_hi = try_world(hi * G);
  }
  if (!at_hi.fits) return r;
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    Prediction p = try_world(mid * G);
    if (p.fits) {
      hi = mid;
      at_hi = p;
    } else {
      lo = mid;
    }
  }
  return {strategy, hi * G, at_hi};
}

nlohmann::json predict_for_run(const RunConfig& run, const Topology& topo,
                               const std::string& strategy, const Cluster& cluster) {
  PredictConfig cfg;
  cfg.model = model_shape(run.model);
  cfg.world = topo.world_size();
  cfg.ranks_per_node = topo.ranks_per_node();
  cfg.batch_per_rank = run.batch_per_rank;
  cfg.options = run.options;
  cfg.mem_limit_gb = run.mem_limit_gb;
  // Bytes from ring_model_sent on the run's own topology (O(world^2) per collective); the
  // closed forms, pinned equal to it by the tests, for large consecutive-node jobs.
  bool consecutive = true;
  for (int r = 0; r < topo.world_size(); ++r)
    consecutive = consecutive && topo.node_of(r) == r / topo.ranks_per_node();
  const bool ring = topo.world_size() <= 64 || !consecutive;
  nlohmann::json j = prediction_json(predict(cfg, strategy, cluster, ring ? &topo : nullptr));
  j["cluster"] = cluster.name;
  return j;
}

}  // namespace sb
