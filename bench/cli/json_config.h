// A JSON config file given to a flag (--ddp-config, --fsdp-config): reading it and checking its
// values, with every error one UsageError line "FLAG PATH: ..." naming the key and what is
// allowed (exit 2). The key tables stay with each flag's reader.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sb {

class JsonConfigFile {
 public:
  // Reads PATH; a file that cannot be read, is not JSON or is not an object is an error.
  // `what` says what the object holds ("DistributedDataParallel arguments").
  JsonConfigFile(std::string flag, std::string path, const std::string& what);
  const nlohmann::json& root() const { return root_; }
  const std::string& path() const { return path_; }

  [[noreturn]] void fail(const std::string& what) const;
  // "key K: V: allowed ALLOWED"
  [[noreturn]] void bad_value(const std::string& key, const nlohmann::json& v,
                              const std::string& allowed) const;
  // "unknown key K: allowed A, B (modelled), C (ignored)"
  [[noreturn]] void unknown_key(const std::string& key, const std::vector<std::string>& modelled,
                                const std::set<std::string>& ignored) const;

  bool boolean(const nlohmann::json& v, const std::string& key) const;
  double number_in(const nlohmann::json& v, const std::string& key, double lo, double hi,
                   const std::string& allowed) const;  // lo < v <= hi
  // A string among `allowed`, or null where null_ok; returns "" for null.
  std::string one_of(const nlohmann::json& v, const std::string& key,
                     const std::vector<std::string>& allowed, bool null_ok) const;

 private:
  std::string flag_, path_;
  nlohmann::json root_;
};

}  // namespace sb
