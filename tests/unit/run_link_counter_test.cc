// The link model's message list mirrors the ring: for every kind, group and shape, the inter-node
// messages of ring_inter_messages add up to ring_model_sent's inter bytes (so the overhead is
// counted on exactly the ledger's transfers); the per-message overhead follows the model's
// packet and protocol rules; without SB_LINK_IFACE the counters are unavailable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>

#include "harness/launch/link_counter.h"

namespace sb {
namespace {

TEST(LinkCounter, RingMessagesSumToTheLedgersInterBytes) {
  for (auto [world, rpn] : {std::pair{4, 2}, {6, 3}, {8, 2}, {2, 1}, {4, 4}}) {
    for (int rank = 0; rank < world; ++rank) {
      const Topology topo = Topology::virtual_nodes(world, rank, rpn);
      for (GroupKind g : {GroupKind::kWorld, GroupKind::kIntra, GroupKind::kInter}) {
        const Group& group = topo.group(g);
        for (CollKind k : {CollKind::kAllReduce, CollKind::kReduceScatter, CollKind::kAllGather,
                           CollKind::kBroadcast, CollKind::kReduce}) {
          for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(1) << 20}) {
            if (k == CollKind::kReduceScatter || k == CollKind::kAllGather)
              count -= count % size_t(group.size());  // whole blocks, as the strategies issue
            LedgerEntry e;
            e.kind = k;
            e.group = g;
            e.group_size = group.size();
            e.count = count;
            e.dtype = DType::kF32;
            if (k == CollKind::kReduce) e.root_index = group.size() - 1;  // not the chain's 0
            const auto msgs = ring_inter_messages(e, topo);
            const uint64_t sum = std::accumulate(msgs.begin(), msgs.end(), uint64_t(0));
            EXPECT_EQ(sum, ring_model_sent(k, count, e.dtype, group, topo, e.root_index).inter)
                << coll_name(k) << " " << group_name(g) << " world " << world << " rpn " << rpn
                << " rank " << rank << " count " << count;
            for (uint64_t m : msgs) EXPECT_GT(m, 0u);
          }
        }
      }
    }
  }
}

TEST(LinkCounter, MessageOverheadFollowsThePacketAndProtocolRules) {
  const LinkModel m;
  EXPECT_EQ(link_message_overhead_bytes(0, m), 0u);
  // eager, one packet: 24 B protocol + (1 data + 1 ACK) packets of 52 B
  EXPECT_EQ(link_message_overhead_bytes(8, m), 24u + 2 * 52u);
  // eager up to the limit: data packets of payload + protocol
  const uint64_t s = 60000;
  EXPECT_EQ(link_message_overhead_bytes(s, m), 24u + ((s + 24 + 1447) / 1448 + 1) * 52u);
  // rendezvous: ≈160 B protocol + its data packets + 5.5 control/ACK packets
  const uint64_t r = 1 << 20;
  EXPECT_EQ(link_message_overhead_bytes(r, m),
            160u + uint64_t(((r + 1447) / 1448 + 5.5) * 52 + 0.5));
  // about 3.6 % of a large payload: the header share at MTU 1500 (52 / 1448)
  const double share = double(link_message_overhead_bytes(64 << 20, m)) / double(64 << 20);
  EXPECT_NEAR(share, 52.0 / 1448, 0.001);
}

TEST(LinkCounter, UnavailableWithoutAnInterface) {
  unsetenv("SB_LINK_IFACE");
  EXPECT_FALSE(read_link_sample().available);
  setenv("SB_LINK_IFACE", "sb-no-such-iface", 1);
  EXPECT_FALSE(read_link_sample().available);
  setenv("SB_LINK_IFACE", "../../etc", 1);
  EXPECT_FALSE(read_link_sample().available);
  setenv("SB_LINK_IFACE", "lo", 1);  // loopback exists in every namespace
  const LinkSample s = read_link_sample();
  EXPECT_TRUE(s.available);
  unsetenv("SB_LINK_IFACE");
}

}  // namespace
}  // namespace sb
