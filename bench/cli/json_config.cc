// Reading and checking a flag's JSON config file (see header).
#include "bench/cli/json_config.h"

#include <fstream>

#include <fmt/format.h>

#include "bench/cli/run_options.h"

namespace sb {

JsonConfigFile::JsonConfigFile(std::string flag, std::string path, const std::string& what)
    : flag_(std::move(flag)), path_(std::move(path)) {
  std::ifstream in(path_);
  if (!in) fail("cannot read the file");
  root_ = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (root_.is_discarded()) fail("not valid JSON");
  if (!root_.is_object()) fail("allowed a JSON object of " + what);
}

void JsonConfigFile::fail(const std::string& what) const {
  throw UsageError(fmt::format("{} {}: {}", flag_, path_, what));
}

void JsonConfigFile::bad_value(const std::string& key, const nlohmann::json& v,
                               const std::string& allowed) const {
  fail(fmt::format("key {}: {}: allowed {}", key, v.dump(), allowed));
}

void JsonConfigFile::unknown_key(const std::string& key, const std::vector<std::string>& modelled,
                                 const std::set<std::string>& ignored) const {
  fail(fmt::format("unknown key {}: allowed {} (modelled), {} (ignored)", key,
                   fmt::join(modelled, ", "), fmt::join(ignored, ", ")));
}

bool JsonConfigFile::boolean(const nlohmann::json& v, const std::string& key) const {
  if (!v.is_boolean()) bad_value(key, v, "true|false");
  return v.get<bool>();
}

double JsonConfigFile::number_in(const nlohmann::json& v, const std::string& key, double lo,
                                 double hi, const std::string& allowed) const {
  if (!v.is_number() || !(v.get<double>() > lo) || v.get<double>() > hi) bad_value(key, v, allowed);
  return v.get<double>();
}

std::string JsonConfigFile::one_of(const nlohmann::json& v, const std::string& key,
                                   const std::vector<std::string>& allowed, bool null_ok) const {
  if (null_ok && v.is_null()) return "";
  if (v.is_string())
    for (const std::string& a : allowed)
      if (v.get<std::string>() == a) return a;
  bad_value(key, v, fmt::format("{}{}", fmt::join(allowed, "|"), null_ok ? "|null" : ""));
}

}  // namespace sb
