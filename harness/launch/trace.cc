// The trace document and its gather to rank 0. Format: Chrome's "Trace Event Format" document ("X"
// complete events, times in microseconds; "M" metadata naming processes and threads), which
// Perfetto's UI and chrome://tracing both import. Writes nothing on ranks other than 0.
#include "harness/launch/trace.h"

#include "harness/launch/report.h"

namespace sb {
namespace {

// One rank's trace on the wire to rank 0 (nanoseconds, exact).
std::string serialize(const RankTrace& t) {
  nlohmann::json events = nlohmann::json::array();
  for (const TraceEvent& e : t.events) events.push_back({e.name, e.tid, e.ts_ns, e.dur_ns, e.args});
  return nlohmann::json{{"events", events}, {"steps", t.steps}, {"truncated", t.truncated}}.dump();
}

RankTrace deserialize(const std::string& s) {
  const nlohmann::json j = nlohmann::json::parse(s);
  RankTrace t;
  for (const auto& e : j["events"]) t.events.push_back(TraceEvent{e[0], e[1], e[2], e[3], e[4]});
  t.steps = j["steps"].get<std::vector<int>>();
  t.truncated = j["truncated"];
  return t;
}

nlohmann::json metadata(const char* what, int pid, int tid, const std::string& name) {
  return {{"name", what}, {"ph", "M"}, {"pid", pid},
          {"tid", tid},   {"ts", 0},   {"args", {{"name", name}}}};
}

}  // namespace

nlohmann::json trace_document(const std::string& strategy, const std::vector<RankTrace>& ranks) {
  nlohmann::json events = nlohmann::json::array(), steps = nlohmann::json::array();
  bool truncated = false;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int pid = int(r);
    events.push_back(metadata("process_name", pid, 0, "rank " + std::to_string(r)));
    events.push_back(metadata("thread_name", pid, kComputeTid, "compute"));
    events.push_back(metadata("thread_name", pid, kCommTid, "comm"));
    events.push_back(metadata("thread_name", pid, kCommSideTid, "comm (side stream)"));
    for (const TraceEvent& e : ranks[r].events)
      events.push_back({{"name", e.name},
                        {"ph", "X"},
                        {"pid", pid},
                        {"tid", e.tid},
                        {"ts", double(e.ts_ns) * 1e-3},
                        {"dur", double(e.dur_ns) * 1e-3},
                        {"args", e.args.is_null() ? nlohmann::json::object() : e.args}});
    steps.push_back(ranks[r].steps);
    truncated = truncated || ranks[r].truncated;
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"suite", "shardbench"},
            {"strategy", strategy},
            {"clock", "each rank's steady clock, 0 = the start of its first measured step"},
            {"steps_per_rank", steps},
            {"max_events_per_rank", kMaxTraceEventsPerRank},
            {"truncated", truncated}}}};
}

std::string write_strategy_trace(const std::string& dir, const std::string& strategy,
                                 const RankTrace& local, const MpiRuntime& mpi) {
  const std::vector<std::string> all = mpi.gather_strings_to_root(serialize(local));
  const std::string path = dir + "/" + strategy + ".trace.json";
  if (mpi.rank() != 0) return path;
  std::vector<RankTrace> ranks;
  for (const std::string& s : all) ranks.push_back(deserialize(s));
  write_json_atomic(path, trace_document(strategy, ranks));
  return path;
}

}  // namespace sb
