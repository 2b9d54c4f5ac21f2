// A --cluster file is user input: whatever key of whatever preset holds a value of the wrong
// JSON type or a number far out of range, loading it is one std::invalid_argument that names
// the file, never another exception (nlohmann's type_error once escaped to std::terminate).
// The cases are generated from every leaf of every preset's own JSON.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/predict/cluster.h"

namespace sb {
namespace {

using Json = nlohmann::json;

void leaves(const Json& j, const Json::json_pointer& at, std::vector<Json::json_pointer>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) leaves(it.value(), at / it.key(), out);
  } else if (!j.is_array()) {
    out.push_back(at);
  }
}

// Values of other JSON types than `v` (out-of-range numbers: CountsFarOutOfRangeAreRefused).
std::vector<Json> wrong_values(const Json& v) {
  std::vector<Json> out = {Json::array(), Json::object(), nullptr};
  if (!v.is_string()) out.push_back("text");
  if (!v.is_boolean()) out.push_back(true);
  if (!v.is_number()) out.push_back(1);
  return out;
}

std::string write(const Json& j, const std::string& name) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << j.dump();
  return path;
}

TEST(ClusterFile, EveryLeafOfTheWrongTypeIsOneInvalidArgumentNamingTheFile) {
  int cases = 0;
  for (const std::string& preset : cluster_names()) {
    const Json good = cluster_json(load_cluster(preset));
    std::vector<Json::json_pointer> at;
    leaves(good, Json::json_pointer(), at);
    ASSERT_GT(at.size(), 10u) << preset;
    for (const Json::json_pointer& p : at) {
      for (const Json& bad_value : wrong_values(good[p])) {
        Json bad = good;
        bad[p] = bad_value;
        const std::string path = write(bad, "sb_cluster_" + preset + ".json");
        try {
          (void)load_cluster(path);
          // a key that is only recorded (a name, a note) may take null or any text; a
          // numeric or boolean key must not silently accept another type
          EXPECT_TRUE(good[p].is_string() || bad_value.is_null())
              << preset << " " << p.to_string() << " accepted " << bad_value.dump();
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
        } catch (const std::exception& e) {
          ADD_FAILURE() << preset << " " << p.to_string() << " = " << bad_value.dump()
                        << ": escaped as another exception: " << e.what();
        }
        ++cases;
        std::remove(path.c_str());
      }
    }
  }
  EXPECT_GT(cases, 100);
}

TEST(ClusterFile, CountsFarOutOfRangeAreRefused) {
  Json j = cluster_json(load_cluster("dgx-h100"));
  for (const char* key : {"sm_count", "comm_sms"}) {
    for (double v : {-9.2e18, 1e30, 2.5}) {
      Json bad = j;
      bad["kernels"][key] = v;
      const std::string path = write(bad, "sb_cluster_count.json");
      EXPECT_THROW((void)load_cluster(path), std::invalid_argument) << key << " = " << v;
      std::remove(path.c_str());
    }
  }
}

}  // namespace
}  // namespace sb
