// --ddp-config FILE: the DistributedDataParallel constructor arguments that change what DDP
// moves or keeps (JSON object), into StrategyOptions::Ddp. Unknown keys are errors naming the
// key; DDP arguments the suite accepts but does not model are listed as ignored.
#pragma once

#include <string>

#include "strategies/strategy.h"

namespace sb {

// Throws UsageError ("--ddp-config FILE: key K: ...") on unreadable files, bad JSON, unknown
// keys and values outside what each key allows.
void parse_ddp_config(const std::string& path, StrategyOptions::Ddp& out);

}  // namespace sb
