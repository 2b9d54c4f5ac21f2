// Shared set-up of the multi-rank strategy tests: one communicator per process (ring backend,
// counted bytes), the CPU device, a RunConfig of the test model (tiny, or --model=SPEC) whose
// global batch does not depend on the world size, and an independent 1-rank reference
// training loop (no strategy code).
#pragma once

#include <cmath>
#include <memory>
#include <vector>

#include "harness/comm/communicator.h"
#include "harness/comm/mpi_runtime.h"
#include "harness/device/device.h"
#include "harness/launch/trainer.h"
#include "harness/model/data.h"
#include "harness/model/gpt.h"
#include "tests/mpi/mpi_env.h"

namespace sb::testing {

struct RunEnv {
  Topology topo;
  Ledger ledger;
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> comm;
};

inline RunEnv& run_env() {
  static RunEnv* env = [] {
    auto* e = new RunEnv;
    e->topo = test_topology();
    e->device = make_cpu_device();
    e->comm = std::make_unique<Communicator>(
        e->topo, make_mpi_backend(e->topo, CollectiveImpl::kRing), e->ledger,
        make_mpi_backend(e->topo, CollectiveImpl::kRing));  // the side comm stream's
    return e;
  }();
  return *env;
}

// The same global batch at every world size that divides it: 4 sequences (1, 2, 4 ranks), 3 at
// a world of 3, so the reference run sees what the strategies see.
inline int global_batch() { return run_env().topo.world_size() == 3 ? 3 : 4; }

// The test model (--model=SPEC, default tiny) as a RunConfig with the global batch split evenly.
inline RunConfig tiny_config(Precision p = Precision::kFp32, int steps = 5) {
  RunConfig c;
  c.model = parse_model(g_model_spec);
  c.batch_per_rank = global_batch() / run_env().topo.world_size();
  c.steps = steps;
  c.warmup = 0;
  c.options.precision = p;
  c.options.adamw.lr = 3e-3f;
  return c;
}

inline StrategyRun run(const std::string& name, const RunConfig& cfg, bool keep_params = true) {
  RunEnv& e = run_env();
  return run_strategy(name, cfg, *g_runtime, *e.comm, *e.device, keep_params);
}

// Plain full-batch training on one rank: full fp32 params, AdamW per tensor. Independent of
// every strategy, bucket, shard and collective.
struct Reference {
  std::vector<double> loss;
  std::vector<float> params;  // ModelLayout tensor order
};

class FullParamHooks : public ModelHooks {
 public:
  explicit FullParamHooks(const ModelLayout& l, uint64_t seed) {
    for (size_t t = 0; t < l.tensors.size(); ++t) {
      p.emplace_back(l.tensors[t].numel);
      g.emplace_back(l.tensors[t].numel, 0.0f);
      init_tensor_range(l, int(t), 0, l.tensors[t].numel, seed, p.back().data());
    }
  }
  const float* param(int t) override { return p[t].data(); }
  float* grad(int t) override { return g[t].data(); }
  std::vector<std::vector<float>> p, g;
};

// The initial parameters (ModelLayout tensor order), as every strategy and the reference start.
inline std::vector<float> initial_params(const RunConfig& cfg) {
  const ModelLayout l = make_layout(cfg.model);
  std::vector<float> out;
  for (size_t t = 0; t < l.tensors.size(); ++t) {
    std::vector<float> x(l.tensors[t].numel);
    init_tensor_range(l, int(t), 0, x.size(), cfg.options.seed, x.data());
    out.insert(out.end(), x.begin(), x.end());
  }
  return out;
}

inline Reference reference_run(const RunConfig& cfg, int global_batch, int steps) {
  auto dev = make_cpu_device();
  MemoryTracker mem(dev->allocator());
  GptModel model(cfg.model, global_batch, *dev, mem);
  const ModelLayout& l = model.layout();
  FullParamHooks h(l, cfg.options.seed);
  std::vector<std::vector<float>> m, v;
  for (auto& x : h.p) m.emplace_back(x.size(), 0.0f), v.emplace_back(x.size(), 0.0f);
  std::vector<int> tok(size_t(global_batch) * cfg.model.seq_len), tgt(tok.size());
  Reference ref;
  const auto& a = cfg.options.adamw;
  for (int s = 0; s < steps; ++s) {
    make_batch(cfg.options.seed, uint64_t(s) * global_batch, global_batch, cfg.model.seq_len,
               cfg.model.vocab, tok.data(), tgt.data());
    ref.loss.push_back(model.forward(tok.data(), tgt.data(), h));
    model.backward(h);
    for (size_t t = 0; t < h.p.size(); ++t) {
      dev->adamw(h.p[t].data(), h.g[t].data(), m[t].data(), v[t].data(), h.p[t].size(), a.lr,
                 a.beta1, a.beta2, a.eps, l.tensors[t].decay ? a.weight_decay : 0.0f, s + 1, 1.0f);
      std::fill(h.g[t].begin(), h.g[t].end(), 0.0f);
    }
  }
  for (auto& x : h.p) ref.params.insert(ref.params.end(), x.begin(), x.end());
  return ref;
}

inline double rel_norm_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return a.size() != b.size() ? 1e30 : std::sqrt(d / std::max(n, 1e-300));
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  return d;
}

}  // namespace sb::testing
