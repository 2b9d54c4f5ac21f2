// Presets sized for this project's uses: tiny (tests), small (CPU benchmark), GPT-2 family.
#include "harness/model/config.h"

#include <charconv>
#include <stdexcept>

#include "harness/model/llama_layout.h"

namespace sb {
namespace {

struct Preset { const char* name; int L, C, H, T, V; };
// GPT-2 sizes from Radford et al. 2019 (vocab padded to 50304 as in llm.c/nanoGPT).
constexpr Preset kPresets[] = {
    {"tiny", 2, 32, 4, 16, 64},
    {"small", 4, 256, 8, 128, 4096},
    {"gpt2-124m", 12, 768, 12, 1024, 50304},
    {"gpt2-350m", 24, 1024, 16, 1024, 50304},
    {"gpt2-774m", 36, 1280, 20, 1024, 50304},
    {"gpt2-1.5b", 48, 1600, 25, 1024, 50304},
};

std::string allowed() {
  std::string s;
  for (const std::string& p : preset_names()) s += std::string(s.empty() ? "" : "|") + p;
  return s + " or L,C,H,T,V (e.g. 4,256,8,128,4096)";
}

// A preset's block must agree with an explicit --arch.
GptConfig with_arch(GptConfig c, std::string_view arch) {
  if (!arch.empty() && parse_arch(arch) != c.arch)
    throw std::invalid_argument("--arch " + std::string(arch) + ": --model " + c.name +
                                " is a " + arch_name(c.arch) + " preset");
  return c;
}

}  // namespace

const char* attention_name(AttentionKind a) {
  return a == AttentionKind::kNaive ? "naive" : "fused";
}

AttentionKind parse_attention(std::string_view s) {
  if (s == "naive") return AttentionKind::kNaive;
  if (s == "fused") return AttentionKind::kFused;
  throw std::invalid_argument("--attention " + std::string(s) + ": allowed naive|fused");
}

const char* cross_entropy_name(CrossEntropyKind k) {
  return k == CrossEntropyKind::kChunked ? "chunked" : "full";
}

CrossEntropyKind parse_cross_entropy(std::string_view s) {
  if (s == "full") return CrossEntropyKind::kFull;
  if (s == "chunked") return CrossEntropyKind::kChunked;
  throw std::invalid_argument("--cross-entropy " + std::string(s) + ": allowed full|chunked");
}

const char* arch_name(ArchKind a) { return a == ArchKind::kLlama ? "llama" : "gpt2"; }

ArchKind parse_arch(std::string_view s) {
  if (s == "gpt2") return ArchKind::kGpt2;
  if (s == "llama") return ArchKind::kLlama;
  throw std::invalid_argument("--arch " + std::string(s) + ": allowed gpt2|llama");
}

std::vector<std::string> preset_names() {
  std::vector<std::string> v;
  for (const auto& p : kPresets) v.emplace_back(p.name);
  for (const std::string& n : llama_preset_names()) v.push_back(n);
  return v;
}

void validate(const GptConfig& c) {
  auto bad = [&](const std::string& why) {
    throw std::invalid_argument("--model " + c.name + ": " + why);
  };
  if (c.n_layer < 1 || c.n_layer > 1024) bad("layers L must be in 1..1024");
  if (c.n_embd < 1 || c.n_embd > 65536) bad("width C must be in 1..65536");
  if (c.n_head < 1 || c.n_embd % c.n_head != 0)
    bad("heads H=" + std::to_string(c.n_head) + " must divide the width C=" +
        std::to_string(c.n_embd));
  if (c.seq_len < 1 || c.seq_len > 65536) bad("context T must be in 1..65536");
  if (c.context > 0 && c.seq_len > c.context)
    throw std::invalid_argument("--seq " + std::to_string(c.seq_len) +
                                ": longer than the model's context T=" +
                                std::to_string(c.context) + " of --model " + c.name);
  if (c.vocab < 2 || c.vocab > 1 << 24) bad("vocabulary V must be in 2..16777216");
  if (c.checkpoint_every < -1 || c.checkpoint_every > c.n_layer)
    throw std::invalid_argument("--activation-checkpointing every-" +
                                std::to_string(c.checkpoint_every) + ": K must be in 1.." +
                                std::to_string(c.n_layer) + " (the layers of --model " + c.name +
                                ")");
  if (c.arch == ArchKind::kLlama) validate_llama(c);
}

GptConfig parse_model(std::string_view spec, std::string_view arch) {
  for (const auto& p : kPresets) {
    if (spec == p.name) return with_arch(GptConfig{p.name, p.L, p.C, p.H, p.T, p.V, 0, true}, arch);
  }
  if (const GptConfig* p = llama_preset(spec)) return with_arch(*p, arch);
  int v[5];
  size_t pos = 0;
  for (int i = 0; i < 5; ++i) {
    size_t end = spec.find(',', pos);
    if ((i < 4) != (end != std::string_view::npos))
      throw std::invalid_argument("--model '" + std::string(spec) + "' is not a preset or spec; allowed: " + allowed());
    std::string_view part = spec.substr(pos, end == std::string_view::npos ? spec.size() - pos : end - pos);
    auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), v[i]);
    if (ec != std::errc() || ptr != part.data() + part.size())
      throw std::invalid_argument("--model '" + std::string(spec) + "': '" + std::string(part) +
                                  "' is not an integer; allowed: " + allowed());
    pos = end + 1;
  }
  GptConfig c{std::string(spec), v[0], v[1], v[2], v[3], v[4], 0, true};
  validate(c);  // the dims in range before the Llama block derives its SwiGLU width from C
  if (!arch.empty() && parse_arch(arch) == ArchKind::kLlama) {
    c = llama_from_spec(c);
    validate(c);
  }
  return c;
}

uint64_t count_params(const GptConfig& c) {
  if (c.arch == ArchKind::kLlama) return count_llama_params(c);
  const uint64_t C = c.n_embd, L = c.n_layer, T = c.positions(), V = c.vocab;
  // per block: ln1 2C, qkv 3C*C+3C, proj C*C+C, ln2 2C, fc 4C*C+4C, fcproj 4C*C+C
  const uint64_t block = 12 * C * C + 13 * C;
  return V * C + T * C + L * block + 2 * C + (c.tied_head ? 0 : V * C);
}

}  // namespace sb
