// --ddp-config parsing (see header). Keys and defaults are DistributedDataParallel's in
// torch 1.13.1 (torch/nn/parallel/distributed.py, DistributedDataParallel.__init__).
#include "bench/cli/ddp_config.h"

#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/cli/run_options.h"

namespace sb {
namespace {

// Constructor arguments that change no byte or buffer the suite counts for this model (one
// device, dense grads, every parameter used, no buffers to broadcast).
const std::set<std::string> kIgnoredKeys = {"find_unused_parameters", "broadcast_buffers",
                                            "static_graph", "check_reduction", "dim",
                                            "output_device", "device_ids"};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw UsageError(fmt::format("--ddp-config {}: {}", path, what));
}

double positive_mb(const std::string& path, const nlohmann::json& v, const char* key) {
  if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > (1 << 20))
    fail(path, fmt::format("key {}: {}: allowed a number of MiB in (0, 1048576]", key, v.dump()));
  return v.get<double>();
}

bool boolean(const std::string& path, const nlohmann::json& v, const char* key) {
  if (!v.is_boolean()) fail(path, fmt::format("key {}: {}: allowed true|false", key, v.dump()));
  return v.get<bool>();
}

}  // namespace

void parse_ddp_config(const std::string& path, StrategyOptions::Ddp& out) {
  std::ifstream in(path);
  if (!in) fail(path, "cannot read the file");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(path, "not valid JSON");
  if (!j.is_object()) fail(path, "allowed a JSON object of DistributedDataParallel arguments");
  for (const auto& [key, v] : j.items()) {
    if (key == "bucket_cap_mb") {
      out.bucket_cap_mb = positive_mb(path, v, "bucket_cap_mb");
    } else if (key == "first_bucket_mb") {  // dist._DEFAULT_FIRST_BUCKET_BYTES, in MiB
      out.first_bucket_mb = positive_mb(path, v, "first_bucket_mb");
    } else if (key == "gradient_as_bucket_view") {
      out.gradient_as_bucket_view = boolean(path, v, "gradient_as_bucket_view");
    } else if (key == "bf16_params") {  // the model cast to bf16 before wrapping
      out.bf16_params = boolean(path, v, "bf16_params");
    } else if (kIgnoredKeys.count(key)) {
      out.ignored.push_back(key);
    } else {
      fail(path, fmt::format("unknown key {}: allowed bucket_cap_mb, first_bucket_mb, "
                             "gradient_as_bucket_view, bf16_params (modelled), {} (ignored)",
                             key, fmt::join(kIgnoredKeys, ", ")));
    }
  }
}

}  // namespace sb
