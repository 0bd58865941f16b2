// One peer's channel in a communicator: a send area here and a receive area
// at the peer (and the reverse), each of `slots` chunks, used as a ring.
// Chunk number k of the channel always uses slot k % slots on both sides.
//
// Flow control: the sender may post chunk k only when
//   - its send slot is free (the write of chunk k - slots completed here), and
//   - the peer has consumed chunk k - slots (credits: the peer's cumulative
//     consumed count arrives in credit notifications),
// so a fast sender never overwrites a chunk the receiver has not used.
// Counters run for the communicator's whole life.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fabrix::coll::detail {

struct channel {
  // --- towards the peer ---
  std::uint64_t sent = 0;             // chunks posted
  std::uint64_t peer_consumed = 0;    // what its credits say it has consumed
  std::vector<std::uint8_t> sending;  // per send slot: a write is in flight
  // --- from the peer ---
  std::uint64_t consumed = 0;               // chunks used here
  std::uint64_t credited = 0;               // `consumed` as last told to the peer
  std::vector<std::uint64_t> landed;        // per receive slot: chunk number + 1, 0 = empty
  std::vector<std::uint32_t> landed_bytes;  // per receive slot: bytes of that chunk
  // --- liveness ---
  bool probing = false;  // a probe flush is in flight
  // Barrier notifications received from this peer, per dissemination round.
  std::uint64_t barrier_seen[32] = {};

  explicit channel(std::uint32_t slots) : sending(slots, 0), landed(slots, 0), landed_bytes(slots, 0) {}
};

}  // namespace fabrix::coll::detail
