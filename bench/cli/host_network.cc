#include "bench/cli/host_network.h"

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

namespace sb {

std::optional<nlohmann::json> hosts_network_from_env() {
  const char* path = std::getenv("SB_HOSTS_NETWORK");
  if (!path || !*path) return std::nullopt;
  std::ifstream f(path);
  nlohmann::json j = f ? nlohmann::json::parse(f, nullptr, false) : nlohmann::json();
  if (!j.is_object() || !j.contains("achieved_bytes_per_s") || !j.contains("rtt_s") ||
      !j["achieved_bytes_per_s"].is_number() || !j["rtt_s"].is_number() ||
      j["achieved_bytes_per_s"].get<double>() <= 0)
    throw std::runtime_error(std::string("SB_HOSTS_NETWORK=") + path +
                             ": not the measured network of ci/two_host.sh (needs "
                             "achieved_bytes_per_s > 0 and rtt_s)");
  return j;
}

LinkClass measured_inter_link(const nlohmann::json& network) {
  LinkClass l{network["achieved_bytes_per_s"].get<double>(), network["rtt_s"].get<double>() / 2,
              false};
  // The hosts' TCP runs on this one machine's cores: what every unshaped path moved at once is
  // what all hosts' links move together (older files without it: no shared limit).
  const auto it = network.find("unshaped_bytes_per_s");
  if (it != network.end() && it->is_number() && it->get<double>() > 0)
    l.fabric_bytes_per_s = it->get<double>();
  const auto one = network.find("unshaped_stream_bytes_per_s");
  if (one != network.end() && one->is_number() && one->get<double>() > 0)
    l.stream_bytes_per_s = one->get<double>();
  return l;
}

}  // namespace sb
