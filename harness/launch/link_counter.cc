// Link counters from sysfs and procfs, and the model of the bytes a message adds on the link
// (see header). The model's constants were measured on a veth pair (NETNS.md; ci/two_host.sh):
// an MPI message of S bytes sent across moved 52 B per data packet of MSS 1448, plus pure ACKs
// and control packets, plus ob1's headers (24 B eager; ≈160 B rendezvous, ACK included).
#include "harness/launch/link_counter.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace sb {
namespace {

bool read_u64(const std::string& path, uint64_t* v) {
  std::ifstream f(path);
  return static_cast<bool>(f >> *v);
}

// /proc/net/snmp: a "Tcp:" line of names followed by a "Tcp:" line of values.
bool read_retrans_segs(uint64_t* v) {
  std::ifstream f("/proc/net/snmp");
  std::string names, values;
  while (std::getline(f, names)) {
    if (names.rfind("Tcp:", 0) != 0) continue;
    if (!std::getline(f, values)) return false;
    std::istringstream n(names), x(values);
    std::string name, value;
    while (n >> name && x >> value)
      if (name == "RetransSegs") {
        *v = std::stoull(value);
        return true;
      }
    return false;
  }
  return false;
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

}  // namespace

std::string link_iface() {
  const char* s = std::getenv("SB_LINK_IFACE");
  return s ? s : "";
}

LinkSample read_link_sample() {
  LinkSample s;
  const std::string iface = link_iface();
  if (iface.empty() || iface.find('/') != std::string::npos) return s;
  const std::string dir = "/sys/class/net/" + iface + "/statistics/";
  s.available = read_u64(dir + "tx_bytes", &s.tx_bytes) &&
                read_u64(dir + "rx_bytes", &s.rx_bytes) &&
                read_u64(dir + "tx_packets", &s.tx_packets) &&
                read_u64(dir + "rx_packets", &s.rx_packets) && read_retrans_segs(&s.retrans_segs);
  return s;
}

LinkSample sample_link(const MpiRuntime& mpi, const Topology& topo) {
  mpi.barrier();  // after this barrier every collective issued before has completed everywhere
  const LinkSample s = topo.local_rank() == 0 ? read_link_sample() : LinkSample{};
  mpi.barrier();  // and none issued after this one has started before every host has read
  return s;
}

LinkTraffic link_traffic(const LinkSample& before, const LinkSample& after, const MpiRuntime& mpi,
                         const Topology& topo) {
  const bool reader = topo.local_rank() == 0;
  const bool ok = reader && before.available && after.available;
  auto delta = [&](uint64_t a, uint64_t b) { return ok && b >= a ? b - a : uint64_t(0); };
  LinkTraffic t;
  t.available = mpi.sum_over_ranks_u64(ok ? 1 : 0) == uint64_t(topo.num_nodes());
  t.tx_bytes = mpi.sum_over_ranks_u64(delta(before.tx_bytes, after.tx_bytes));
  t.tx_packets = mpi.sum_over_ranks_u64(delta(before.tx_packets, after.tx_packets));
  t.retrans_segs = mpi.sum_over_ranks_u64(delta(before.retrans_segs, after.retrans_segs));
  return t;
}

LinkTraffic measure_link(const MpiRuntime& mpi, const Topology& topo,
                         const std::function<void()>& body) {
  const LinkSample before = sample_link(mpi, topo);
  body();
  const LinkSample after = sample_link(mpi, topo);
  return link_traffic(before, after, mpi, topo);
}

uint64_t link_message_overhead_bytes(uint64_t payload, const LinkModel& m) {
  if (payload == 0) return 0;
  const bool eager = payload + m.match_header_bytes <= m.eager_limit;
  const uint64_t protocol = eager ? m.eager_protocol_bytes : m.rndv_protocol_bytes;
  const double packets = double(ceil_div(payload + (eager ? protocol : 0), m.mss)) +
                         (eager ? m.eager_extra_packets : m.rndv_extra_packets);
  return protocol + uint64_t(packets * double(m.packet_header_bytes) + 0.5);
}

// The ring backend's messages: one per step of RingSchedule to the next position (zero-length
// chunks send nothing); broadcast and reduce in the chain's pieces; all-to-all one block per peer.
std::vector<uint64_t> ring_inter_messages(const LedgerEntry& e, const Topology& topo) {
  std::vector<uint64_t> out;
  const Group& g = topo.group(e.group);
  const int n = g.size(), i = g.index;
  const CollAlgo algo = collective_spec(e.kind).algo;
  if (n <= 1 || algo == CollAlgo::kNone) return out;
  if (algo == CollAlgo::kPairwise) {  // one message of a block to each peer off the node
    const uint64_t block = alltoall_block_elements(e.count, n) * dtype_bytes(e.dtype);
    for (int s = 1; s < n; ++s)
      if (block > 0 && !topo.same_node(g.ranks[i], g.ranks[alltoall_send_peer(n, i, s)]))
        out.push_back(block);
    return out;
  }
  const RingSchedule ring(e.kind, e.count, n, i, e.kind == CollKind::kReduce ? e.root_index : 0);
  if (topo.same_node(g.ranks[i], g.ranks[ring.next()])) return out;
  const uint64_t es = dtype_bytes(e.dtype);
  auto add = [&](uint64_t bytes) {
    if (bytes > 0) out.push_back(bytes);
  };
  for (int s = 0; s < ring.steps(); ++s) add(uint64_t(ring.send_chunk(s).len) * es);
  if (algo == CollAlgo::kChain && ring.sent_elements() > 0) {  // the chain's pieces
    const uint64_t total = uint64_t(e.count) * es;
    for (uint64_t off = 0; off < total; off += kBroadcastPieceBytes)
      add(std::min<uint64_t>(kBroadcastPieceBytes, total - off));
  }
  return out;
}

uint64_t link_overhead_model_bytes(const std::vector<LedgerEntry>& entries, const Topology& topo,
                                   const LinkModel& m) {
  uint64_t sum = 0;
  for (const LedgerEntry& e : entries)
    for (uint64_t bytes : ring_inter_messages(e, topo))
      sum += link_message_overhead_bytes(bytes, m);
  return sum;
}

}  // namespace sb
