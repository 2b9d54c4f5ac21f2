// The options table: every workload, topology, strategy and measurement knob `run` and
// `predict` take, declared once. A row gives the flag, the field, its default (per command
// where they differ), the allowed values, the help group, the help text, the results-file
// config key, the strategy option it sets and the DeepSpeed / FSDP / DDP config-file key.
// Both commands register and check their flags from these rows, both documents record the
// knobs by them, the config files are bound to their rows by them (config_binding.h), and the
// results reader names a series by the same keys. Adding a knob is one field in Knobs and one
// row in kRows (option_rows.cc).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "strategies/strategy.h"

namespace sb {

// The values of the table's flags (defaults come from the rows, not from initialisers here).
struct Knobs {
  std::string model, strategies, arch, attention, cross_entropy, activation_checkpointing, precision;
  int seq, batch, grad_accum;
  bool untied_head;
  int ranks_per_node;
  double mem_limit_gb;
  std::string hosts;                   // run only: "netns" namespace hosts (ci/two_host.sh)
  double inter_gbps, inter_latency_ms;  // run only, --hosts netns: tbf rate, netem delay (< 0 none)
  // DDP and ZeRO-1/2
  double bucket_mb;
  std::string overlap, ddp_config;
  // DeepSpeed ZeRO, ZeRO++ and MiCS
  std::string zero_schedule, zero_bucket_reduce, ds_config;
  uint64_t prefetch_elements, persist_elements, max_live_elements, model_persist_elements;
  int zero_hpz_partition_size;
  std::string zero_quantized_weights, zero_quantized_gradients;
  std::string zero_contiguous_gradients, zero_communication_data_type, zero_qgz_variant;
  int mics_shard_size;
  std::string mics_hierarchical_params_gather, mics_schedule;
  // FSDP and FSDP2
  std::string wrap, backward_prefetch, limit_all_gathers, fsdp_use_orig_params, fsdp_no_sync;
  bool forward_prefetch;
  std::string fsdp_config, fsdp2_reshard_after_forward, fsdp2_reduce_dtype, fsdp2_mixed_precision;
  int fsdp2_prefetch;
  std::set<std::string> given;  // the flags typed on the command line
};

enum class Command : unsigned { kRun = 1, kPredict = 2, kBoth = 3 };
enum class HelpGroup { kWorkload, kTopology, kDdpZero, kZero3, kMics, kFsdp, kFsdp2, kMeasurement, kOutput };
const char* help_group_name(HelpGroup g);

// How a flag's default text is written in the results file's config (JSON): as text, a
// number, or on|off / true|false as a boolean (series names leave a default out).
enum class JsonAs { kText, kNumber, kBool, kNone };

// The strategy option a knob sets (StrategyOptions, strategies/strategy.h).
struct OptionField {
  // config.<key> as a run or prediction recorded it: read from the options the rows ran with,
  // so a config file's setting is recorded as it ran, not as the flag said.
  nlohmann::json (*record)(const StrategyOptions&) = nullptr;
  // Copies the option from one row's options to another's: the document's config takes a
  // file's family knobs, and a per-row knob every row agrees on (config_binding.h).
  void (*take)(const StrategyOptions& from, StrategyOptions& to) = nullptr;
  explicit operator bool() const { return record != nullptr; }
};

struct OptionRow {
  const char* flag;
  std::variant<std::string Knobs::*, int Knobs::*, double Knobs::*, uint64_t Knobs::*,
               bool Knobs::*> field;
  const char* default_run;
  const char* default_predict;  // nullptr: the same as run's
  const char* allowed;          // shown in --help; checked as below
  enum Check { kFree, kOneOf, kRange } check;  // kOneOf "a|b|c", kRange "MIN..MAX"
  HelpGroup group;
  Command commands;
  const char* help;
  const char* json_key = "";  // config.<key> in a results file ("" none)
  JsonAs json_as = JsonAs::kNone;
  // The option recorded under json_key (none: written with the workload, batch_per_rank and
  // mem_limit_gb, or a config file's path).
  OptionField option = {};
  const char* file_key = "";  // "ds: ...", "fsdp: ...", "ddp: ..." ("" none)
  // A knob a config file sets that other families read too (precision, overlap, bucket,
  // accumulation): kept per row (results[].settings), so a file's value never reaches the rows
  // of another family. Otherwise a file's key configures only its family's rows.
  bool per_row = false;
};

const std::vector<OptionRow>& option_rows();

// config.<key> that no one flag sets: what the options derive from several flags or a config
// file (ZeRO's schedule and bucket reduction, FSDP2's reshard). Their default is what the
// default options record.
struct DerivedKey {
  const char* json_key;
  OptionField option;
  const char* file_key = "";  // the config file that sets it, as OptionRow::file_key
};
const std::vector<DerivedKey>& derived_keys();

// Every strategy knob of a run's or prediction's config (rows with an option, then the
// derived keys), as recorded from `o`.
nlohmann::json knob_config_json(const StrategyOptions& o);
// A recorded value as the flag spells it ("on", "true", "25", "bf16-mixed"): the text of an
// error naming the flag.
std::string flag_text(const OptionRow& r, const nlohmann::json& recorded);

// Registers every row of `cmd` on `app` (grouped), sets `k` to the defaults, and records the
// typed flags in k.given after the parse.
void add_knob_options(CLI::App* app, Knobs& k, Command cmd);
// Checks every row's allowed values ("--precision fp16: allowed fp32|bf16-mixed"), throws
// UsageError. Then the strategy options the knobs make (config files are bound apart).
StrategyOptions knob_options(const Knobs& k);
// config.<key> -> the run default, as JSON, for the rows that have one and the derived keys
// (series names).
std::vector<std::pair<std::string, nlohmann::json>> json_defaults();

// "did you mean X?" by edit distance, "" when nothing is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);
// " run: unknown flag --x; did you mean --y? ..." for the first flag `sub` does not take,
// "" when every flag is known.
std::string unknown_flag_line(const CLI::App& sub, int argc, char** argv);

}  // namespace sb
