// What crossed this host's network link, as the kernel counts it: the byte and packet counters
// of the interface named by SB_LINK_IFACE (set per host by ci/two_host.sh) and TCP's
// retransmitted segments, both of this process's network namespace; one rank per node samples
// between barriers (MpiRuntime), the trainer decides when. The model of what a message adds
// besides its payload (headers, ACKs, MPI protocol) is kept apart from the counts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/comm/ledger.h"
#include "harness/comm/mpi_runtime.h"
#include "harness/topology.h"

namespace sb {

struct LinkSample {
  uint64_t tx_bytes = 0, rx_bytes = 0;      // /sys/class/net/<iface>/statistics
  uint64_t tx_packets = 0, rx_packets = 0;  // idem
  uint64_t retrans_segs = 0;                // /proc/net/snmp, Tcp: RetransSegs
  bool available = false;                   // false: no SB_LINK_IFACE, or it cannot be read
};

// The interface named by SB_LINK_IFACE ("" when unset).
std::string link_iface();
// Reads the counters now. Cheap (a few small files); call it between barriers.
LinkSample read_link_sample();

// Collective (every rank): barrier, local rank 0 of each node reads its link, barrier. So the
// traffic issued before the call has crossed, and none issued after it has started.
LinkSample sample_link(const MpiRuntime& mpi, const Topology& topo);

// What crossed all the links between two samples, summed over the nodes (collective).
struct LinkTraffic {
  bool available = false;  // every node read its counters both times
  uint64_t tx_bytes = 0;   // both directions: Σ tx of every link end
  uint64_t tx_packets = 0;
  uint64_t retrans_segs = 0;  // TCP segments sent again (their bytes are in tx_bytes)
  // tx_bytes less the retransmitted segments (each taken as MSS + headers).
  uint64_t bytes_without_retransmits(uint64_t segment_bytes = 1500) const {
    const uint64_t r = retrans_segs * segment_bytes;
    return tx_bytes > r ? tx_bytes - r : 0;
  }
};
LinkTraffic link_traffic(const LinkSample& before, const LinkSample& after, const MpiRuntime& mpi,
                         const Topology& topo);
// Collective: what crossed the links while every rank ran `body`, sampled as above.
LinkTraffic measure_link(const MpiRuntime& mpi, const Topology& topo,
                         const std::function<void()>& body);

// The link as the model sees it: MTU 1500, TCP with timestamps, Open MPI ob1 over the TCP BTL.
// A veth with GRO counts a packet where its peer receives it, Ethernet header already pulled:
// 52 B (IPv4 20 + TCP 32) per packet beside the payload; MSS = 1500 - 52.
// Measured per message on a veth pair (ci/two_host.sh): besides its data packets an eager
// message brings ≈0.8-1.4 packets (pure ACKs; fewer in a ring, where ACKs ride on data), a
// rendezvous one ≈5.5 (its control messages, its fragments' partial last segments, pure ACKs);
// ob1 adds 24 B (BTL 8 + match 16) to an eager message and ≈160 B to a rendezvous one
// (rendezvous header, the receiver's ACK, fragment headers), whatever its size.
struct LinkModel {
  uint64_t mss = 1448;
  uint64_t packet_header_bytes = 52;
  uint64_t eager_limit = 65536;  // btl_tcp_eager_limit (payload + match header)
  uint64_t match_header_bytes = 16;
  uint64_t eager_protocol_bytes = 24;
  uint64_t rndv_protocol_bytes = 160;
  double eager_extra_packets = 1.0;
  double rndv_extra_packets = 5.5;
};

// Bytes besides payload that one MPI message of `payload` bytes puts on the link, both
// directions together (its packets' headers, its share of pure ACKs, the MPI protocol).
uint64_t link_message_overhead_bytes(uint64_t payload, const LinkModel& m = {});

// Payload sizes of the point-to-point messages this rank sends to another node for one
// ledger entry, as the ring backend moves them (uneven chunks included). Collectives the MPI
// library runs itself are given the ring's messages too: that is the ring model, not theirs.
std::vector<uint64_t> ring_inter_messages(const LedgerEntry& e, const Topology& topo);

// Σ over this rank's entries and their inter-node messages of link_message_overhead_bytes.
uint64_t link_overhead_model_bytes(const std::vector<LedgerEntry>& entries, const Topology& topo,
                                   const LinkModel& m = {});

}  // namespace sb
