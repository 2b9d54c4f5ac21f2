// libFuzzer target: the model preset/spec parser must accept or reject any string with an
// std::invalid_argument, never crash, hang or return an invalid config, as either block
// (the first byte chooses --arch: odd = llama).
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "harness/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string spec(reinterpret_cast<const char*>(data), size);
  const char* arch = size > 0 && (data[0] & 1) ? "llama" : "";
  try {
    const sb::GptConfig c = sb::parse_model(spec, arch);
    sb::validate(c);  // whatever parses must be valid
    if (c.n_embd % c.n_head != 0 || sb::count_params(c) == 0) __builtin_trap();
    if (c.arch == sb::ArchKind::kLlama && (c.n_head % c.kv_heads() != 0 || c.head_dim() % 2 != 0))
      __builtin_trap();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
