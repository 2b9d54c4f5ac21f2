// --ddp-config parsing (see header). Keys and defaults are DistributedDataParallel's in
// torch 1.13.1 (torch/nn/parallel/distributed.py, DistributedDataParallel.__init__).
#include "bench/cli/ddp_config.h"

#include <set>

#include "bench/cli/json_config.h"

namespace sb {
namespace {

// Constructor arguments that change no byte or buffer the suite counts for this model (one
// device, dense grads, every parameter used, no buffers to broadcast).
const std::set<std::string> kIgnoredKeys = {"find_unused_parameters", "broadcast_buffers",
                                            "static_graph", "check_reduction", "dim",
                                            "output_device", "device_ids"};

}  // namespace

void parse_ddp_config(const std::string& path, StrategyOptions::Ddp& out) {
  const JsonConfigFile f("--ddp-config", path, "DistributedDataParallel arguments");
  const char* mib = "a number of MiB in (0, 1048576]";
  for (const auto& [key, v] : f.root().items()) {
    if (key == "bucket_cap_mb") {
      out.bucket_cap_mb = f.number_in(v, key, 0, 1 << 20, mib);
    } else if (key == "first_bucket_mb") {  // dist._DEFAULT_FIRST_BUCKET_BYTES, in MiB
      out.first_bucket_mb = f.number_in(v, key, 0, 1 << 20, mib);
    } else if (key == "gradient_as_bucket_view") {
      out.gradient_as_bucket_view = f.boolean(v, key);
    } else if (key == "bf16_params") {  // the model cast to bf16 before wrapping
      out.bf16_params = f.boolean(v, key);
    } else if (kIgnoredKeys.count(key)) {
      out.ignored.push_back(key);
    } else {
      f.unknown_key(key, {"bucket_cap_mb", "first_bucket_mb", "gradient_as_bucket_view",
                          "bf16_params"}, kIgnoredKeys);
    }
  }
}

}  // namespace sb
