// Byte ledger: one entry per collective (kind, group, elements, dtype, payload, bytes this rank
// sent split intra/inter node, time) and the ring model's bytes (from RingSchedule).
// Pure bookkeeping: no MPI here, so the accounting is unit-testable on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/comm/ring_schedule.h"
#include "harness/common/dtype.h"
#include "harness/topology.h"

namespace sb {

struct HopBytes {
  uint64_t intra = 0;  // bytes this rank sent to a peer on its own node
  uint64_t inter = 0;  // bytes this rank sent to a peer on another node
  uint64_t total() const { return intra + inter; }
};

struct LedgerEntry {
  CollKind kind = CollKind::kBarrier;
  GroupKind group = GroupKind::kWorld;
  int group_size = 1;
  size_t count = 0;            // elements: all-reduce/broadcast buffer, RS input, AG output,
                               // all-to-all input (== its output)
  DType dtype = DType::kF32;
  int root_index = 0;          // broadcast/reduce root (index into the group)
  uint64_t payload_bytes = 0;  // count * dtype bytes (nccl-tests' "size")
  HopBytes sent;               // this rank's sends, by hop class
  bool counted = false;        // true: summed from real transfers; false: ring model
  double time_s = 0;           // BackendResult::device_seconds when the backend timed it on
                               // its stream (NCCL: events, without the wait for compute), else
                               // wall clock around the backend's run() on the comm thread (MPI)
  std::string tag;             // optional label from the caller (unit name, bucket id)
  // Issue order on this rank's communicator, and the comm thread's steady-clock interval
  // around the backend's run() (the trace's comm track; harness/train/phase_clock.h); for a
  // simulated backend, the op's interval on its logical comm stream.
  uint64_t seq = 0;
  int64_t start_ns = 0, end_ns = 0;
  int stream = 0;  // the comm stream it ran on (CommStream: 0 main, 1 side)
};

// Bytes rank `group.index` sends in a ring collective over `group`, classified per hop, exactly
// as the ring implementation moves them (RingSchedule, uneven chunks included). count as in
// LedgerEntry. All-to-all: (n-1)/n of the buffer, each block classed by its own peer.
HopBytes ring_model_sent(CollKind kind, size_t count, DType dtype, const Group& group,
                         const Topology& topo, int root_index = 0);

class Ledger {
 public:
  void record(const LedgerEntry& e) { entries_.push_back(e); }
  const std::vector<LedgerEntry>& entries() const { return entries_; }
  std::vector<LedgerEntry>& mutable_entries() { return entries_; }  // the Communicator's reorder
  void clear() { entries_.clear(); }
  size_t size() const { return entries_.size(); }
  // Sums over entries [from, end): payload, sent intra/inter.
  uint64_t payload_bytes(size_t from = 0) const;
  HopBytes sent(size_t from = 0) const;

 private:
  std::vector<LedgerEntry> entries_;
};

}  // namespace sb
