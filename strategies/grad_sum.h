// Gradient accumulation's one arithmetic step, shared by the strategies that accumulate reduced
// gradient shards across micro-batches: dst += src in the stored dtype, summed in fp32 and
// rounded once for bf16 (workspace counted).
#pragma once

#include <cstddef>

#include "harness/common/dtype.h"
#include "harness/device/device.h"
#include "harness/memory/tracker.h"

namespace sb {

void add_stored(Device& device, MemoryTracker& memory, void* dst, const void* src, size_t n,
                DType dtype);

}  // namespace sb
