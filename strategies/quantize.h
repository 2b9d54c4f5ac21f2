// Block-wise symmetric quantisation as ZeRO++ puts it on the wire: qwZ's int8 parameter shards
// (DeepSpeed 0.19.6 partition_parameters.py CUDAQuantizer.quantize, 8 bits, Symmetric) and qgZ's
// int4 gradient partitions (strategies/qgz.h). csrc/includes/quantization_utils.h
// Params<Symmetric, bits>: per block, scale = absmax / 2^(bits-1) (fp32, what the kernel stores),
// code = clamp(round(v / scale), -2^(bits-1), 2^(bits-1) - 1). The codes and scales travel; the
// receiver dequantises code · scale. Host arithmetic: the device's data is staged.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/common/dtype.h"
#include "harness/device/device.h"
#include "harness/memory/host_scratch.h"

namespace sb {

// CUDAQuantizer.quantize's block count for a shard of n elements: start at ceil(n / 8000), step
// up until 8·blocks divides n, then double while 16·blocks divides n and blocks stay over 8000
// elements. Where DeepSpeed asserts (n not a multiple of 8: the search reaches n), the suite
// keeps ceil(n / 8000) blocks, the last one shorter (see quant_block_len).
uint64_t qwz_blocks(uint64_t n);
// Elements per block (the last block holds the rest).
inline uint64_t quant_block_len(uint64_t n, uint64_t blocks) { return (n + blocks - 1) / blocks; }

// Device memory of dtype t (fp32 or bf16) to host fp32, and back.
// n elements of dtype t at src (device memory) as fp32 on the host: into `out`, or a new vector.
void device_to_f32(Device& device, const void* src, DType t, uint64_t n, float* out);
HostVector<float> device_to_f32(Device& device, const void* src, DType t, uint64_t n);
void f32_to_device(Device& device, const float* v, uint64_t n, void* dst, DType t);
inline void f32_to_device(Device& device, const std::vector<float>& v, void* dst, DType t) {
  f32_to_device(device, v.data(), v.size(), dst, t);
}

// Host arithmetic, any width: v[0..n) in `blocks` blocks (quant_block_len), symmetric `bits`-bit
// codes (-2^(bits-1) .. 2^(bits-1)-1, one int8 per element) and one fp32 scale per block (the
// dequantised value is code · scale).
void quantize_symmetric(const float* v, uint64_t n, uint64_t blocks, int bits, int8_t* codes,
                        float* scales);
// 4-bit codes two to a byte (element 2k in the low nibble), as they travel: (n + 1) / 2 bytes.
void pack_int4(const int8_t* codes, uint64_t n, uint8_t* packed);
void unpack_int4(const uint8_t* packed, uint64_t n, int8_t* codes);

// qgZ's two host passes (strategies/qgz.h), one function each so that the launcher's
// calibration times the loops the step runs (QuantPass::kQuantizeInt4, kDequantizeInt4Sum).
// `slots` partitions of `part` elements (part even) at parts[s·part], each in `groups` groups of
// 4-bit symmetric codes: packed (slots·part / 2 bytes, partition s at s·part / 2) and scales
// (slots·groups, partition s at s·groups).
void quantize_int4_parts(const float* parts, uint64_t slots, uint64_t part, uint64_t groups,
                         uint8_t* packed, float* scales);
// The element-wise sum over `blocks` blocks of `slots` such partitions each (block b's slot s at
// b·slots + s): slots·part floats, partition s at s·part.
HostVector<float> dequantize_int4_sum(const uint8_t* packed, const float* scales,
                                       uint64_t blocks, uint64_t slots, uint64_t part,
                                       uint64_t groups);

// Quantises n elements of `src` (device memory, dtype t) into `codes` (n int8) and `scales`
// (blocks fp32), both device memory. Nothing happens on a device that holds no data.
void quantize_int8(Device& device, const void* src, DType t, uint64_t n, uint64_t blocks,
                   void* codes, void* scales);
// The inverse for `ranks` consecutive (codes, scales) blocks of n elements each, into `dst`
// (ranks · n elements of dtype t).
void dequantize_int8(Device& device, const void* codes, const void* scales, uint64_t n,
                     uint64_t blocks, uint64_t ranks, void* dst, DType t);

}  // namespace sb
