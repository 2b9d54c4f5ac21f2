// --fsdp-config FILE: the FullyShardedDataParallel constructor arguments that change what FSDP
// moves or keeps (JSON object), read into the run's FSDP knobs with FSDP's own defaults where the
// file is silent. Unknown or unsupported keys are errors naming the key; arguments the suite
// accepts but does not model are listed as ignored (config.fsdp_config_ignored).
#pragma once

#include <string>
#include <vector>

#include "strategies/strategy.h"

namespace sb {

// Throws UsageError ("--fsdp-config FILE: key K: ..."). Sets precision, backward_prefetch,
// forward_prefetch, limit_all_gathers, fsdp_use_orig_params and o.fsdp_config.
void read_fsdp_config(const std::string& path, StrategyOptions& o);

// The strategies a run with --fsdp-config runs: `listed` (every fsdp_* in it must be the file's
// `strategy`), or, for --strategies all, `listed` (the --ds-config stage's, or empty) plus it.
std::vector<std::string> fsdp_config_strategies(const std::string& strategy,
                                                std::vector<std::string> listed, bool all);

}  // namespace sb
