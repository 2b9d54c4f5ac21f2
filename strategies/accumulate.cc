// dst += src for gradient accumulation (see accumulate.h).
#include "strategies/accumulate.h"

#include "harness/memory/typed_buffer.h"

namespace sb {

void add_grads(Device& device, MemoryTracker& memory, void* dst, const void* src, size_t n,
               DType t) {
  if (t == DType::kF32) {
    device.add_inplace(static_cast<float*>(dst), static_cast<const float*>(src), n);
    return;
  }
  // torch's add_ on bf16 sums in fp32 registers (aten's opmath type): no fp32 tensors (Held::kNone).
  TrackedBuffer<float> a(memory, MemCategory::kWorkspace, n, Held::kNone),
      b(memory, MemCategory::kWorkspace, n, Held::kNone);
  device.bf16_to_f32(a.data(), static_cast<const uint16_t*>(dst), n);
  device.bf16_to_f32(b.data(), static_cast<const uint16_t*>(src), n);
  device.add_inplace(a.data(), b.data(), n);
  device.f32_to_bf16(static_cast<uint16_t*>(dst), a.data(), n);
}

}  // namespace sb
