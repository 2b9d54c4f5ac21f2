// Which rows a config file configures. --ds-config configures DeepSpeed's strategies (zero1/2/3
// with ZeRO++, mics), --fsdp-config FSDP's (fsdp_*), --ddp-config ddp; every other row keeps the
// flags' settings. So a file's precision, overlap, bucket or accumulation never reaches the
// rows it is compared with, and a flag given on the command line that a file contradicts is an
// error naming both (exit 2), never silently overridden.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/cli/ds_config.h"
#include "bench/cli/options_table.h"
#include "strategies/strategy.h"

namespace sb {

enum class ConfigFamily { kNone, kDeepSpeed, kFsdp, kDdp };
ConfigFamily config_family(const std::string& strategy);

struct BoundOptions {
  StrategyOptions flags;                  // rows no file configures
  std::optional<StrategyOptions> ds;      // --ds-config's rows
  std::optional<StrategyOptions> fsdp;    // --fsdp-config's rows
  std::string ds_path, fsdp_path;
  int flags_batch = 1, ds_batch = 0;      // sequences per rank; ds_batch 0: the flags'
  int ds_stage = 0;                       // zero_optimization.stage of --ds-config

  int batch_for(const std::string& strategy) const;
  const StrategyOptions& for_strategy(const std::string& strategy) const;
  // The options of the document's `config`: those of every row when all rows agree, else the
  // flags' with each file's family-only knobs; `differ` gets the row settings that differ.
  StrategyOptions common(const std::vector<std::string>& names,
                         std::vector<std::string>& differ) const;
  // The document's config over the rows `names`: `options` becomes common()'s and `batch` the
  // rows' batch when they agree; `differ` as for common().
  void document_config(const std::vector<std::string>& names, StrategyOptions& options, int& batch,
                       std::vector<std::string>& differ) const;
};

// --ds-config and --fsdp-config, bound the same way by `run` and `predict`: each reads its file
// over the flags' options (`flags`, the batch `from_flags.batch_per_rank`), checks the typed
// flags against it and sets its rows in `b`. Throw UsageError.
DsConfig bind_ds_config(const Knobs& a, const RunConfig& from_flags, BoundOptions& b);
void bind_fsdp_config(const Knobs& a, const StrategyOptions& flags, BoundOptions& b);
// The strategies to run: --strategies, where each bound file's stage or sharding_strategy
// picks its own (ds_config_strategies, fsdp_config_strategies). Throws UsageError.
std::vector<std::string> bound_strategies(const Knobs& a, const BoundOptions& b);

// Throws UsageError when a flag in `given` (the flags typed on the command line) has a value
// the file's rows do not: "--precision bf16-mixed conflicts with --ds-config f.json (fp32)".
// The flags checked are the options table's rows a config file sets (a config-file key).
void check_flag_conflicts(const std::set<std::string>& given, const StrategyOptions& flags,
                          const StrategyOptions& file, ConfigFamily family,
                          const std::string& path);
// --batch typed against a DeepSpeed file's train_micro_batch_size_per_gpu: UsageError.
void check_batch_conflict(const std::set<std::string>& given, int flags_batch, int file_batch,
                          const std::string& path);

// One row's effective settings ({precision, overlap, bucket_mb, grad_accum, batch_per_rank,
// configured_by}), recorded with each result.
nlohmann::json row_settings(const std::string& strategy, const BoundOptions& b);
// "warning: ..." when the rows ran at different batch or precision, else "".
std::string unequal_rows_warning(const std::vector<std::string>& names, const BoundOptions& b);

}  // namespace sb
