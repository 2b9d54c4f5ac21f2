// `shardbench validate`: the predictor against published measured runs. Each file of
// bench/published/ holds one run (its source, configuration and published figures); validate
// predicts each on its cluster and prints predicted beside published tokens/s per GPU with the
// error, per set (calibration, held_out) with the set's bounds; then each same-hardware ratio of
// ratios/ (two predictions on one configuration) against its published ratio and stated bound;
// --check exits 1 when a point, a set's median or a ratio is outside its bound; --json writes
// the tables. Bad files: one line, exit 2.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/cli/output_path.h"
#include "bench/cli/run_options.h"
#include "harness/model/checkpointing.h"
#include "harness/predict/predict.h"
#include "harness/launch/report.h"

namespace sb {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct ValidateArgs {
  std::string dir = "bench/published";
  std::string json_out;
  bool check = false;
};
ValidateArgs g_validate;

// The bounds a set is held to (|predicted / published - 1|): every point, and the median.
struct SetBound {
  const char* name;
  double each, median;
};
constexpr SetBound kBounds[] = {{"calibration", 0.20, 0.10}, {"held_out", 0.30, 0.15}};

struct Point {
  std::string id, set, file;
  int world = 1;
  double published = 0;  // tokens/s per GPU
  Prediction p;
  double predicted = 0;  // tokens/s per GPU
  double error = 0;      // predicted / published - 1
};

[[noreturn]] void bad(const std::string& file, const std::string& why) {
  throw UsageError(fmt::format("--dir: {}: {}", file, why));
}

json read_json(const fs::path& path) {
  std::ifstream f(path);
  if (!f) bad(path.string(), "unreadable");
  try {
    return json::parse(f);
  } catch (const json::exception& e) {
    bad(path.string(), e.what());
  }
}

// A cluster preset, or a JSON file named relative to the published file.
Cluster cluster_of(const std::string& name, const fs::path& file) {
  try {
    for (const std::string& n : cluster_names())
      if (n == name) return load_cluster(name);
    return load_cluster((file.parent_path() / name).string());
  } catch (const std::invalid_argument& e) {
    bad(file.string(), e.what());
  }
}

PredictConfig config_of(const json& c, const Cluster& cl, const std::string& file) {
  PredictConfig cfg;
  GptConfig m = parse_predict_model(c.at("model").get<std::string>(), c.value("arch", ""));
  m.attention = parse_attention(c.value("attention", "fused"));
  m.checkpoint_every =
      parse_activation_checkpointing(c.value("activation_checkpointing", "none"), m.n_layer);
  m.seq_len = c.value("seq", m.seq_len);
  m.cross_entropy = parse_cross_entropy(c.value("cross_entropy", "full"));
  cfg.model = model_shape(m);
  cfg.world = c.at("gpus").get<int>();
  cfg.ranks_per_node = c.value("gpus_per_node", cl.ranks_per_node);
  cfg.batch_per_rank = c.at("batch_per_gpu").get<int>();
  StrategyOptions& o = cfg.options;
  const std::string precision = c.value("precision", "bf16-mixed");
  if (precision != "bf16-mixed" && precision != "fp32")
    bad(file, "config.precision " + precision + ": allowed bf16-mixed|fp32");
  o.precision = precision == "fp32" ? Precision::kFp32 : Precision::kBf16Mixed;
  apply_zero_schedule(ZeroSchedule::kShipped, o);
  o.grad_accum = c.value("grad_accum", 1);
  o.bucket_mb = c.value("bucket_mb", o.bucket_mb);
  // FSDP under accumulation: no_sync() or a reduce-scatter every micro-batch (Composer, which
  // ran llm-foundry's tables, never enters no_sync for FSDP: see those files' notes).
  o.fsdp_no_sync = c.value("fsdp_no_sync", true);
  if (cfg.world < 1 || cfg.ranks_per_node < 1 || cfg.world % cfg.ranks_per_node != 0 ||
      cfg.batch_per_rank < 1 || o.grad_accum < 1)
    bad(file, "config: gpus a whole number of nodes, batch_per_gpu and grad_accum >= 1");
  return cfg;
}

Point predict_point(const fs::path& path) {
  const json j = read_json(path);
  Point pt;
  pt.file = path.filename().string();
  try {
    pt.id = j.at("id").get<std::string>();
    pt.set = j.at("set").get<std::string>();
    pt.published = j.at("published").at("tokens_per_s_per_gpu").get<double>();
    const json& c = j.at("config");
    const Cluster cl = cluster_of(c.at("cluster").get<std::string>(), path);
    const PredictConfig cfg = config_of(c, cl, pt.file);
    pt.world = cfg.world;
    pt.p = predict(cfg, c.at("strategy").get<std::string>(), cl);
  } catch (const json::exception& e) {
    bad(pt.file, e.what());
  } catch (const std::invalid_argument& e) {
    bad(pt.file, e.what());
  }
  if (pt.set != kBounds[0].name && pt.set != kBounds[1].name)
    bad(pt.file, "set " + pt.set + ": allowed calibration|held_out");
  if (!(pt.published > 0)) bad(pt.file, "published.tokens_per_s_per_gpu must be positive");
  pt.predicted = pt.p.tokens_per_s / pt.world;
  pt.error = pt.predicted / pt.published - 1;
  return pt;
}

// A same-hardware ratio (bench/published/ratios/): two predictions on one configuration,
// each side a strategy with its own knobs, against the published throughput ratio and the
// bound the file states for it.
struct RatioPoint {
  std::string id, file, numerator, denominator;
  double published = 0, lo = 0, hi = 0, predicted = 0;
  bool fits_num = false, fits_den = false;
};

// The knobs a ratio's side may set on top of the shared configuration.
void apply_knobs(const json& k, StrategyOptions& o, const std::string& file) {
  for (const auto& [key, v] : k.items()) {
    if (key == "zero_hpz_partition_size") o.zero_hpz_partition_size = v.get<int>();
    else if (key == "zero_quantized_weights") o.zero_quantized_weights = v.get<bool>();
    else if (key == "zero_quantized_gradients") o.zero_quantized_gradients = v.get<bool>();
    else if (key == "zero_comm_fp16") o.zero_comm_fp16 = v.get<bool>();
    else if (key == "fsdp_no_sync") o.fsdp_no_sync = v.get<bool>();
    else bad(file, "knobs." + key + ": allowed zero_hpz_partition_size, zero_quantized_weights, "
                   "zero_quantized_gradients, zero_comm_fp16, fsdp_no_sync");
  }
}

RatioPoint predict_ratio(const fs::path& path) {
  const json j = read_json(path);
  RatioPoint r;
  r.file = path.filename().string();
  try {
    r.id = j.at("id").get<std::string>();
    const json& c = j.at("config");
    const Cluster cl = cluster_of(c.at("cluster").get<std::string>(), path);
    const PredictConfig base = config_of(c, cl, r.file);
    auto side = [&](const json& s, std::string& name, bool& fits) {
      PredictConfig cfg = base;
      apply_knobs(s.value("knobs", json::object()), cfg.options, r.file);
      const std::string strategy = s.at("strategy").get<std::string>();
      name = s.value("label", strategy);
      const Prediction p = predict(cfg, strategy, cl);
      fits = p.fits;
      return p.tokens_per_s;
    };
    const double num = side(j.at("numerator"), r.numerator, r.fits_num);
    const double den = side(j.at("denominator"), r.denominator, r.fits_den);
    r.predicted = den > 0 ? num / den : 0;
    const json& pub = j.at("published");
    r.published = pub.at("ratio").get<double>();
    r.lo = pub.at("bound").at(0).get<double>();
    r.hi = pub.at("bound").at(1).get<double>();
  } catch (const json::exception& e) {
    bad(r.file, e.what());
  } catch (const std::invalid_argument& e) {
    bad(r.file, e.what());
  }
  if (!(r.lo > 0 && r.lo <= r.published && r.published <= r.hi))
    bad(r.file, "published.bound must hold published.ratio (0 < lo <= ratio <= hi)");
  return r;
}

// The ratios' table and verdict; returns whether every predicted ratio lies in its bound.
bool print_ratios(const std::vector<RatioPoint>& ratios, json& out) {
  if (ratios.empty()) return true;
  bool ok = true;
  fmt::print("\nratios (same hardware; bound: each file's stated range)\n");
  fmt::print("{:<34} {:<40} {:>9} {:>9} {:>13} {:>5}\n", "ratio", "numerator / denominator",
             "published", "predicted", "bound", "fits");
  for (const RatioPoint& r : ratios) {
    const bool in = r.lo <= r.predicted && r.predicted <= r.hi;
    ok = ok && in;
    fmt::print("{:<34} {:<40} {:>9.3f} {:>9.3f} {:>13} {:>5}{}\n", r.id,
               r.numerator + " / " + r.denominator, r.published, r.predicted,
               fmt::format("{:.2f}-{:.2f}", r.lo, r.hi),
               r.fits_num && r.fits_den ? "yes" : "NO", in ? "" : "  <- outside bound");
    out.push_back({{"id", r.id},
                   {"file", r.file},
                   {"numerator", r.numerator},
                   {"denominator", r.denominator},
                   {"published_ratio", r.published},
                   {"predicted_ratio", r.predicted},
                   {"bound", {r.lo, r.hi}},
                   {"within_bound", in},
                   {"fits", r.fits_num && r.fits_den}});
  }
  fmt::print("ratios: {} of {} within their bound\n",
             std::count_if(ratios.begin(), ratios.end(),
                           [](const RatioPoint& r) { return r.lo <= r.predicted && r.predicted <= r.hi; }),
             ratios.size());
  return ok;
}

std::vector<fs::path> json_files(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// tokens/s scale as 1 / step: the step's range [lo, hi] is the throughput's [1/hi, 1/lo].
json point_json(const Point& pt) {
  const double lo = pt.p.step_hi_s > 0 ? pt.predicted * pt.p.step_s / pt.p.step_hi_s : 0;
  const double hi = pt.p.step_lo_s > 0 ? pt.predicted * pt.p.step_s / pt.p.step_lo_s : 0;
  return {{"id", pt.id},
          {"set", pt.set},
          {"file", pt.file},
          {"published_tokens_per_s_per_gpu", pt.published},
          {"predicted_tokens_per_s_per_gpu", pt.predicted},
          {"predicted_range", {lo, hi}},
          {"error", pt.error},
          {"predicted_mfu", pt.p.mfu},
          {"predicted_peak_gib", double(pt.p.peak) / double(1ull << 30)},
          {"predicted_device_peak_gib", double(pt.p.device_peak) / double(1ull << 30)},
          {"memory_of", pt.p.memory_of},
          {"fits", pt.p.fits},
          {"outside_validated_region", pt.p.outside}};
}

// One set's table and verdict; returns whether every bound held.
bool print_set(const std::vector<Point>& points, const SetBound& b, json& sets) {
  std::vector<double> errs;
  bool each_ok = true;
  int covered = 0;  // published figure inside the predicted range
  fmt::print("\n{} (bound: each |error| <= {:.0f} %, median <= {:.0f} %)\n", b.name, b.each * 100,
             b.median * 100);
  fmt::print("{:<34} {:>10} {:>10} {:>17} {:>8} {:>6} {:>5} {:>9}\n", "run", "published",
             "predicted", "range", "error", "MFU", "fits", "GiB/limit");
  for (const Point& pt : points) {
    if (pt.set != b.name) continue;
    const json r = point_json(pt);
    errs.push_back(std::fabs(pt.error));
    const bool ok = std::fabs(pt.error) <= b.each;
    each_ok = each_ok && ok;
    covered += r["predicted_range"][0].get<double>() <= pt.published &&
               pt.published <= r["predicted_range"][1].get<double>();
    fmt::print("{:<34} {:>10.0f} {:>10.0f} {:>17} {:>+7.1f}% {:>6.2f} {:>5} {:>9}{}\n", pt.id,
               pt.published, pt.predicted,
               fmt::format("{:.0f}-{:.0f}", r["predicted_range"][0].get<double>(),
                           r["predicted_range"][1].get<double>()),
               pt.error * 100, pt.p.mfu, pt.p.fits ? "yes" : "NO",
               fmt::format("{:.1f}/{:.1f}", double(pt.p.device_peak) / double(1ull << 30),
                           pt.p.limit_bytes / double(1ull << 30)),
               ok ? "" : "  <- outside bound");
  }
  const double med = median(errs);
  const bool ok = each_ok && med <= b.median && !errs.empty();
  fmt::print("{}: {} runs, median |error| {:.1f} %, max {:.1f} %, published inside the "
             "predicted range {} of {}: {}\n", b.name, errs.size(), med * 100,
             errs.empty() ? 0.0 : *std::max_element(errs.begin(), errs.end()) * 100, covered,
             errs.size(), ok ? "within bounds" : "OUTSIDE bounds");
  sets[b.name] = {{"runs", errs.size()},
                  {"median_abs_error", med},
                  {"inside_range", covered},
                  {"bound_each", b.each},
                  {"bound_median", b.median},
                  {"within_bounds", ok}};
  return ok;
}

int validate_all(const ValidateArgs& a) {
  if (!fs::is_directory(a.dir)) throw UsageError("--dir " + a.dir + ": not a directory");
  const std::vector<fs::path> files = json_files(a.dir);
  if (files.empty()) throw UsageError("--dir " + a.dir + ": no published runs (*.json)");
  if (!a.json_out.empty()) prepare_output_path("--json", a.json_out);
  std::vector<Point> points;
  for (const fs::path& f : files) points.push_back(predict_point(f));
  std::vector<RatioPoint> ratios;
  for (const fs::path& f : json_files(fs::path(a.dir) / "ratios")) ratios.push_back(predict_ratio(f));
  fmt::print("shardbench validate: {} published runs in {}; error = predicted / published - 1 "
             "of tokens/s per GPU\n", points.size(), a.dir);
  json sets, rows = json::array();
  bool ok = true;
  for (const SetBound& b : kBounds) ok = print_set(points, b, sets) && ok;
  json ratio_rows = json::array();
  ok = print_ratios(ratios, ratio_rows) && ok;
  for (const Point& pt : points) rows.push_back(point_json(pt));
  if (!a.json_out.empty()) {
    write_json_atomic(a.json_out, {{"schema_version", kSchemaVersion},
                                   {"suite", "shardbench"},
                                   {"kind", "validation"},
                                   {"created_utc", utc_now_iso()},
                                   {"git_commit", git_commit()},
                                   {"sets", sets},
                                   {"runs", rows},
                                   {"ratios", ratio_rows}});
    fmt::print("validation: {}\n", a.json_out);
  }
  return a.check && !ok ? 1 : 0;
}

}  // namespace

void add_validate_command(CLI::App& app) {
  ValidateArgs& a = g_validate;
  CLI::App* v = app.add_subcommand(
      "validate", "Predict every published run of bench/published and compare (no MPI)");
  v->add_option("--dir", a.dir, "Directory of published runs (*.json)")->capture_default_str();
  v->add_option("--json", a.json_out, "Write the validation table here");
  v->add_flag("--check", a.check, "Exit 1 when a run or a set's median is outside its bound");
}

int validate_command() { return validate_all(g_validate); }

}  // namespace sb
