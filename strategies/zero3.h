// ZeRO-3's policy over a shard group of the caller's choosing (strategies/zero3.cc): the world
// for zero3; MiCS's partition group, with the replica all-reduce, for mics (strategies/mics.cc).
#pragma once

#include <memory>

#include "strategies/strategy.h"

namespace sb {

// d.shard_group partitions every tensor; d.replicate_across_nodes adds the all-reduce of the grad
// partitions over GroupKind::kReplica at the accumulation boundary.
std::unique_ptr<Strategy> make_zero3(StrategyContext c, StrategyDescription d);
// FSDP2-style MiCS (strategies/fsdp2.cc): per unit, release after forward, re-gather in backward.
std::unique_ptr<Strategy> make_mics_per_unit(StrategyContext c);
// MiCS's registry entry (strategies/mics.cc), after fsdp2's.
void register_mics(std::vector<StrategyEntry>& out);

}  // namespace sb
