// Gradient accumulation into a kept buffer, shared by the strategies that reduce every
// micro-batch and sum the reduced results (FSDP without no_sync, ZeRO-2, ZeRO-3): dst += src in
// the gradient dtype, summed in fp32 and rounded once for bf16 (as torch's add_ on bf16).
#pragma once

#include <cstddef>

#include "harness/common/dtype.h"
#include "harness/device/device.h"
#include "harness/memory/tracker.h"

namespace sb {

// dst += src, n elements of dtype t on the device; bf16 goes through fp32 workspace.
void add_grads(Device& device, MemoryTracker& memory, void* dst, const void* src, size_t n,
               DType t);

}  // namespace sb
