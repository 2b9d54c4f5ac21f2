// The sample generator behind make_batch: a counter-based hash, so sample s is computed
// directly from (seed, s) without generating the samples before it.
#include "harness/model/data.h"

#include "harness/common/hash.h"

#include "harness/common/check.h"

namespace sb {
namespace {

uint64_t hash(uint64_t seed, uint64_t sample, uint64_t salt = 0) {
  return splitmix64(splitmix64(seed ^ 0xda7a5eedull) ^ splitmix64(sample * 2 + 1) ^
                    splitmix64(salt + 0x51));
}

}  // namespace

void make_batch(uint64_t seed, uint64_t first_sample, int batch, int seq_len, int vocab,
                int* tokens, int* targets) {
  SB_CHECK(batch > 0 && seq_len > 0 && vocab > 1,
           "make_batch: batch " << batch << ", seq_len " << seq_len << ", vocab " << vocab);
  for (int b = 0; b < batch; ++b) {
    const uint64_t s = first_sample + uint64_t(b);
    const uint64_t v = uint64_t(vocab);
    uint64_t x = hash(seed, s) % v;
    const uint64_t stride = 1 + hash(seed, s, 1) % 7;
    for (int j = 0; j < seq_len; ++j) {
      const uint64_t next = (x + stride) % v;
      tokens[size_t(b) * seq_len + j] = int(x);
      targets[size_t(b) * seq_len + j] = int(next);
      x = next;
    }
  }
}

}  // namespace sb
