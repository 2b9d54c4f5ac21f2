// Deterministic synthetic training data: each global sample index maps to one learnable
// sequence (an arithmetic progression mod V with a per-sample stride), so any world size and
// any split of the global batch over ranks sees the same samples. No files, no tokenizer.
#pragma once

#include <cstdint>

namespace sb {

// Fills tokens/targets [batch, seq_len] with samples first_sample .. first_sample+batch-1.
// Sample s is x_0..x_T, x_0 = hash(seed, s) % V, x_{j+1} = (x_j + stride_s) % V with
// stride_s = 1 + hash(seed, s, 1) % 7; inputs are x_0..x_{T-1}, targets x_1..x_T. The stride is
// visible from the context, so a model can drive the loss well below ln(V).
void make_batch(uint64_t seed, uint64_t first_sample, int batch, int seq_len, int vocab,
                int* tokens, int* targets);

// The first global sample of rank `rank` (of `world`, `batch` per rank) at step `step`: every
// step consumes one global batch of world*batch samples, split over ranks in rank order.
inline uint64_t first_sample_of(uint64_t step, int world, int rank, int batch) {
  return step * uint64_t(world) * uint64_t(batch) + uint64_t(rank) * uint64_t(batch);
}

}  // namespace sb
