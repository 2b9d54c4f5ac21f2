// Block-wise symmetric int8 quantisation of a parameter shard, as ZeRO++'s qwZ puts it on the
// wire (DeepSpeed 0.19.6 partition_parameters.py CUDAQuantizer.quantize, 8 bits, Symmetric;
// csrc/includes/quantization_utils.h Params<Symmetric>): per block, scale = absmax / 2^(bits-1)
// (fp32, what the kernel stores), code = clamp(round(v / scale), -128, 127). The codes and scales
// travel; the receiver dequantises code · scale. Host arithmetic: the device's data is staged.
#pragma once

#include <cstdint>

#include "harness/common/dtype.h"
#include "harness/device/device.h"

namespace sb {

// CUDAQuantizer.quantize's block count for a shard of n elements: start at ceil(n / 8000), step
// up until 8·blocks divides n, then double while 16·blocks divides n and blocks stay over 8000
// elements. Where DeepSpeed asserts (n not a multiple of 8: the search reaches n), the suite
// keeps ceil(n / 8000) blocks, the last one shorter (see quant_block_len).
uint64_t qwz_blocks(uint64_t n);
// Elements per block (the last block holds the rest).
inline uint64_t quant_block_len(uint64_t n, uint64_t blocks) { return (n + blocks - 1) / blocks; }

// Quantises n elements of `src` (device memory, dtype t) into `codes` (n int8) and `scales`
// (blocks fp32), both device memory. Nothing happens on a device that holds no data.
void quantize_int8(Device& device, const void* src, DType t, uint64_t n, uint64_t blocks,
                   void* codes, void* scales);
// The inverse for `ranks` consecutive (codes, scales) blocks of n elements each, into `dst`
// (ranks · n elements of dtype t).
void dequantize_int8(Device& device, const void* codes, const void* scales, uint64_t n,
                     uint64_t blocks, uint64_t ranks, void* dst, DType t);

}  // namespace sb
