// The network a `--hosts netns` run ran on, as ci/two_host.sh measured it before the job (a
// timed transfer per inter-host path, round trips on the idle link): the results' topology,
// and the inter-node link the run's embedded prediction uses, so both refer to the same network.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "harness/predict/cluster.h"

namespace sb {

// The JSON file named by SB_HOSTS_NETWORK (set for every rank by ci/two_host.sh); nullopt when
// the variable is unset (not a --hosts netns run). Throws std::runtime_error naming the file
// when it cannot be read or lacks the measured keys.
std::optional<nlohmann::json> hosts_network_from_env();

// The measured link as the predictor's inter-node class: the payload rate of the slowest path,
// half the round trip as the per-step latency, shared by the host's ranks (per_rank = false:
// tbf shapes the host's one veth, whatever its ranks send), and the unshaped veth's rate as
// the fabric all hosts share (their TCP runs on the same cores).
LinkClass measured_inter_link(const nlohmann::json& network);

}  // namespace sb
