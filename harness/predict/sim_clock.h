// The simulated rank's time: the compute stream, the two communication streams, and where
// ranks outnumber the host's cores, what the collectives in flight leave the compute of them.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <vector>

#include "harness/predict/kernel_cost.h"

namespace sb {

// One collective on a comm stream, timed where a collective beside compute takes longer than
// alone (SimClock::beside_compute). Its progress is counted in seconds of its time alone, so
// the clock can re-time what is left of it when the compute blocks on it.
struct CommRecord {
  double key_s = 0;     // what the caller's handle waits on: its end as timed at issue, made
                        // unique on its stream (never an earlier key, though ends move)
  double ready_s = 0;   // the earliest it may start: its issue
  int input_stream = -1;  // >= 0: it starts after this collective on the other stream ends
  double input_key = 0;
  double alone_s = 0;   // its time with the cores to itself (traffic.cc)
  double beside_s = 0;  // its time while the ranks' compute runs beside it (>= alone_s)
  double cpu_share = 1;  // of beside_s, the share its CPU work takes from a kernel beside it
  double start_s = 0, end_s = 0;
  // From ref_s it runs alone until alone_until_s (the compute blocked), beside compute after;
  // done_s of alone_s was done by ref_s.
  double ref_s = 0, alone_until_s = 0, done_s = 0;
};

struct SimClock {
  double compute_s = 0;    // where the compute stream is
  double comm_free_s = 0;  // when the communication stream is next idle
  double side_comm_free_s = 0;  // when the side comm stream (CommStream::kSide) is next idle
  double comm_idle_s() const {  // when both are
    return comm_free_s > side_comm_free_s ? comm_free_s : side_comm_free_s;
  }
  double busy_s = 0;       // kernel time so far (compute without the waits)
  bool serial = false;     // ranks outnumber cores: communication takes the compute's cores
  // Serial: each collective in flight, with the share of its time its CPU work takes (below 1
  // where it waits on a shaped link, whose bytes the cores move faster than the link does).
  struct CommWindow {
    double start_s, end_s, cpu_share;
  };
  std::vector<CommWindow> comm_windows;
  // Serial: when a kernel of `work_s` started at `from_s` ends, progressing at 1 - the CPU share
  // of the collectives in flight (nothing where it is 1: the kernel waits for the cores).
  double serial_kernel_end(double from_s, double work_s);

  // Serial, with the run's collectives timed beside compute (Cluster::beside_compute_*): a
  // collective is timed at issue as if the compute runs beside it until it ends, and re-timed
  // at its time alone from where the compute blocks on it (block_on). Its queue per stream.
  bool beside_compute = false;
  // The wait of a rank that blocks right after computing for its peers, time-sliced on the
  // same cores, to reach the collective (Cluster::after_compute_sync_s), measured after
  // `sync_after_s` of compute; after less kernel time since the rank last blocked, that share
  // of it, as ranks drift apart only while they compute (0: at most the kernel time).
  double sync_s = 0, sync_after_s = 0;
  double busy_at_block_s = 0;
  std::array<std::vector<CommRecord>, 2> queues;
  // Queues a collective on `stream` (0 main, 1 side), after the one of `input_key` on the
  // other stream where that is > 0; returns its key and sets `start_s` to its start.
  double issue(int stream, double ready_s, double alone_s, double beside_s, double cpu_share,
               double& start_s, double input_key = 0);
  // The compute blocks on the collective whose issue returned key_s: it, and what is queued
  // before it on its stream, run alone from when the last rank reaches it (compute_s + the
  // sync wait); what comes after it on its stream, and everything the other stream holds, runs
  // alone until it ends and beside compute after. Returns its end (compute_s when it is no
  // longer queued: it ended).
  double block_on(int stream, double key_s);
  // The key of the stream's last collective (compute_s when none is queued).
  double last_key(int stream) const;
  // Its end as timed now (0 when it is no longer queued: it ended by compute_s).
  double end_of(int stream, double key_s) const;
  // The streams' busy time so far, as re-timed: what ended, and what is queued as timed now.
  double comm_busy_s() const;

  // busy_s by where it went: each kernel class at its own rate, the launch floor of kernels
  // shorter than a launch, and the slow-down of kernels that ran beside a collective.
  ClassSeconds class_s{};
  double launch_s = 0, contention_s = 0;
  // Every GEMM the compute stream ran, by shape: what a CPU calibrates its GEMM rate on.
  std::map<GemmCall, uint64_t> gemm_calls;

 private:
  double& free_of(int stream) { return stream == 0 ? comm_free_s : side_comm_free_s; }
  // When r may start: its issue, and its input's end as timed now.
  double ready_of(const CommRecord& r) const;
  // Re-times queues[s][from, to) from `t`, each running alone until `alone_until` and beside
  // compute after, each starting after `cursor` (moved to each one's end). An input on the
  // other stream is taken as that stream is timed when this runs: block_on re-times the
  // blocked stream first, so a side collective waiting on a main one sees its new end, a main
  // one waiting on a side one its old (later) one.
  void rerun(int s, size_t from, size_t to, double t, double alone_until, double& cursor);
  void settle();  // drops what ended by compute_s; the windows and stream ends from the queues
  double ended_busy_s_ = 0;  // the busy time of what settle() dropped
  std::array<double, 2> last_key_{};  // the last key issued per stream
};

}  // namespace sb
