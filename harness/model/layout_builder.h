// Writes a ModelLayout in definition order: the one way make_layout (the GPT-2 block) and
// make_llama_layout (the Llama block) append a named parameter tensor and group tensors into a
// leaf module. Knows no architecture: the callers say which tensors and modules there are.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "harness/model/layout.h"

namespace sb {

class LayoutBuilder {
 public:
  // An empty layout of c's L + 2 segments (0 embedding, 1..L blocks, L+1 head).
  explicit LayoutBuilder(const GptConfig& c) {
    layout_.config = c;
    layout_.num_segments = c.n_layer + 2;
  }
  // Appends a tensor of `shape` (row-major; linear weights [out, in]); returns its index.
  int tensor(std::string name, std::vector<int64_t> shape, int segment, bool decay, InitKind init) {
    uint64_t numel = 1;
    for (int64_t d : shape) numel *= uint64_t(d);
    layout_.tensors.push_back({std::move(name), numel, std::move(shape), segment, decay, init});
    return int(layout_.tensors.size()) - 1;
  }
  // Appends the next leaf module in forward order, using `tensors` (indices from tensor()).
  void module(std::string name, ModuleKind kind, int segment, std::vector<int> tensors) {
    layout_.modules.push_back({std::move(name), kind, segment, std::move(tensors)});
  }
  ModelLayout take() { return std::move(layout_); }

 private:
  ModelLayout layout_;
};

}  // namespace sb
