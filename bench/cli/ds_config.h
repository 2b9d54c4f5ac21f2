// `--ds-config FILE`: a DeepSpeed config JSON read into the run's knobs, as DeepSpeed 0.19.6
// (deepspeed/runtime/zero/config.py) would configure ZeRO from it. It owns the key tables
// (modelled, accepted but not modelled, refused) and the checks; it does not run anything.
#pragma once

#include <string>
#include <vector>

#include "harness/train/train_loop.h"

namespace sb {

struct DsConfig {
  int stage = 0;  // zero_optimization.stage: 1, 2 or 3
  RunConfig applied;  // the run's config with the file's knobs set (see apply_ds_config)
};

// Reads and checks FILE against the run config the flags made; throws UsageError naming the
// key and what is allowed (exit 2). Keys accepted but not modelled are listed in
// applied.ds_config_ignored.
DsConfig read_ds_config(const std::string& path, const RunConfig& from_flags);

// The strategies a ds-config selects: --strategies all -> zero<stage>; otherwise the list as
// given, where every zero strategy must be of the file's stage.
std::vector<std::string> ds_config_strategies(int stage, const std::vector<std::string>& listed,
                                              bool all);

}  // namespace sb
