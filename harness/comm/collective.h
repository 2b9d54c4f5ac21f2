// Every collective kind's cost, written once (nccl-tests style: one row per kind): its name,
// the algorithm the ring backend runs it with, how many passes of n-1 steps it takes, which
// ring passes it makes, and from those the bytes a position sends and nccl-tests' bus factor.
// The ring schedule, the ledger, the link model, the traffic model and the report read these
// functions; none of them writes a factor of its own. Pure arithmetic: no MPI, no timing.
// Source: nccl-tests PERFORMANCE.md (ring: all-reduce 2(n-1)/n, reduce-scatter, all-gather
// and all-to-all (n-1)/n of the payload per rank, broadcast and reduce 1).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sb {

// kReduce and kAllToAll last: the kinds' integer values index arrays that were laid out before
// them.
enum class CollKind {
  kAllReduce, kReduceScatter, kAllGather, kBroadcast, kBarrier, kReduce, kAllToAll
};
constexpr int kNumCollKinds = 7;

enum class CollAlgo {
  kNone,      // barrier: no payload
  kRing,      // n-1 steps per pass, each to the successor (RingSchedule)
  kChain,     // pipelined chain through every position; one of them sends nothing
  kPairwise,  // all-to-all: step s sends block i+s (alltoall_send_peer)
};

// The position of a chain that sends nothing.
enum class ChainIdle { kNone, kLast, kRoot };  // broadcast: root+n-1; reduce: the root

struct CollectiveSpec {
  CollKind kind;
  const char* name;   // the JSON's and the trace's name
  CollAlgo algo;
  int passes;         // rounds of n-1 steps (all-reduce 2, barrier 0)
  bool rs_pass;       // ring: a reduce-scatter pass, sending every chunk but its own
  bool ag_pass;       // ring: an all-gather pass, sending every chunk but its successor's
  ChainIdle idle;     // chain: who sends nothing
};

const CollectiveSpec& collective_spec(CollKind k);
const char* coll_name(CollKind k);

// nccl-tests PERFORMANCE.md: busbw = algbw * factor; ring and pairwise passes * (n-1)/n,
// chain 1, barrier 0.
double busbw_factor(CollKind k, int n);

// All-to-all: the block of count / n elements each position sends to each other one.
inline uint64_t alltoall_block_elements(uint64_t count, int n) { return count / uint64_t(n); }

// Chunk c of a buffer of `count` elements split into n ring chunks: [begin, begin+len); the
// first count % n chunks are one element longer.
struct Chunk { size_t begin, len; };
Chunk ring_chunk(size_t count, int n, int c);

// Elements position i of n sends over the whole collective (count as in LedgerEntry; root:
// broadcast/reduce root position): ring rs pass count - len(i), ag pass count - len(i+1);
// chain count unless idle; pairwise (n-1) blocks.
uint64_t position_sent_elements(CollKind k, uint64_t count, int n, int i, int root = 0);
// The largest of position_sent_elements over the positions (uneven chunks: position 0's).
uint64_t max_position_sent_elements(CollKind k, uint64_t count, int n);
// The sum of position_sent_elements over the n positions of one group.
uint64_t group_sent_elements(CollKind k, uint64_t count, int n);

}  // namespace sb
