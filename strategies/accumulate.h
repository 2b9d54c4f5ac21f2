// Gradient reductions shared by several strategies: accumulation into a kept buffer (FSDP
// without no_sync, ZeRO-2, ZeRO-3: dst += src in the gradient dtype, summed in fp32 and rounded
// once for bf16, as torch's add_ on bf16), and retiring units' reductions in issue order (FSDP,
// FSDP2, MiCS per unit).
#pragma once

#include <cstddef>
#include <deque>

#include "harness/common/dtype.h"
#include "harness/device/device.h"
#include "harness/memory/tracker.h"

namespace sb {

// dst += src, n elements of dtype t on the device; bf16 goes through fp32 workspace.
void add_grads(Device& device, MemoryTracker& memory, void* dst, const void* src, size_t n,
               DType t);

// Retires, oldest first, the units in `reducing` whose reduction (their `reduce` handle) has
// finished, or every one, waiting, when `all`; `land(unit)` then frees what it held.
template <class Units, class Land>
void reap_units(std::deque<int>& reducing, Units& units, bool all, Land land) {
  while (!reducing.empty()) {
    auto& unit = units[reducing.front()];
    if (!all && !unit.reduce.done()) break;
    unit.reduce.wait();
    land(unit);
    reducing.pop_front();
  }
}

}  // namespace sb
